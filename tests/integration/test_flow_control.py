"""Flow control against real PostgreSQL: concurrency limits per key, rate limits, pauses.

The first part drives the claim statement directly; the second runs real ``run_jobs``
processes and samples the database while they work.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction

from django_pqjobs import InvalidJobOption, QueueFull, enqueue_job, enqueue_many, flow, transitions
from django_pqjobs.clock import database_now
from django_pqjobs.models import Job, KeySlots, OperatorAction, RateBucket
from django_pqjobs.transitions import Completion, Fence
from django_pqjobs.worker.claiming import claim_jobs
from tests.helpers import bound, planned_inside, run_jobs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
DB = "default"


def statuses(ids: list[int]) -> Counter[str]:
    return Counter(Job.objects.filter(pk__in=ids).values_list("status", flat=True))


def finish(job: Job) -> None:
    assert transitions.complete(DB, Completion(Fence.of(job), None, 1))


def got_in_ready(ids: list[int]) -> None:
    """Make ready the jobs held when enqueued: as jobs enqueued while their key filled up
    (two enqueuers at once) or their queue was being paused get in, for the claim to hold."""
    Job.objects.filter(pk__in=ids, status="blocked").update(status="ready", blocked_by=None)


# --- concurrency limits ----------------------------------------------------------------------


def test_a_key_at_its_limit_holds_its_jobs_at_enqueue_and_a_freed_slot_releases_the_next():
    ids = [enqueue_job("tests.limited3", {"k": "a"}) for _ in range(5)]
    other = enqueue_job("tests.limited3", {"k": "b"})
    # the key's limit is 3: the jobs after the third are held when enqueued
    assert statuses(ids) == {"ready": 3, "blocked": 2}
    batch = claim_jobs(DB, "w", None, 10)
    assert {j.id for j in batch.jobs} == {*ids[:3], other}  # 3 of key a, 1 of key b
    assert batch.blocked == 0
    assert statuses(ids) == {"running": 3, "blocked": 2}
    assert KeySlots.objects.get(pk="k:a").running == 3
    assert set(Job.objects.filter(status="blocked").values_list("blocked_by", flat=True)) == {
        "limit"
    }
    # finishing one gives its slot back and releases the next blocked job, in claim order
    finish(next(j for j in batch.jobs if j.id == ids[0]))
    assert KeySlots.objects.get(pk="k:a").running == 2
    assert Job.objects.get(pk=ids[3]).status == "ready"
    assert Job.objects.get(pk=ids[4]).status == "blocked"
    (again,) = claim_jobs(DB, "w", None, 10).jobs
    assert again.id == ids[3]


@pytest.mark.parametrize("way_out", ["retry", "fail", "release", "rescue", "delete"])
def test_every_way_out_of_running_gives_the_slot_back(way_out):
    first, second = (enqueue_job("tests.limited", {"k": "x"}) for _ in range(2))
    (job,) = claim_jobs(DB, "w", None, 10).jobs
    assert job.id == first and Job.objects.get(pk=second).status == "blocked"
    fence = Fence.of(job)
    if way_out in ("retry", "fail"):
        transitions.end_attempt(
            DB,
            fence,
            failure="error",
            error_type="E",
            error="e",
            duration_ms=1,
            delay=3600,
            then="auto" if way_out == "retry" else "failed",
        )
    elif way_out == "release":
        transitions.release(DB, [fence])
    elif way_out == "rescue":
        Job.objects.filter(pk=first).update(heartbeat_at=job.locked_at - timedelta(hours=1))
        transitions.rescue_stale(DB, 60)
    else:
        Job.objects.filter(pk=first).delete()
    assert KeySlots.objects.get(pk="k:x").running == 0
    assert Job.objects.get(pk=second).status == "ready"


def test_explicit_concurrency_key_and_type_wide_limits():
    a = enqueue_job("tests.limited", {"k": "ignored"}, concurrency_key="custom")
    b = enqueue_job("tests.capped_skip")  # concurrency=1 and no key: the type is the key
    assert Job.objects.get(pk=a).concurrency_key == "custom"
    assert Job.objects.get(pk=b).concurrency_key == "tests.capped_skip"
    with pytest.raises(Exception, match="needs a limit"):
        enqueue_job("tests.noop", concurrency_key="k")
    with pytest.raises(Exception, match="needs the payload field 'k'"):
        enqueue_job("tests.limited", {})


# the forms of 1 a payload may hold (True is refused, not a key of its own)
ONES = [1, 1.0, "01", " 1", "1"]


@pytest.mark.parametrize("enqueue", ["one by one", "many"])
def test_values_that_mean_the_same_share_one_key_and_one_slot(enqueue):
    if enqueue == "many":
        ids = enqueue_many("tests.limited", [{"k": one} for one in ONES])
    else:
        ids = [enqueue_job("tests.limited", {"k": one}) for one in ONES]
    keys = set(Job.objects.filter(pk__in=ids).values_list("concurrency_key", flat=True))
    assert keys == {"k:1"}
    # the key's limit of 1 decides at enqueue: the first is ready, the others held already
    statuses = list(Job.objects.filter(pk__in=ids).order_by("id").values_list("status", flat=True))
    assert statuses == ["ready"] + ["blocked"] * 4
    batch = claim_jobs(DB, "w", None, 10)  # ten free slots
    assert (len(batch.jobs), batch.blocked) == (1, 0)
    assert KeySlots.objects.get(pk="k:1").running == 1
    with pytest.raises(InvalidJobOption, match=r"'k' is a bool \(True\); .*because True == 1"):
        enqueue_job("tests.limited", {"k": True})
    assert Job.objects.count() == 5


def test_a_separator_in_a_value_cannot_merge_two_keys():
    first = enqueue_job("tests.per_user", {"tenant": "a:b", "user": "c"})
    second = enqueue_job("tests.per_user", {"tenant": "a", "user": "b:c"})
    keys = dict(Job.objects.values_list("id", "concurrency_key"))
    assert keys == {first: "tenant:a%3Ab:user:c", second: "tenant:a:user:b%3Ac"}
    assert {j.id for j in claim_jobs(DB, "w", None, 10).jobs} == {first, second}


def test_a_bad_key_value_is_refused_before_anything_is_written():
    payloads = [{"k": 1}, {"k": "acme\x07"}, {"k": 2}]  # one bad job of three
    with pytest.raises(InvalidJobOption, match=r"field 'k' holds a control character \(U\+0007\)"):
        enqueue_many("tests.limited", payloads)
    with pytest.raises(InvalidJobOption, match=r"field 'k' holds a control character \(U\+0085\)"):
        enqueue_job("tests.limited", {"k": "acme\x85"})
    with pytest.raises(InvalidJobOption, match="must not contain control characters"):
        enqueue_job("tests.limited", {"k": 1}, concurrency_key="acme\n")
    assert not Job.objects.exists()


def test_max_waiting_refuses_or_returns_the_newest_waiting_job():
    enqueue_job("tests.capped", {"k": 1})
    enqueue_job("tests.capped", {"k": 1})
    with pytest.raises(QueueFull, match="already has 2 jobs waiting"):
        enqueue_job("tests.capped", {"k": 1})
    enqueue_job("tests.capped", {"k": 2})  # another key has room
    first = enqueue_job("tests.capped_skip")
    assert enqueue_job("tests.capped_skip") == first
    with pytest.raises(Exception, match="enqueue_many cannot apply"):
        enqueue_many("tests.capped", [{"k": 3}])


def test_enqueue_many_derives_a_key_per_payload():
    ids = enqueue_many("tests.limited", [{"k": n % 2} for n in range(6)])
    keys = Counter(Job.objects.filter(pk__in=ids).values_list("concurrency_key", flat=True))
    assert keys == {"k:0": 3, "k:1": 3}
    # one INSERT statement: each row sees the rows of its key inserted before it
    assert statuses(ids) == {"ready": 2, "blocked": 4}
    batch = claim_jobs(DB, "w", None, 10)
    assert len(batch.jobs) == 2 and batch.blocked == 0


def test_a_blocked_job_is_active_for_dedupe_and_can_be_cancelled():
    enqueue_job("tests.limited", {"k": "d"})
    dup = enqueue_job("tests.limited", {"k": "d"}, dedupe_key="same")
    claim_jobs(DB, "w", None, 10)
    assert Job.objects.get(pk=dup).status == "blocked"
    assert enqueue_job("tests.limited", {"k": "d"}, dedupe_key="same") == dup
    assert transitions.cancel(DB, dup) == "cancelled"


def test_unlimited_jobs_are_claimed_beside_blocked_ones():
    enqueue_many("tests.limited", [{"k": "hot"}] * 50)
    free = enqueue_many("tests.noop", [{}] * 5)
    claimed: list[int] = []
    for _ in range(5):
        claimed += [j.id for j in claim_jobs(DB, "w", None, 20).jobs]
    assert set(free) <= set(claimed)
    assert Job.objects.filter(status="blocked").count() == 49


# --- rate limits -----------------------------------------------------------------------------


def test_a_rate_starts_at_most_its_allowance_per_window_and_releases_the_rest_later():
    # start right after a window boundary, so the whole test fits in one window
    wait_for(lambda: database_now(DB).microsecond < 200_000, timeout=2, interval=0.01)
    ids = enqueue_many("tests.rated", [{}] * 30)
    assert statuses(ids) == {"ready": 20, "blocked": 10}  # held at enqueue: no room
    batch = claim_jobs(DB, "w", None, 50)
    assert (len(batch.jobs), batch.blocked) == (20, 0)
    assert RateBucket.objects.get(pk="type:tests.rated").used == 20
    assert transitions.promote_rate_blocked(DB) == 0  # no room left in this window
    wait_for(lambda: transitions.promote_rate_blocked(DB), timeout=3, interval=0.05)
    assert statuses(ids)["ready"] == 10
    assert len(claim_jobs(DB, "w", None, 50).jobs) == 10


def test_queue_rates_from_settings(settings):
    settings.PQJOBS = {**settings.PQJOBS, "QUEUE_RATES": {"slow": "2/h"}}
    ids = enqueue_many("tests.noop", [{}] * 3, queue="slow")
    assert set(Job.objects.filter(pk__in=ids).values_list("rate_key", flat=True)) == {"queue:slow"}
    assert statuses(ids) == {"ready": 2, "blocked": 1}
    batch = claim_jobs(DB, "w", None, 10)
    assert (len(batch.jobs), batch.blocked) == (2, 0)


# --- pause and resume ------------------------------------------------------------------------


def test_pause_holds_a_queue_and_a_type_and_resume_releases_them():
    mail = enqueue_many("tests.noop", [{}] * 3, queue="mail")
    other = enqueue_job("tests.echo")
    assert flow.pause_queue("mail", by="alice")
    assert not flow.pause_queue("mail")
    assert flow.pause_job_type("tests.echo")
    assert [(p.kind, p.name, p.paused_by) for p in flow.paused()] == [
        ("job_type", "tests.echo", ""),
        ("queue", "mail", "alice"),
    ]
    # the ready jobs are held by the pause itself, and a job enqueued now is held at once
    assert statuses([*mail, other]) == {"blocked": 4}
    mail.append(enqueue_job("tests.noop", queue="mail"))
    assert Job.objects.get(pk=mail[-1]).status == "blocked"
    batch = claim_jobs(DB, "w", None, 10)
    assert batch.jobs == [] and batch.blocked == 0
    assert set(Job.objects.values_list("blocked_by", flat=True)) == {"paused"}
    assert flow.resume_queue("mail") == 4
    assert flow.resume_queue("mail") is None
    assert {j.id for j in claim_jobs(DB, "w", None, 10).jobs} == set(mail)
    assert Job.objects.get(pk=other).status == "blocked"
    assert flow.resume_job_type("tests.echo") == 1
    assert [j.id for j in claim_jobs(DB, "w", None, 10).jobs] == [other]


def test_a_pause_holds_so_many_jobs_at_once_and_the_claims_hold_the_rest(monkeypatch):
    from django_pqjobs.transitions import flow as flow_transitions

    monkeypatch.setattr(flow_transitions, "HOLD_AT_PAUSE", 2)
    ids = enqueue_many("tests.noop", [{}] * 5, queue="backlog")
    assert flow.pause_queue("backlog")
    assert statuses(ids) == {"blocked": 2, "ready": 3}
    batch = claim_jobs(DB, "w", None, 10)
    assert batch.jobs == [] and batch.blocked == 3
    assert statuses(ids) == {"blocked": 5}


def test_a_pause_holds_no_more_than_so_many_whatever_the_plan(monkeypatch):
    """The jobs a pause holds are picked once. Picked in "id IN (SELECT ... LIMIT n FOR
    UPDATE SKIP LOCKED)", a plan that ran the subquery again for each row (a nested loop,
    no materialising: what other statistics may choose) found the rows it had just held
    changed, passed over them and picked the next: every job was held, not n."""
    from django_pqjobs.transitions import flow as flow_transitions

    monkeypatch.setattr(flow_transitions, "HOLD_AT_PAUSE", 2)
    ids = enqueue_many("tests.noop", [{}] * 5, queue="backlog")
    with transaction.atomic(), connection.cursor() as cursor:
        for setting in ("hashjoin", "mergejoin", "material", "bitmapscan", "indexscan"):
            cursor.execute(f"SET LOCAL enable_{setting} = off")
        assert flow.pause_queue("backlog")
    assert statuses(ids) == {"blocked": 2, "ready": 3}


def test_the_flow_sweep_releases_no_more_than_the_room_whatever_the_plan():
    """The same for the sweep's releases: picked once, whatever the plan (a subquery of the
    UPDATE's FROM run again per row passed over the rows just released and took more)."""
    ids = enqueue_many("tests.limited", [{"k": "a"}] * 5)
    assert statuses(ids) == {"ready": 1, "blocked": 4}
    Job.objects.filter(pk=ids[0]).update(status="cancelled")  # the key has room for one
    with transaction.atomic(), connection.cursor() as cursor:
        for setting in ("hashjoin", "mergejoin", "material", "bitmapscan", "indexscan"):
            cursor.execute(f"SET LOCAL enable_{setting} = off")
        transitions.promote_limit_blocked(DB)
    assert statuses(ids[1:]) == {"ready": 1, "blocked": 3}


