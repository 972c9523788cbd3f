"""Priority aging (part 2 of issue 29, "fair claiming"): in a queue of
``PQJOBS["PRIORITY_AGING"]``, a due job's priority rises by 1 for each ``every`` it waits,
up to the queue's cap, so a stream of higher-priority jobs cannot starve it for ever."""

from __future__ import annotations

import logging
import signal
import time
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_pqjobs import enqueue_job, enqueue_many, transitions
from django_pqjobs.conf import Aging, Settings, conf
from django_pqjobs.models import Job
from django_pqjobs.worker import housekeeping
from django_pqjobs.worker.maintenance import Maintenance, aging_interval
from tests.helpers import check_ids, make_user, run_jobs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CHECK = "pqjobs.E053"
MINUTE = 60.0


def job(
    priority: int = 0,
    *,
    queue: str = "aging",
    due: float = 120,
    changed: float | None = None,
    status: str = "ready",
) -> int:
    """A job of ``queue``, due ``due`` seconds ago (negative: in the future) and last
    changed ``changed`` seconds ago (by default as long ago as it was due)."""
    job_id = enqueue_job("tests.echo", {}, queue=queue, priority=priority)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pqjobs_job SET status = %s, run_after = now() - make_interval(secs => %s), "
            "updated_at = now() - make_interval(secs => %s) WHERE id = %s",
            [status, due, due if changed is None else changed, job_id],
        )
    return job_id


def priorities(*job_ids: int) -> list[int]:
    found = dict(Job.objects.filter(pk__in=job_ids).values_list("pk", "priority"))
    return [found[job_id] for job_id in job_ids]


