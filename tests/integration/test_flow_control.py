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
from django.db import connection, connections

from django_pqjobs import InvalidJobOption, QueueFull, enqueue_job, enqueue_many, flow, transitions
from django_pqjobs.clock import database_now
from django_pqjobs.models import Job, KeySlots, OperatorAction, RateBucket
from django_pqjobs.transitions import Completion, Fence
from django_pqjobs.worker.claiming import claim_jobs
from tests.helpers import run_jobs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
DB = "default"


def statuses(ids: list[int]) -> Counter[str]:
    return Counter(Job.objects.filter(pk__in=ids).values_list("status", flat=True))


def finish(job: Job) -> None:
    assert transitions.complete(DB, Completion(Fence.of(job), None, 1))


# --- concurrency limits ----------------------------------------------------------------------


def test_a_key_at_its_limit_blocks_its_jobs_and_a_freed_slot_releases_the_next():
    ids = [enqueue_job("tests.limited3", {"k": "a"}) for _ in range(5)]
    other = enqueue_job("tests.limited3", {"k": "b"})
    batch = claim_jobs(DB, "w", None, 10)
    assert {j.id for j in batch.jobs} == {*ids[:3], other}  # 3 of key a, 1 of key b
    assert batch.blocked == 2
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
    batch = claim_jobs(DB, "w", None, 10)  # ten free slots: the key's limit of 1 decides
    assert (len(batch.jobs), batch.blocked) == (1, 4)
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
    batch = claim_jobs(DB, "w", None, 10)
    assert len(batch.jobs) == 2 and batch.blocked == 4


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
    ids = enqueue_many("tests.rated", [{}] * 30)
    # start right after a window boundary, so the whole test fits in one window
    wait_for(lambda: database_now(DB).microsecond < 200_000, timeout=2, interval=0.01)
    batch = claim_jobs(DB, "w", None, 50)
    assert (len(batch.jobs), batch.blocked) == (20, 10)
    assert RateBucket.objects.get(pk="type:tests.rated").used == 20
    assert transitions.promote_rate_blocked(DB) == 0  # no room left in this window
    wait_for(lambda: transitions.promote_rate_blocked(DB), timeout=3, interval=0.05)
    assert statuses(ids)["ready"] == 10
    assert len(claim_jobs(DB, "w", None, 50).jobs) == 10


def test_queue_rates_from_settings(settings):
    settings.PQJOBS = {**settings.PQJOBS, "QUEUE_RATES": {"slow": "2/h"}}
    ids = enqueue_many("tests.noop", [{}] * 3, queue="slow")
    assert set(Job.objects.filter(pk__in=ids).values_list("rate_key", flat=True)) == {"queue:slow"}
    batch = claim_jobs(DB, "w", None, 10)
    assert (len(batch.jobs), batch.blocked) == (2, 1)


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
    batch = claim_jobs(DB, "w", None, 10)
    assert batch.jobs == [] and batch.blocked == 4
    assert set(Job.objects.values_list("blocked_by", flat=True)) == {"paused"}
    assert flow.resume_queue("mail") == 3
    assert flow.resume_queue("mail") is None
    assert {j.id for j in claim_jobs(DB, "w", None, 10).jobs} == set(mail)
    assert Job.objects.get(pk=other).status == "blocked"
    assert flow.resume_job_type("tests.echo") == 1
    assert [j.id for j in claim_jobs(DB, "w", None, 10).jobs] == [other]


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
        self._thread.join(10)

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
        wait_for(lambda: statuses(ids)["done"] == 200, timeout=40)
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
        wait_for(lambda: statuses(ids)["done"] > 100, timeout=30)
        flow.pause_queue("pq")
        paused_at = database_now(DB)
        time.sleep(2)
        late = Job.objects.filter(pk__in=ids, locked_at__gt=paused_at + timedelta(seconds=1))
        assert not late.exists()
    with run_jobs(*workers) as restarted:  # the pause is in the database
        wait_for(lambda: "paused at start: queue pq" in restarted.output(), timeout=15)
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
        wait_for(lambda: started.count() == 3, timeout=15)  # their handlers run
        doomed.signal(signal.SIGKILL)
        doomed.wait(10)
    # the rescue ends the killed jobs (their one attempt had started) and frees their
    # keys' slots: the jobs waiting behind them run
    with run_jobs("-c", "4", "--worker-id", "rescuer", **fast):
        wait_for(lambda: statuses(waiting)["done"] == 9, timeout=40)
    assert statuses(long_running) == {"failed": 3}
    assert not KeySlots.objects.exclude(running=0).exists()
    assert not Job.objects.filter(status="blocked").exists()


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
    assert claim_jobs(DB, "w", None, 10).blocked == 2
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
    call_command("pause_jobs", "--queue", "quiet", verbosity=0, stdout=out)
    assert out.getvalue() == ""


def test_hold_back_moves_held_jobs_out_of_the_way_without_claiming_or_taking_slots():
    busy = enqueue_many("tests.limited3", [{"k": "busy"}] * 10)
    rated = enqueue_many("tests.rated", [{}] * 30)
    free = enqueue_many("tests.noop", [{}] * 5)
    flow.pause_job_type("tests.echo")
    paused = enqueue_job("tests.echo")
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
    claimed = transitions.claim(DB, "w", None, 5, scan=100)
    assert len(claimed.rows) == 5 and claimed.blocked == 10
    assert statuses(rated) == {"running": 5, "ready": 15, "blocked": 10}
    assert RateBucket.objects.get(pk="type:tests.rated").used == 5