def test_held_summary_names_what_holds_jobs_back():
    enqueue_many("tests.limited", [{"k": "h"}] * 4)
    claim_jobs(DB, "w", None, 10)
    assert flow.held() == [flow.Held("limit", "k:h", 3)]
    assert {d.job_type for d in flow.declared()} >= {"tests.limited", "tests.rated"}


# --- real workers, sampled -------------------------------------------------------------------


class Sampler:
    """Samples, every few milliseconds on its own connection, the most jobs of one key
    running at once."""

    def __init__(self) -> None:
        self.worst = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(bound(10))

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT COALESCE(max(n), 0) FROM (SELECT count(*) AS n FROM pqjobs_job "
                        "WHERE status = 'running' AND concurrency_key IS NOT NULL "
                        "GROUP BY concurrency_key) c"
                    )
                    self.worst = max(self.worst, int(cursor.fetchone()[0]))
                self.samples += 1
                time.sleep(0.003)
        finally:
            connections.close_all()


@pytest.mark.slow
@pytest.mark.parametrize(("job_type", "limit"), [("tests.limited", 1), ("tests.limited3", 3)])
def test_four_workers_never_run_more_than_the_limit_of_a_key(job_type, limit):
    ids = enqueue_many(job_type, [{"k": n % 20, "seconds": 0.01} for n in range(2000)])
    with (
        Sampler() as sampler,
        run_jobs("-c", "4", "--worker-id", "w1"),
        run_jobs("-c", "4", "--worker-id", "w2"),
        run_jobs("-c", "4", "--worker-id", "w3"),
        run_jobs("-c", "4", "--worker-id", "w4"),
    ):
        wait_for(lambda: statuses(ids)["done"] == 2000, timeout=120)
    assert sampler.samples > 50
    assert sampler.worst == limit  # reached, never exceeded
    assert statuses(ids) == {"done": 2000}
    assert not KeySlots.objects.exclude(running=0).exists()  # every slot came back