def wait(job_id: int, seconds: float) -> None:
    """As if ``seconds`` more had passed for the job: its due time and last change earlier."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pqjobs_job SET run_after = run_after - make_interval(secs => %s), "
            "updated_at = updated_at - make_interval(secs => %s) WHERE id = %s",
            [seconds, seconds, job_id],
        )


# --- the transition ---------------------------------------------------------------------------


def test_the_sweep_raises_exactly_the_due_ready_jobs_of_the_queue_that_waited_every():
    eligible = [job(0), job(9, due=61), job(-5, due=3600)]
    untouched = [
        job(0, queue="other"),  # another queue
        job(10),  # at the cap
        job(12),  # above it
        job(0, due=30, changed=120),  # due for less than every
        job(0, due=120, changed=30),  # changed less than every ago
        job(0, due=-60, changed=120),  # not due yet
        *(
            job(0, status=status)
            for status in ("blocked", "waiting", "running", "done", "failed", "cancelled")
        ),
    ]
    before = priorities(*untouched)
    assert transitions.raise_priority("default", "aging", MINUTE, 10) == 3
    assert priorities(*eligible) == [1, 10, -4]
    assert priorities(*untouched) == before
    raised = Job.objects.filter(pk__in=eligible)
    assert {j.status for j in raised} == {"ready"}
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        now = cursor.fetchone()[0]
    assert all(now - j.updated_at < timedelta(seconds=5) for j in raised)
    # a second sweep within every raises nothing: each raise starts the next wait
    assert transitions.raise_priority("default", "aging", MINUTE, 10) == 0
    assert priorities(*eligible) == [1, 10, -4]


def test_a_job_that_waits_k_intervals_is_raised_k_times_never_past_the_cap():
    low, high = job(0, due=MINUTE), job(7, due=MINUTE)
    for k in range(1, 6):
        assert transitions.raise_priority("default", "aging", MINUTE, 10) == (2 if k <= 3 else 1)
        assert priorities(low, high) == [k, min(7 + k, 10)]
        # half an interval later: nothing
        wait(low, MINUTE / 2)
        wait(high, MINUTE / 2)
        assert transitions.raise_priority("default", "aging", MINUTE, 10) == 0
        wait(low, MINUTE / 2)
        wait(high, MINUTE / 2)
    assert priorities(low, high) == [5, 10]


def test_the_sweep_raises_a_bounded_batch_and_skips_the_jobs_a_claim_holds():
    ids = [job(0) for _ in range(5)]
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params) as other:  # a claim in the middle of its transaction
        other.execute("SELECT id FROM pqjobs_job WHERE id = %s FOR UPDATE", [ids[0]])
        with connection.cursor() as cursor:  # never waits for the lock: a wait would fail
            cursor.execute("SET lock_timeout = '1s'")  # after 1 s, however slow the machine
        try:
            assert transitions.raise_priority("default", "aging", MINUTE, 10, batch=3) == 3
            assert transitions.raise_priority("default", "aging", MINUTE, 10, batch=3) == 1
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
        other.rollback()
    assert sorted(priorities(*ids)) == [0, 1, 1, 1, 1]
    assert priorities(ids[0]) == [0]  # the held one, left for the next sweep


def test_a_raised_job_loses_its_fair_turn_and_is_placed_by_age():
    job_id = job(0)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pqjobs_job SET fair_key = 'k', fair_turn = 3 WHERE id = %s", [job_id]
        )
    assert transitions.raise_priority("default", "aging", MINUTE, 10) == 1
    raised = Job.objects.get(pk=job_id)
    assert (raised.priority, raised.fair_key, raised.fair_turn) == (1, "k", None)


def test_the_sweep_reads_the_ready_jobs_through_the_claim_index_not_the_table():
    Job.objects.bulk_create(
        [Job(job_type="t", status="done", payload={}) for _ in range(3000)]
        + [Job(job_type="t", payload={}, priority=n % 20, queue=f"q{n % 5}") for n in range(500)]
    )
    params = {"queue": "q1", "every": MINUTE, "up_to": 10, "batch": 1000}
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pqjobs_job")
        cursor.execute(f"EXPLAIN {transitions.aging.QUERIES['raise_priority']}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "using pqjobs_job_claim" in plan, plan
    assert "Seq Scan" not in plan, plan


# --- the maintenance step ---------------------------------------------------------------------


AGING = {"aging": Aging(every=MINUTE, up_to=10), "other": Aging(every=MINUTE, up_to=3)}


def test_the_step_sweeps_every_aging_queue_and_logs_once_when_it_raised_some(caplog):
    job(0), job(1), job(0, queue="other"), job(0, queue="not-aging")
    caplog.set_level(logging.INFO, logger="django_pqjobs")
    assert housekeeping.age_priorities("default", AGING) == {"aging": 2, "other": 1}
    lines = [r.getMessage() for r in caplog.records if "priority aging" in r.getMessage()]
    assert lines == [
        "priority aging raised by 1 the priority of 2 jobs of queue aging, 1 job of queue other"
    ]
    assert {r.levelno for r in caplog.records if "priority aging" in r.getMessage()} == {
        logging.INFO
    }
    caplog.clear()
    assert housekeeping.age_priorities("default", AGING) == {}
    assert not [r for r in caplog.records if "priority aging" in r.getMessage()]


def test_the_step_reads_the_setting_and_does_nothing_without_it(settings):
    job_id = job(0)
    settings.PQJOBS = {**settings.PQJOBS, "PRIORITY_AGING": {}}
    with CaptureQueriesContext(connection) as captured:
        assert housekeeping.age_priorities("default") == {}
    assert not captured.captured_queries  # not even the lock
    settings.PQJOBS = {**settings.PQJOBS, "PRIORITY_AGING": {"aging": {"every": 60, "up_to": 5}}}
    assert housekeeping.age_priorities("default") == {"aging": 1}
    assert priorities(job_id) == [1]


def test_one_worker_at_a_time_sweeps():
    job_id = job(0)
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", [housekeeping.AGING_LOCK_KEY])
        assert housekeeping.age_priorities("default", AGING) is None
        other.rollback()
    assert priorities(job_id) == [0]
    assert housekeeping.age_priorities("default", AGING) == {"aging": 1}


def test_the_sweep_runs_every_5_s_or_half_the_shortest_every():
    assert aging_interval({}) is None
    assert aging_interval({"a": Aging(MINUTE, 10)}) == 5.0
    assert aging_interval({"a": Aging(MINUTE, 10), "b": Aging(3, 10)}) == 1.5
    assert aging_interval({"a": Aging(0.2, 10)}) == 0.5
    assert "age_priorities" in Maintenance.STEPS
    assert all(callable(getattr(Maintenance, name)) for name in Maintenance.STEPS)


# --- the setting ------------------------------------------------------------------------------


def test_the_setting_reads_durations_as_every_other_duration():
    with override_settings(PQJOBS={}):
        assert conf.PRIORITY_AGING == {}
    value = {
        "reports": {"every": "5m", "up_to": 10},
        "exports": {"every": timedelta(seconds=90), "up_to": "high"},
        "emails": {"every": 30, "up_to": -2},
    }
    with override_settings(PQJOBS={"PRIORITY_AGING": value}):
        read = conf.PRIORITY_AGING
        assert read == {
            "reports": Aging(300.0, 10),
            "exports": Aging(90.0, 50),  # Priority.HIGH
            "emails": Aging(30.0, -2),
        }
    assert str(Aging(60.0, 10)) == "+1 every 1 m, up to 10"
    assert str(Aging(5400.0, 3)) == "+1 every 1 h 30 m, up to 3"
    assert check_ids(PRIORITY_AGING=value) == set()
    assert Settings.declaration("PRIORITY_AGING").check_id == CHECK


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["reports"], "PQJOBS['PRIORITY_AGING'] must be a dict of queue name"),
        ({"reports": "1m"}, "PQJOBS['PRIORITY_AGING']['reports'] must be a dict"),
        (
            {"reports": {"every": "1m", "up_to": 10, "evry": 5}},
            "PQJOBS['PRIORITY_AGING']['reports'] has unknown keys ['evry']; it takes 'every' "
            "and 'up_to'",
        ),
        ({"reports": {"every": "1m"}}, "PQJOBS['PRIORITY_AGING']['reports'] has no 'up_to'"),
        ({"reports": {"up_to": 10}}, "PQJOBS['PRIORITY_AGING']['reports'] has no 'every'"),
        (
            {"reports": {"every": 0, "up_to": 10}},
            "PQJOBS['PRIORITY_AGING']['reports']['every'] must be more than zero seconds",
        ),
        (
            {"reports": {"every": -60, "up_to": 10}},
            "PQJOBS['PRIORITY_AGING']['reports']['every'] must be more than zero seconds",
        ),
        (
            {"reports": {"every": float("nan"), "up_to": 10}},
            "PQJOBS['PRIORITY_AGING']['reports']['every'] must be a finite duration",
        ),
        (
            {"reports": {"every": "nan", "up_to": 10}},
            "PQJOBS['PRIORITY_AGING']['reports']['every']: 'nan' is not a duration",
        ),
        (
            {"reports": {"every": "soon", "up_to": 10}},
            "PQJOBS['PRIORITY_AGING']['reports']['every']: 'soon' is not a duration",
        ),
        (
            {"reports": {"every": "1m", "up_to": 10.5}},
            "PQJOBS['PRIORITY_AGING']['reports']['up_to'] must be a whole number",
        ),
        (
            {"reports": {"every": "1m", "up_to": "10"}},
            "PQJOBS['PRIORITY_AGING']['reports']['up_to'] must be a whole number",
        ),
        (
            {"reports": {"every": "1m", "up_to": True}},
            "PQJOBS['PRIORITY_AGING']['reports']['up_to'] must be a whole number",
        ),
        (
            {"reports": {"every": "1m", "up_to": None}},
            "PQJOBS['PRIORITY_AGING']['reports']['up_to'] must be a whole number",
        ),
        ({"": {"every": "1m", "up_to": 10}}, "PQJOBS['PRIORITY_AGING'] key must be a non-empty"),
        (
            {"re\nports": {"every": "1m", "up_to": 10}},
            "PQJOBS['PRIORITY_AGING'] key must not contain control characters: 're\\nports'",
        ),
        (
            {"q" * 101: {"every": "1m", "up_to": 10}},
            "PQJOBS['PRIORITY_AGING'] key is longer than 100 characters",
        ),
        ({7: {"every": "1m", "up_to": 10}}, "PQJOBS['PRIORITY_AGING'] key must be a non-empty"),
    ],
    ids=[
        "not-a-dict",
        "queue-not-a-dict",
        "unknown-key",
        "no-up_to",
        "no-every",
        "zero-every",
        "negative-every",
        "nan-every",
        "nan-text-every",
        "bad-text-every",
        "float-cap",
        "text-cap",
        "bool-cap",
        "none-cap",
        "empty-queue",
        "control-character-queue",
        "long-queue",
        "number-queue",
    ],
)
def test_a_bad_setting_is_refused_naming_the_queue_and_the_problem(value, message):
    from django.core.checks import run_checks

    with override_settings(PQJOBS={"PRIORITY_AGING": value}):
        with pytest.raises(ValueError) as refused:
            conf.PRIORITY_AGING  # noqa: B018
        found = [m.msg for m in run_checks() if m.id == CHECK]
    assert message in str(refused.value)
    assert found == [str(refused.value)]


# --- what operators see -----------------------------------------------------------------------


def test_the_dashboard_says_which_queues_age_and_how(settings):
    operator = make_user("operator", "view_job")
    page = operator.get(reverse("admin:django_pqjobs_job_dashboard")).content.decode()
    assert "priority aging" not in page
    settings.PQJOBS = {
        **settings.PQJOBS,
        "PRIORITY_AGING": {
            "reports": {"every": "1m", "up_to": 10},
            "emails": {"every": 90, "up_to": 5},
        },
    }
    page = operator.get(reverse("admin:django_pqjobs_job_dashboard")).content.decode()
    assert "<strong>reports</strong>: priority aging: +1 every 1 m, up to 10" in page
    assert "<strong>emails</strong>: priority aging: +1 every 1 m 30 s, up to 5" in page
    settings.PQJOBS = {**settings.PQJOBS, "PRIORITY_AGING": {"reports": {"every": 0}}}
    response = operator.get(reverse("admin:django_pqjobs_job_dashboard"))
    assert response.status_code == 200  # a broken setting is the system check's to report
    assert "priority aging" not in response.content.decode()


# --- a real worker ----------------------------------------------------------------------------

STREAM_QUEUE = "aging"  # tests/settings_priority_aging.py: +1 every 1 s, up to 10
STREAM_PRIORITY = 10
EVERY, CAP = 1.0, 10
SWEEP = 0.5  # aging_interval(): half of every
# The documented bound: a job at priority p reaches the cap after (cap - p) x every of
# waiting, each raise landing up to one sweep late; then it is the oldest job of the cap's
# priority, claimed as soon as the executor is free.
BOUND = CAP * (EVERY + SWEEP)


def stream(until: float, done: int | None = None) -> int:
    """Keep three priority-10 jobs of 0.1 s due in the queue until the monotonic time
    ``until`` (or until job ``done`` is done); returns how many were enqueued."""
    sent = 0
    while time.monotonic() < until:
        if done is not None and Job.objects.filter(pk=done, status="done").exists():
            break
        waiting = Job.objects.filter(
            queue=STREAM_QUEUE, priority=STREAM_PRIORITY, status="ready"
        ).count()
        if waiting < 3:
            enqueue_many(
                "tests.sleep",
                [{"seconds": 0.1}] * (3 - waiting),
                queue=STREAM_QUEUE,
                priority=STREAM_PRIORITY,
            )
            sent += 3 - waiting
        time.sleep(0.05)
    return sent


def streamed_for(seconds: float) -> bool:
    stream(time.monotonic() + seconds)
    return True


def stream_done() -> int:
    return Job.objects.filter(job_type="tests.sleep", status="done").count()


@pytest.mark.slow
def test_a_stream_of_high_priority_jobs_starves_a_low_one_only_without_aging():
    """One executor, always three priority-10 jobs due: without aging the priority-0 job
    never runs; with aging (+1 every 1 s, up to 10) it runs within (10 - 0) x (1 s + one
    sweep of 0.5 s) of waiting, and not before it reached the cap."""
    low = enqueue_job("tests.echo", {"n": "low"}, queue=STREAM_QUEUE, priority=0)
    args = ("--concurrency", "1", "--queue", STREAM_QUEUE)
    with run_jobs(*args) as worker:  # no aging: tests.settings
        wait_for(lambda: streamed_for(0.5) and stream_done() > 0)
        stream(time.monotonic() + 4)
        wait_for(lambda: streamed_for(0.5) and stream_done() >= 10)
        starved = Job.objects.get(pk=low)
        assert (starved.status, starved.priority) == ("ready", 0)
        worker.signal(signal.SIGTERM)
        assert worker.wait(timeout=120) == 0
    before = stream_done()
    with run_jobs(*args, DJANGO_SETTINGS_MODULE="tests.settings_priority_aging") as worker:
        started = time.monotonic()
        # streams until the job ran; the bound is only a hang guard (the worker's start and
        # each sweep may be seconds late on a loaded machine)
        stream(started + BOUND + 120, done=low)
        took = time.monotonic() - started
        ran = Job.objects.get(pk=low)
        assert ran.status == "done", (took, ran.priority, worker.output())
        assert "priority aging raised by 1 the priority of 1 job of queue aging" in worker.output()
    assert ran.priority == CAP  # it ran once it reached the cap, not before
    # ten raises at least 1 s apart, the first one at the worker's first sweep
    assert took >= (CAP - 1) * EVERY, took
    assert stream_done() - before >= 20  # the stream went on all along
