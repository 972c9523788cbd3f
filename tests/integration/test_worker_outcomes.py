"""A real worker (threads, own connections) running the test handlers: every outcome."""

from __future__ import annotations

import dataclasses
import time

import pytest
from django.db import connections

from django_pqjobs import cancel_job, enqueue_job, signals
from django_pqjobs.models import Job, JobAttempt
from django_pqjobs.policies import make_delays
from django_pqjobs.registry import registry
from tests.helpers import wait_for, wait_status
from tests.testapp.models import Counter

pytestmark = pytest.mark.django_db(transaction=True)


def test_return_value_is_stored_as_result_with_duration(worker_factory):
    worker_factory(concurrency=2)
    job_id = enqueue_job("tests.echo", {"x": 1})
    job = wait_status(job_id, "done")
    assert job.result["echo"] == {"x": 1} and job.result["attempt"] == 1
    assert job.duration_ms is not None and job.duration_ms >= 0
    assert job.finished_at is not None and job.last_error == ""


def test_exception_retries_with_backoff_until_failed(worker_factory):
    worker = worker_factory()
    job_id = enqueue_job("tests.fail")
    wait_for(lambda: JobAttempt.objects.filter(job_id=job_id).count() == 1)
    job = Job.objects.get(pk=job_id)
    assert job.status == "ready" and job.attempts == 1
    assert 9 <= (job.run_after - job.updated_at).total_seconds() <= 11  # [10, 20] ±10 %
    for attempt in (2, 3):
        Job.objects.filter(pk=job_id).update(run_after=job.created_at)
        worker._wake.set()
        wait_for(lambda n=attempt: JobAttempt.objects.filter(job_id=job_id).count() == n)
    job = wait_status(job_id, "failed")
    assert job.attempts == 3 and job.error_type == "ValueError"
    tracebacks = list(JobAttempt.objects.filter(job_id=job_id).values_list("traceback", flat=True))
    assert [t.strip().splitlines()[-1] for t in tracebacks] == [
        f"ValueError: boom on attempt {n}" for n in (1, 2, 3)
    ]
    assert all("Traceback (most recent call last)" in t for t in tracebacks)