@pytest.mark.slow
def test_a_rate_limit_holds_across_four_workers():
    ids = enqueue_many("tests.rated", [{}] * 200)
    with (
        run_jobs("-c", "4", "--worker-id", "r1"),
        run_jobs("-c", "4", "--worker-id", "r2"),
        run_jobs("-c", "4", "--worker-id", "r3"),
        run_jobs("-c", "4", "--worker-id", "r4"),
    ):
        wait_for(lambda: statuses(ids)["done"] == 200)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT floor(extract(epoch FROM locked_at)), count(*) FROM pqjobs_job "
            "WHERE id = ANY(%s) GROUP BY 1 ORDER BY 1",
            [ids],
        )
        per_second = [int(row[1]) for row in cursor.fetchall()]
    assert max(per_second) <= 20, per_second  # fixed windows: 20 per second, no more
    assert len(per_second) >= 10  # 200 jobs at 20 a second take ten windows


@pytest.mark.slow
def test_pause_stops_every_worker_within_a_second_and_survives_a_restart():
    ids = enqueue_many("tests.sleep", [{"seconds": 0.01}] * 3000, queue="pq")
    workers = ("-c", "4", "--queue", "pq")
    with run_jobs(*workers), run_jobs(*workers):
        wait_for(lambda: statuses(ids)["done"] > 100)
        flow.pause_queue("pq")
        paused_at = database_now(DB)
        time.sleep(2)
        late = Job.objects.filter(pk__in=ids, locked_at__gt=paused_at + timedelta(seconds=1))
        assert not late.exists()
    with run_jobs(*workers) as restarted:  # the pause is in the database
        wait_for(lambda: "paused at start: queue pq" in restarted.output())
        time.sleep(1)
        assert not Job.objects.filter(pk__in=ids, status="running").exists()
        waiting = statuses(ids)["ready"] + statuses(ids)["blocked"]
        assert waiting > 0
        flow.resume_queue("pq")
        wait_for(lambda: statuses(ids)["done"] == 3000, timeout=90)
        assert "queue pq resumed" in restarted.output()


