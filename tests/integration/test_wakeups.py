"""How NOTIFY wakes workers: one designated worker per notification, and polling on a short
interval instead of listening while a stream of enqueues lasts."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from django_pqjobs import enqueue_job
from django_pqjobs.models import Job, WorkerRecord
from django_pqjobs.policies import make_delays
from django_pqjobs.worker import claim_loop
from django_pqjobs.worker import completer as completer_module
from django_pqjobs.worker import listener as listener_module
from django_pqjobs.worker.worker import Worker
from tests.helpers import bound, wait_for, wait_status

pytestmark = pytest.mark.django_db(transaction=True)

# Any job picked up well within this poll was woken by NOTIFY. The bounds below are half
# of it: a loaded machine may take seconds to start a job, never a minute.
SLOW_POLL = make_delays([60], "poll")
WOKEN_WITHIN = 30


@pytest.fixture
def stream_threshold_reachable_under_load(monkeypatch):
    """The stream threshold is 200 enqueues a second; a loaded CI machine running the test
    files three at a time may enqueue slower than that and never turn the stream on. These
    tests are about what stream mode does, not the threshold: a lower one (5 within a
    second) is certain to be crossed."""
    monkeypatch.setattr(listener_module, "STREAM_NOTIFICATIONS", 5)
    monkeypatch.setattr(listener_module, "STREAM_WINDOW", 1.0)


def test_a_stream_of_enqueues_turns_listening_into_polling_and_back(
    worker_factory, stream_threshold_reachable_under_load
):
    worker = worker_factory(concurrency=2, queues=["stream"], poll_intervals=SLOW_POLL)
    assert worker.listener is not None
    streamed = False
    ids = []
    for _ in range(300):  # ~thousands a second: far above the stream threshold
        ids.append(enqueue_job("tests.noop", queue="stream"))
        streamed = streamed or worker._streaming
    assert streamed, "the worker never switched to polling"
    wait_for(lambda: Job.objects.filter(pk__in=ids, status="done").count() == len(ids))

    # the stream is over: after STREAM_IDLE the worker listens again...
    wait_for(lambda: not worker._streaming, timeout=WOKEN_WITHIN)
    wait_for(lambda: not worker.listener._pause, timeout=WOKEN_WITHIN)
    time.sleep(0.2)
    # ...so a lone job starts at once, long before the 60 s poll
    started = time.monotonic()
    wait_status(enqueue_job("tests.noop", queue="stream"), "done", timeout=WOKEN_WITHIN)
    assert time.monotonic() - started < WOKEN_WITHIN


def test_held_successes_do_not_hold_up_the_next_claim(
    worker_factory, stream_threshold_reachable_under_load, monkeypatch
):
    """In stream mode successes wait (up to HOLD_MAX_AGE) to be written together. A worker
    with one executor and nothing claimed ahead still claims the next job as soon as one
    ends: a held success counts as a free executor, not as a job in progress."""
    # held for up to half a second: one hold per job would take 150 s, ten times the bound
    # below, which is generous for 300 jobs on a loaded machine
    monkeypatch.setattr(completer_module, "HOLD_MAX_AGE", 0.5)
    worker = worker_factory(
        concurrency=1, prefetch_max=0, queues=["held"], poll_intervals=SLOW_POLL
    )
    writes = []
    write = worker.recorder.write
    worker.recorder.write = lambda items: (writes.append(len(items)), write(items))[1]
    began = time.monotonic()
    ids = [enqueue_job("tests.noop", queue="held") for _ in range(300)]
    wait_for(lambda: Job.objects.filter(pk__in=ids, status="done").count() == len(ids))
    assert max(writes) > 1, "successes were written one at a time"
    assert time.monotonic() - began < bound(60)


def _claims_by_thread(worker: Worker) -> list[tuple[str, bool, list[int]]]:
    """Record each claim: (its thread, whether on a connection of its own, the job ids)."""
    seen: list[tuple[str, bool, list[int]]] = []
    claim = worker._claim_locked

    def recorded(batch_size, connection=None):  # type: ignore[no-untyped-def]
        batch = claim(batch_size, connection)
        seen.append(
            (threading.current_thread().name, connection is not None, [j.id for j in batch.jobs])
        )
        return batch

    worker._claim_locked = recorded  # type: ignore[method-assign]
    return seen


def test_an_idle_worker_claims_on_the_listeners_connection(worker_factory):
    """An idle worker's listener claims the job it heard of itself, on the connection that
    heard it: the claim loop's thread is not woken for it (one wait for a core, and one
    server process woken, fewer on every job an idle worker starts)."""
    worker = worker_factory(queues=["direct"], poll_intervals=SLOW_POLL)
    seen = _claims_by_thread(worker)
    for n in range(3):
        wait_for(lambda: worker._parked, timeout=WOKEN_WITHIN)
        job_id = enqueue_job("tests.noop", {"n": n}, queue="direct")
        wait_status(job_id, "done", timeout=WOKEN_WITHIN)
        claimed = [(thread, own) for thread, own, ids in seen if job_id in ids]
        assert claimed == [("pqjobs-listener", True)], seen


def test_a_failed_claim_on_the_listener_leaves_the_job_to_the_claim_loop(
    worker_factory, monkeypatch
):
    """The listener's claim failing (its connection lost, say) does not lose the
    notification: the claim loop is woken and claims the job, long before its poll."""
    claim_jobs = claim_loop.claim_jobs

    def failing_on_the_listener(*args, connection=None, **kwargs):  # type: ignore[no-untyped-def]
        if connection is not None:
            raise psycopg.OperationalError("the listener's connection was lost")
        return claim_jobs(*args, **kwargs)

    monkeypatch.setattr(claim_loop, "claim_jobs", failing_on_the_listener)
    worker = worker_factory(queues=["fallback"], poll_intervals=SLOW_POLL)
    seen = _claims_by_thread(worker)
    wait_for(lambda: worker._parked, timeout=WOKEN_WITHIN)
    started = time.monotonic()
    job_id = enqueue_job("tests.noop", queue="fallback")
    wait_status(job_id, "done", timeout=WOKEN_WITHIN)
    assert time.monotonic() - started < WOKEN_WITHIN
    assert [thread for thread, _, ids in seen if job_id in ids] == ["pqjobs-worker"], seen


@pytest.mark.django_db(transaction=True, databases=["default", "second"])
def test_a_listener_on_another_database_claims_nothing_there(worker_factory, settings):
    """LISTEN_DATABASE may reach another database than the worker's (``run_jobs
    --database``): its listener hears the jobs enqueued there, and must not claim them."""
    settings.PQJOBS = {**settings.PQJOBS, "LISTEN_DATABASE": "default"}
    # a worker listening on default, so that enqueues there notify
    WorkerRecord.objects.create(worker_id="listens-here", listening=True)
    worker = worker_factory(database="second", queues=["elsewhere"], poll_intervals=SLOW_POLL)
    assert worker.listener is not None
    heard = threading.Event()
    hear = worker.listener._heard

    def heard_it(*args):  # type: ignore[no-untyped-def]
        hear(*args)
        heard.set()

    worker.listener._heard = heard_it  # type: ignore[method-assign]
    wait_for(lambda: worker._parked, timeout=WOKEN_WITHIN)
    job_id = enqueue_job("tests.noop", queue="elsewhere")  # on default
    assert heard.wait(WOKEN_WITHIN), "the listener did not hear the job"
    time.sleep(0.5)
    assert Job.objects.get(pk=job_id).status == "ready"


def test_each_notification_wakes_its_designated_worker_at_once(worker_factory):
    first = worker_factory(worker_id="wake-a", queues=["w"], poll_intervals=SLOW_POLL)
    second = worker_factory(worker_id="wake-b", queues=["w"], poll_intervals=SLOW_POLL)
    peers = [("wake-a", ["w"]), ("wake-b", ["w"])]
    first._set_peers(peers)
    second._set_peers(peers)
    for pid in (10, 11):  # whichever server process sends it, exactly one answers at once
        assert [first.answers_now("w", pid), second.answers_now("w", pid)].count(True) == 1
    assert first.answers_now("elsewhere", 10)  # nobody known serves that queue: answer
    # jobs enqueued one at a time are picked up well before any poll, by either worker
    for n in range(6):
        started = time.monotonic()
        wait_status(enqueue_job("tests.noop", {"n": n}, queue="w"), "done", timeout=WOKEN_WITHIN)
        assert time.monotonic() - started < WOKEN_WITHIN
        time.sleep(0.05)
    ran_by = set(Job.objects.filter(queue="w").values_list("locked_by", flat=True))
    assert ran_by <= {"wake-a", "wake-b"}


def test_workers_in_a_stream_take_turns_claiming(monkeypatch):
    """In stream mode the workers serving the same queues claim at evenly spaced moments:
    together every STREAM_SPACING seconds, each every STREAM_SPACING times their number."""
    names = ["turn-b", "turn-a", "turn-c"]
    peers: list[tuple[str, list[str] | None]] = [(n, ["q"]) for n in names]
    peers.append(("turn-elsewhere", ["other"]))  # serves another queue: not in the turns
    workers = [Worker(worker_id=name, queues=["q"]) for name in names]
    now = 1_732_500_000.123
    monkeypatch.setattr(claim_loop.time, "time", lambda: now)
    alone = workers[0]._stream_delay()  # before its peers are known: on its own
    assert 0 < alone <= claim_loop.STREAM_SPACING
    for worker in workers:
        worker._set_peers(peers)
    assert [w._stream_turn for w in workers] == [(1, 3), (0, 3), (2, 3)]
    period = 3 * claim_loop.STREAM_SPACING
    for worker in workers:
        place, _ = worker._stream_turn
        delay = worker._stream_delay()
        assert 0 < delay <= period
        # its next claim falls at its own offset within the period: place * period / 3
        cycles = (now + delay - place * period / 3) / period
        assert (cycles - round(cycles)) * period == pytest.approx(0, abs=1e-6)
    many = Worker(worker_id="turn-m", queues=["q"])
    many._set_peers([(f"turn-{n:02}", None) for n in range(30)] + [("turn-m", ["q"])])
    assert 0 < many._stream_delay() <= claim_loop.STREAM_PERIOD_MAX  # capped