def test_retry_exception_with_its_own_delay(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.retry_then_ok", {"succeed_on": 3})
    job = wait_status(job_id, "done")
    assert job.result == {"attempt": 3}
    assert list(JobAttempt.objects.filter(job_id=job_id).values_list("error_type", flat=True)) == [
        "Retry",
        "Retry",
    ]


def test_permanent_error_fails_at_once(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.permanent", max_attempts=10)
    job = wait_status(job_id, "failed")
    assert job.attempts == 1 and "this will never work" in job.last_error
    assert JobAttempt.objects.get(job_id=job_id).outcome == "permanent"


def test_unknown_job_type_fails_at_once_with_a_clear_error(
    worker_factory, unknown_job_types_allowed
):
    # enqueued by a process that may (a split deployment), run by a worker without the handler
    worker_factory()
    job_id = enqueue_job("nobody.handles.this", {"keep": "me"})
    job = wait_status(job_id, "failed")
    assert job.last_error == "no handler registered for 'nobody.handles.this'"
    assert job.payload == {"keep": "me"}  # nothing lost: retry it once a handler exists
    assert JobAttempt.objects.get(job_id=job_id).outcome == "unknown_type"


def test_async_handler(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.async_echo", {"a": 1})
    assert wait_status(job_id, "done").result == {"async": True, "payload": {"a": 1}}


def test_atomic_job_commits_handler_work_with_completion(worker_factory):
    worker_factory()
    ok = enqueue_job("tests.atomic_counter", {"name": "ok"})
    bad = enqueue_job("tests.atomic_counter", {"name": "bad", "fail": True}, max_attempts=1)
    wait_status(ok, "done")
    wait_status(bad, "failed")
    assert Counter.objects.get(name="ok").value == 1
    assert not Counter.objects.filter(name="bad").exists()  # rolled back with the failure


def test_atomic_job_rolls_back_when_the_job_was_lost(worker_factory):
    """If the attempt was taken away (rescued elsewhere), the handler's writes roll back."""
    from django_pqjobs.registry import JobType, registry

    def steal_then_write(ctx):
        Counter.objects.create(name="lost-write")
        with connections["default"].cursor():
            pass
        # another connection moves the job on, as a rescuer would
        from threading import Thread

        def rescue() -> None:
            Job.objects.filter(pk=ctx.job.id).update(locked_by="someone-else")
            connections.close_all()

        t = Thread(target=rescue)
        t.start()
        t.join()

    registry.register(JobType(name="tests.lost_atomic", handler=steal_then_write, atomic=True))
    try:
        worker_factory()
        job_id = enqueue_job("tests.lost_atomic")
        wait_for(lambda: Job.objects.get(pk=job_id).locked_by == "someone-else")
        time.sleep(0.5)
        assert not Counter.objects.filter(name="lost-write").exists()
        assert Job.objects.get(pk=job_id).status == "running"  # untouched by the lost attempt
    finally:
        registry.unregister("tests.lost_atomic")


def test_chained_job_records_its_parent(worker_factory):
    worker_factory()
    parent = enqueue_job("tests.chain")
    child = wait_status(parent, "done").result["child"]
    child_job = wait_status(child, "done")
    assert child_job.parent_id == parent
    assert child_job.result["echo"] == {"from": parent}


def test_unserialisable_result_fails_with_a_clear_error(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.unserializable_result")
    job = wait_status(job_id, "failed")
    assert job.error_type == "ResultNotSerializable"
    assert "not JSON-serialisable" in job.last_error


def test_priority_order_with_one_executor(worker_factory):
    started: list[int] = []

    def on_start(sender, job, worker_id, **kwargs):
        started.append(job.id)

    low = enqueue_job("tests.echo", priority=1)
    high = enqueue_job("tests.echo", priority=50)
    mid = enqueue_job("tests.echo", priority=10)
    signals.job_started.connect(on_start)
    try:
        worker_factory(concurrency=1)
        for job_id in (low, mid, high):
            wait_status(job_id, "done")
    finally:
        signals.job_started.disconnect(on_start)
    assert started == [high, mid, low]


def test_timeout_interrupts_a_busy_python_loop(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.busy", max_attempts=1)
    job = wait_status(job_id, "failed")
    assert job.error_type == "JobTimeout"
    assert JobAttempt.objects.get(job_id=job_id).outcome == "timeout"
    assert 400 <= job.duration_ms < 3000


def test_timeout_is_not_swallowed_by_except_exception(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.swallow_exceptions", max_attempts=1)
    assert wait_status(job_id, "failed").error_type == "JobTimeout"


def test_timeout_of_sleeping_job_is_retryable(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.sleep", {"seconds": 30}, timeout=0.3, max_attempts=2)
    wait_for(lambda: JobAttempt.objects.filter(job_id=job_id, outcome="timeout").exists())
    job = Job.objects.get(pk=job_id)
    assert job.status == "ready" and job.attempts == 1


@pytest.fixture
def finished_signals():
    """(job id, outcome) of every ``job_finished`` signal sent during the test."""
    seen: list[tuple[int, str]] = []

    def on_finished(sender, job, outcome, error, **kwargs):
        seen.append((job.id, outcome))

    signals.job_finished.connect(on_finished, weak=False)
    yield seen
    signals.job_finished.disconnect(on_finished)


def test_thread_blocked_in_c_is_abandoned_replaced_and_its_late_return_fenced(
    worker_factory, caplog, finished_signals
):
    worker = worker_factory(concurrency=1)
    stuck = enqueue_job(
        "tests.sleep", {"seconds": 3, "blocking": True}, timeout=0.3, max_attempts=1
    )
    # the abandoned attempt is recorded as timed out after TIMEOUT_GRACE (1 s in tests)
    job = wait_status(stuck, "failed")
    assert job.error_type == "JobTimeout" and "abandoned" in job.last_error
    # capacity is kept: a replacement executor runs the next job while the stuck one sleeps
    nxt = enqueue_job("tests.echo")
    wait_status(nxt, "done")
    assert len(worker._executors) == 2
    # when the stuck thread finally returns, its late outcome is fenced off
    wait_for(
        lambda: any(
            f"abandoned job {stuck} finally returned" in r.getMessage() for r in caplog.records
        ),
        timeout=6,
    )
    job = Job.objects.get(pk=stuck)
    assert job.status == "failed" and "abandoned" in job.last_error
    assert JobAttempt.objects.filter(job_id=stuck).count() == 1
    # the abandoned job's outcome is signalled once, like any other; its late return is not
    assert [outcome for job_id, outcome in finished_signals if job_id == stuck] == ["failed"]


def test_cancel_ready_job_never_runs(worker_factory):
    job_id = enqueue_job("tests.echo", delay=0.5)
    assert cancel_job(job_id) == "cancelled"
    worker_factory()
    time.sleep(1.0)
    assert Job.objects.get(pk=job_id).status == "cancelled"


def test_cooperative_cancel_of_running_job(worker_factory):
    worker_factory(heartbeat_interval=0.2)
    job_id = enqueue_job("tests.cooperative_cancel")
    wait_status(job_id, "running")
    assert cancel_job(job_id) == "cancel_requested"
    job = wait_status(job_id, "cancelled")
    assert job.finished_at is not None
    assert JobAttempt.objects.get(job_id=job_id).outcome == "cancelled"


def test_progress_is_saved(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.progress")
    assert wait_status(job_id, "done").progress == {"done": 5, "total": 10, "message": "halfway"}


def test_job_started_and_finished_signals(worker_factory):
    seen = []

    def on_start(sender, job, worker_id, **kw):
        seen.append(("start", job.id))

    def on_finish(sender, job, outcome, error, **kw):
        seen.append((outcome, job.id))

    signals.job_started.connect(on_start)
    signals.job_finished.connect(on_finish)
    try:
        worker_factory()
        ok = enqueue_job("tests.noop")
        bad = enqueue_job("tests.permanent")
        wait_status(ok, "done")
        wait_status(bad, "failed")
        wait_for(lambda: len(seen) == 4)
    finally:
        signals.job_started.disconnect(on_start)
        signals.job_finished.disconnect(on_finish)
    assert ("start", ok) in seen and ("done", ok) in seen and ("failed", bad) in seen


def test_listen_notify_wakes_an_idle_worker(worker_factory):
    worker_factory(poll_intervals=make_delays([60], "POLL_INTERVALS"))
    time.sleep(0.5)  # the worker is now inside its 60 s idle wait
    job_id = enqueue_job("tests.noop")
    job = wait_status(job_id, "done")
    # claimed long before the poll would have looked (ms on a quiet machine, seconds loaded)
    assert (job.locked_at - job.created_at).total_seconds() < 30


def test_burst_worker_drains_and_stops(worker_factory):
    for _ in range(5):
        enqueue_job("tests.noop")
    worker = worker_factory(concurrency=2, burst=True)
    wait_for(lambda: not Job.objects.active().exists())
    wait_for(lambda: worker.stopping or worker.claimed_total == 5)
    assert worker.claimed_total == 5


def test_max_jobs(worker_factory):
    for _ in range(5):
        enqueue_job("tests.noop")
    worker = worker_factory(concurrency=2, max_jobs=3)
    wait_for(lambda: Job.objects.done().count() == 3)
    time.sleep(0.3)
    assert worker.claimed_total == 3
    assert Job.objects.ready().count() == 2


def test_claim_errors_are_logged_and_survived(worker_factory, monkeypatch, caplog):
    from django.db import OperationalError

    from django_pqjobs import transitions

    real_claim = transitions.claim
    failures = iter([OperationalError("server closed the connection"), KeyError("bug")])

    def flaky_claim(*args, **kwargs):
        error = next(failures, None)
        if error is not None:
            raise error
        return real_claim(*args, **kwargs)

    monkeypatch.setattr(transitions, "claim", flaky_claim)
    job_id = enqueue_job("tests.noop")
    worker_factory()
    wait_status(job_id, "done")
    messages = [r.getMessage() for r in caplog.records]
    assert any("claiming jobs failed" in m for m in messages)
    assert any("unexpected error while claiming jobs" in m for m in messages)


def test_a_job_types_finish_callback_gets_its_own_attempts_and_may_raise(worker_factory):
    """``JobType.on_finished`` (how the Tasks framework's task_finished is sent) is called
    for each recorded attempt of its own type only, as ``job_finished`` is sent; one that
    raises is logged and the worker records and announces the rest."""
    seen: list[tuple[int, str]] = []

    def finished(job: Job, outcome: str) -> None:
        seen.append((job.id, outcome))
        if job.payload.get("raise"):
            raise RuntimeError("a broken finish callback")

    echo = registry.get("tests.echo")
    assert echo is not None
    registry.unregister("tests.echo")
    registry.register(dataclasses.replace(echo, on_finished=finished))
    announced: list[int] = []

    def receiver(sender, job, **kwargs):
        announced.append(job.id)

    signals.job_finished.connect(receiver, weak=False)
    try:
        worker_factory(concurrency=2)
        raising = enqueue_job("tests.echo", {"raise": True})
        fine = enqueue_job("tests.echo", {"n": 1})
        other = enqueue_job("tests.noop")
        for job_id in (raising, fine, other):
            wait_status(job_id, "done")
        wait_for(lambda: len(announced) == 3)
    finally:
        signals.job_finished.disconnect(receiver)
        registry.unregister("tests.echo")
        registry.register(echo)
    assert sorted(seen) == sorted([(raising, "done"), (fine, "done")])


# --- infrastructure errors are not the job's fault -----------------------------------------


def test_a_connection_that_dies_under_the_handler_does_not_cost_an_attempt(worker_factory):
    worker_factory(concurrency=2)
    job_id = enqueue_job("tests.lose_connection", {"lose": 2})  # max_attempts=1
    job = wait_status(job_id, "done")
    assert job.result == {"runs": 3} and job.attempts == 1 and job.max_attempts == 1
    history = list(
        JobAttempt.objects.filter(job_id=job_id).values_list("attempt", "outcome", "error_type")
    )
    assert history == [(1, "released", "DatabaseConnectionLost")] * 2
    traceback = JobAttempt.objects.filter(job_id=job_id).first().traceback
    assert "terminating connection" in traceback


def test_a_handler_that_always_breaks_its_connection_is_charged_the_third_time(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.lose_connection", {"lose": 99})
    job = wait_status(job_id, "failed")
    assert job.attempts == 1 and job.error_type == "DatabaseConnectionLost"
    assert list(JobAttempt.objects.filter(job_id=job_id).values_list("outcome", flat=True)) == [
        "released",
        "released",
        "error",
    ]
    assert "lost 3 times in a row" in job.last_error


def test_the_limit_of_uncharged_connection_losses_is_a_setting(worker_factory, settings):
    settings.PQJOBS = {**settings.PQJOBS, "CONNECTION_LOSS_LIMIT": 1}
    worker_factory()
    job_id = enqueue_job("tests.lose_connection", {"lose": 1})
    assert wait_status(job_id, "failed").error_type == "DatabaseConnectionLost"
    assert list(JobAttempt.objects.filter(job_id=job_id).values_list("outcome", flat=True)) == [
        "error"
    ]


# --- absurd delays --------------------------------------------------------------------------


def test_a_retry_delay_past_a_century_fails_the_attempt_clearly(worker_factory):
    worker = worker_factory()
    job_id = enqueue_job("tests.retry_in_forever")  # max_attempts=3, backoff 0.05 s
    for attempt in (1, 2):
        wait_for(lambda n=attempt: JobAttempt.objects.filter(job_id=job_id).count() == n)
        worker._wake.set()
    job = wait_status(job_id, "failed")
    assert job.attempts == 3 and job.error_type == "ValueError"
    assert "Retry(delay=...) must be at most 100 years" in job.last_error
    assert JobAttempt.objects.filter(job_id=job_id, outcome="error").count() == 3


def test_a_backoff_policy_past_a_century_is_replaced_by_the_default(worker_factory, caplog):
    worker_factory()
    job_id = enqueue_job("tests.bad_backoff")
    wait_for(lambda: JobAttempt.objects.filter(job_id=job_id).exists())
    job = Job.objects.get(pk=job_id)
    assert job.status == "ready" and job.attempts == 1
    waits = (job.run_after - job.updated_at).total_seconds()
    assert 54 <= waits <= 66  # the default policy's first step, 60 s ± 10 %
    assert any(
        "backoff policy of job type 'tests.bad_backoff' failed" in r.message for r in caplog.records
    )