@pytest.mark.slow
def test_a_killed_worker_frees_its_slots_through_the_rescue():
    long_running = enqueue_many("tests.limited", [{"k": n, "seconds": 30} for n in range(3)])
    waiting = enqueue_many("tests.limited", [{"k": n, "seconds": 0.01} for n in range(3)] * 3)
    fast = {"WORKER_STALE_TIMEOUT": "2", "WORKER_REAP_INTERVAL": "0.5"}
    with run_jobs("-c", "4", "--worker-id", "doomed", **fast) as doomed:
        started = Job.objects.filter(pk__in=long_running, started_at__isnull=False)
        wait_for(lambda: started.count() == 3)  # their handlers run
        doomed.signal(signal.SIGKILL)
        doomed.wait(10)
    # the rescue ends the killed jobs (their one attempt had started) and frees their
    # keys' slots: the jobs waiting behind them run
    with run_jobs("-c", "4", "--worker-id", "rescuer", **fast):
        wait_for(lambda: statuses(waiting)["done"] == 9)
    assert statuses(long_running) == {"failed": 3}
    assert not KeySlots.objects.exclude(running=0).exists()
    assert not Job.objects.filter(status="blocked").exists()


def enqueue_while_the_slot_is_given_back(key: str) -> tuple[int, int]:
    """A missed release: a job of ``key`` (limit 1) is enqueued, so held, in a transaction
    still open when the key's running job ends. The trigger that gives the slot back cannot
    see it, so releases nothing. Returns (the job that ran, the job left held)."""
    first = enqueue_job("tests.limited", {"k": key, "seconds": 0})
    (running,) = claim_jobs(DB, "w", None, 1).jobs
    assert running.id == first
    enqueued, go = threading.Event(), threading.Event()
    late: list[int] = []

    def enqueue_and_wait() -> None:
        try:
            with transaction.atomic():
                late.append(enqueue_job("tests.limited", {"k": key, "seconds": 0}))
                enqueued.set()
                go.wait(bound(10))
        finally:
            connections.close_all()

    thread = threading.Thread(target=enqueue_and_wait)
    thread.start()
    assert enqueued.wait(bound(10))
    finish(running)
    go.set()
    thread.join(bound(10))
    assert Job.objects.get(pk=late[0]).status == "blocked"
    assert KeySlots.objects.get(pk=f"k:{key}").running == 0
    return first, late[0]


def test_the_flow_sweep_releases_a_job_whose_release_was_missed():
    _, late = enqueue_while_the_slot_is_given_back("lost")
    other = enqueue_many("tests.limited", [{"k": "full"}] * 3)  # a key at its limit
    assert transitions.promote_limit_blocked(DB) == 1
    assert Job.objects.get(pk=late).status == "ready"
    assert statuses(other) == {"ready": 1, "blocked": 2}  # its limit is taken by the ready one
    assert transitions.promote_limit_blocked(DB) == 0  # released once


def test_a_job_of_a_higher_priority_than_the_ready_ones_is_not_held_at_enqueue():
    low = enqueue_job("tests.limited", {"k": "p"})
    high = enqueue_job("tests.limited", {"k": "p"}, priority=5)
    lower = enqueue_job("tests.limited", {"k": "p"}, priority=-1)
    assert [Job.objects.get(pk=i).status for i in (low, high, lower)] == [
        "ready",
        "ready",
        "blocked",
    ]
    # the claim decides between the two ready: the higher first, the other held
    batch = claim_jobs(DB, "w", None, 10)
    assert [j.id for j in batch.jobs] == [high] and batch.blocked == 1


def test_a_delayed_job_is_not_held_at_enqueue_nor_counted_against_its_key():
    later = enqueue_job("tests.limited", {"k": "d"}, delay=3600)
    now = enqueue_job("tests.limited", {"k": "d"})
    assert [Job.objects.get(pk=i).status for i in (later, now)] == ["ready", "ready"]


def test_held_jobs_are_looked_up_through_the_indexes_whatever_the_statistics():
    """As the fair turn's (test_fair_claiming.py): the trigger's lookups are planned once
    per session, often on an empty table's statistics, and must read their index from the
    first row of a 100,000-row insert on."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pqjobs_job")

    def enqueue() -> None:
        enqueue_many("tests.rated_limited", [{}] * 100)  # a rate and a limit
        enqueue_many("tests.limited", [{"k": "plan"}] * 100)

    plans = planned_inside(enqueue)
    lookups = [
        plan
        for plan in plans
        if "j.concurrency_key = NEW.concurrency_key" in plan or "j.rate_key = NEW.rate_key" in plan
    ]
    assert len(lookups) >= 200, len(lookups)
    for plan in lookups:
        assert "Index" in plan and "Seq Scan" not in plan, plan


@pytest.mark.slow
def test_jobs_held_at_enqueue_run_once_each_under_four_workers_and_a_killed_releaser():
    """Jobs held at enqueue are released one at a time as their key's slot comes back, by
    whichever way it does: a job finishing on one of four workers, the rescue of a job
    whose worker was killed (-9) while it ran, or, for a release missed, the flow sweep.
    Each runs exactly once, and never more than its key's limit at a time."""
    stuck = enqueue_job("tests.limited", {"k": "stuck", "seconds": 30})
    behind_stuck = enqueue_many("tests.limited", [{"k": "stuck", "seconds": 0}] * 20)
    fast = {"WORKER_STALE_TIMEOUT": "2", "WORKER_REAP_INTERVAL": "0.5"}
    with run_jobs("-c", "1", "--worker-id", "doomed", **fast) as doomed:
        started = Job.objects.filter(pk=stuck, started_at__isnull=False)
        wait_for(started.exists)
        doomed.signal(signal.SIGKILL)
        doomed.wait(10)
    _, missed = enqueue_while_the_slot_is_given_back("missed")
    many = enqueue_many("tests.limited", [{"k": n % 4, "seconds": 0.002} for n in range(200)])
    assert statuses([*behind_stuck, *many]) == {"ready": 4, "blocked": 216}
    everything = [*behind_stuck, missed, *many]
    with Sampler() as sampler:
        workers = [run_jobs("-c", "4", "--worker-id", f"w{n}", **fast) for n in range(4)]
        for worker in workers:
            worker.__enter__()
        try:
            wait_for(lambda: statuses(everything)["done"] == len(everything), timeout=90)
        finally:
            for worker in workers:
                worker.__exit__(None, None, None)
    assert sampler.worst == 1
    assert Job.objects.get(pk=stuck).status == "failed"  # rescued: its attempt had started
    # claimed once each (a claim counts an attempt; max_attempts=1 allows no second)
    assert set(Job.objects.filter(pk__in=everything).values_list("attempts", flat=True)) == {1}
    assert not KeySlots.objects.exclude(running=0).exists()


# --- the commands ----------------------------------------------------------------------------


def test_pause_and_resume_commands():
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    enqueue_many("tests.noop", [{}] * 2, queue="cmd")
    out = StringIO()
    call_command(
        "pause_jobs", "--queue", "cmd", "--job-type", "tests.echo", "--by", "ops", stdout=out
    )
    assert "queue cmd paused" in out.getvalue() and "job_type tests.echo paused" in out.getvalue()
    out = StringIO()
    call_command("pause_jobs", stdout=out)
    assert "queue cmd: paused since" in out.getvalue() and "by ops" in out.getvalue()
    assert statuses(list(Job.objects.values_list("id", flat=True))) == {"blocked": 2}
    out = StringIO()
    call_command("resume_jobs", "--queue", "cmd", "--queue", "never", "--by", "ops2", stdout=out)
    assert "queue cmd resumed (2 waiting jobs released)" in out.getvalue()
    assert "queue never was not paused" in out.getvalue()
    # what the commands did is in the audit trail, with who did it
    trail = list(OperatorAction.objects.order_by("id").values_list("action", "actor", "target"))
    assert trail == [
        ("pause", "ops", "queue cmd"),
        ("pause", "ops", "job type tests.echo"),
        ("resume", "ops2", "queue cmd"),
    ]
    with pytest.raises(CommandError, match=r"argument --by: the name contains a NUL character"):
        call_command("pause_jobs", "--queue", "cmd", "--by", "a\x00b")
    with pytest.raises(CommandError, match="name what to resume"):
        call_command("resume_jobs")
    out = StringIO()
    call_command("pause_jobs", "--queue", "quiet", "--new", verbosity=0, stdout=out)
    assert out.getvalue() == ""


def test_hold_back_moves_held_jobs_out_of_the_way_without_claiming_or_taking_slots():
    busy = enqueue_many("tests.limited3", [{"k": "busy"}] * 10)
    rated = enqueue_many("tests.rated", [{}] * 30)
    free = enqueue_many("tests.noop", [{}] * 5)
    flow.pause_job_type("tests.echo")
    paused = enqueue_job("tests.echo")
    got_in_ready([*busy, *rated, paused])
    # two jobs of the busy key already run (as if on another worker)
    Job.objects.filter(pk__in=busy[:2]).update(status="running", locked_by="other", attempts=1)
    KeySlots.objects.filter(pk="k:busy").update(running=2)
    held = transitions.hold_back(DB, None, 1000)
    # busy: 1 slot left, so 7 of the 8 waiting are held; rate: 20 of 30 may start this
    # window, 10 held; the paused job held; nothing claimed, no slot or start taken
    assert held == 7 + 10 + 1
    assert statuses(busy) == {"running": 2, "ready": 1, "blocked": 7}
    assert statuses(rated) == {"ready": 20, "blocked": 10}
    assert statuses(free) == {"ready": 5}
    assert Job.objects.get(pk=paused).blocked_by == "paused"
    assert KeySlots.objects.get(pk="k:busy").running == 2
    assert RateBucket.objects.get(pk="type:tests.rated").used == 0


def test_a_rate_window_counts_the_jobs_claimed_not_those_held_for_their_key():
    """One claim, five jobs with a rate and a concurrency limit of 1: one starts and takes
    one start of the window; the four held for their key take none."""
    ids = enqueue_many("tests.rated_limited", [{}] * 5)
    got_in_ready(ids)
    claimed = transitions.claim(DB, "w", None, 10)
    assert len(claimed.rows) == 1 and claimed.blocked == 4
    assert statuses(ids) == {"running": 1, "blocked": 4}
    assert set(Job.objects.filter(status="blocked").values_list("blocked_by", flat=True)) == {
        "limit"
    }
    assert RateBucket.objects.get(pk="type:tests.rated_limited").used == 1
    assert KeySlots.objects.get(pk="tests.rated_limited").running == 1


def test_a_claim_looks_past_its_limit_only_when_asked_and_claims_no_more():
    """The scan finds the held jobs behind the ones it claims; passing jobs beyond the
    limit stay ready, and the window counts only the claimed."""
    rated = enqueue_many("tests.rated", [{}] * 30)  # 20 starts per second
    got_in_ready(rated)
    claimed = transitions.claim(DB, "w", None, 5, scan=100)
    assert len(claimed.rows) == 5 and claimed.blocked == 10
    assert statuses(rated) == {"running": 5, "ready": 15, "blocked": 10}
    assert RateBucket.objects.get(pk="type:tests.rated").used == 5


def test_a_job_retried_into_a_pause_is_held_at_once_and_resuming_releases_it():
    """Left ready, a retried job woke the workers and a claim held it; a resume committed
    while that claim was under way released nothing, and the job stayed held by a pause
    gone until the flow sweep."""
    from django_pqjobs.operations import retry_job

    failed, waits = enqueue_job("tests.noop", queue="q"), enqueue_job("tests.noop", queue="q")
    Job.objects.filter(pk__in=[failed, waits]).update(status="failed")
    assert flow.pause_queue("q")
    assert retry_job(failed)
    job = Job.objects.get(pk=failed)
    assert (job.status, job.blocked_by) == ("blocked", "paused")
    # no claim meets it while the queue is paused
    batch = claim_jobs(DB, "w", None, 10)
    assert batch.jobs == [] and batch.blocked == 0
    assert flow.resume_queue("q") == 1
    job = Job.objects.get(pk=failed)
    assert (job.status, job.blocked_by) == ("ready", None)
    assert [j.id for j in claim_jobs(DB, "w", None, 10).jobs] == [failed]
    # beside no pause, a retry is ready as before
    assert retry_job(waits)
    assert Job.objects.get(pk=waits).status == "ready"
