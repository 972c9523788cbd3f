"""Bad data, dropped connections and kills: one bad job fails alone, clearly; nothing else
is blocked, lost, run twice or charged an attempt it did not use."""

from __future__ import annotations

import re
import signal
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction

from django_pqjobs import (
    InvalidJobOption,
    PayloadError,
    enqueue_job,
    enqueue_many,
    enqueue_on_commit,
)
from django_pqjobs.context import JobContext
from django_pqjobs.models import Job, JobAttempt
from django_pqjobs.policies import make_delays
from django_pqjobs.transitions import Fence
from django_pqjobs.verdicts import Verdict
from django_pqjobs.worker.claiming import claim_jobs
from django_pqjobs.worker.maintenance import Maintenance
from django_pqjobs.worker.recorder import Recorder
from django_pqjobs.worker.slots import Slot
from tests.helpers import run_jobs, wait_for, wait_status
from tests.pgcluster import disposable_cluster
from tests.testapp.models import Counter, Effect

pytestmark = pytest.mark.django_db(transaction=True)


def other_sessions() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


# --- 1. results and progress the database cannot store -------------------------------------


def test_a_result_or_progress_the_database_cannot_store_fails_alone(worker_factory):
    good = enqueue_many("tests.effect", [{}] * 300)
    kinds = ("nul_result", "surrogate_result", "huge_result", "nan_progress")
    bad = {kind: enqueue_job("tests.bad_output", {"kind": kind}) for kind in kinds}
    sanitised = enqueue_job("tests.bad_output", {"kind": "nul_progress_message"})
    started = time.monotonic()
    worker_factory(concurrency=4)
    wait_for(lambda: not Job.objects.active().exists())
    assert time.monotonic() - started < 20  # no batch waits ~45 s on a "database outage"
    assert Job.objects.filter(pk__in=good, status="done").count() == 300
    assert Effect.objects.count() == 300  # unique keys: none of them ran twice
    failures = {kind: Job.objects.get(pk=job_id) for kind, job_id in bad.items()}
    assert {job.status for job in failures.values()} == {"failed"}
    assert "NUL" in failures["nul_result"].last_error
    assert "lone surrogate" in failures["surrogate_result"].last_error
    assert "RESULT_MAX_BYTES" in failures["huge_result"].last_error
    assert failures["nul_result"].error_type == "ResultNotSerializable"
    assert "must be a finite number" in failures["nan_progress"].last_error
    done = Job.objects.get(pk=sanitised)
    assert done.status == "done" and done.progress["message"] == "page\\x00two"


def test_a_completion_batch_the_database_refuses_is_written_one_by_one():
    ids = enqueue_many("t", [{}] * 3)
    jobs = claim_jobs("default", "w", None, 3).jobs
    recorded: list[tuple[int, str]] = []
    recorder = Recorder(
        "default",
        lambda slot, status: recorded.append((slot.job.id, status)),
        make_delays([0.01], "delays"),
        lambda: True,
    )
    slots = [
        Slot(
            job=j,
            ctx=JobContext(job=j, worker_id="w", attempt=1, using="default"),
            fence=Fence.of(j),
        )
        for j in jobs
    ]
    # JSON text jsonb refuses, as if a value had slipped past the worker's own checks
    results = ['{"n":1}', '{"bad":"\\u0000"}', '{"n":3}']
    recorder.write([(s, Verdict(result_json=r)) for s, r in zip(slots, results, strict=True)])
    assert sorted(recorded) == [(ids[0], "done"), (ids[1], "failed"), (ids[2], "done")]
    refused = Job.objects.get(pk=ids[1])
    assert refused.error_type == "ResultNotStorable"
    assert "refused" in refused.last_error and "Unicode escape" in refused.last_error


# --- 2. exception messages the database cannot store ----------------------------------------


@pytest.mark.parametrize(
    ("job_type", "payload", "shown"),
    [
        ("tests.bad_output", {"kind": "nul_error"}, "abc\\x00def"),
        ("tests.bad_output", {"kind": "surrogate_error"}, "\\ud800"),
        ("tests.iso_nul_error", {}, "abc\\x00def"),
    ],
)
def test_an_exception_message_the_database_cannot_store_is_recorded(
    worker_factory, job_type, payload, shown
):
    job_id = enqueue_job(job_type, payload)
    worker_factory()
    job = wait_status(job_id, "failed")
    assert job.error_type == "ValueError" and shown in job.last_error
    attempt = JobAttempt.objects.get(job_id=job_id)
    assert attempt.error_type == "ValueError" and shown in attempt.traceback
    assert "DataError" not in attempt.traceback


# --- 3. rows the worker cannot decode -------------------------------------------------------


def test_a_row_the_worker_cannot_read_fails_alone_and_its_claim_batch_runs(worker_factory):
    good = enqueue_many("tests.effect", [{}] * 60)
    with connection.cursor() as cursor:
        # Written by SQL, past enqueue_job's checks; priority 1 puts them in the first batch.
        cursor.execute(
            "INSERT INTO pqjobs_job (job_type, payload, priority) "
            "VALUES ('tests.noop', (repeat('[', 5000) || repeat(']', 5000))::jsonb, 1), "
            "('tests.noop', '{}', 1) RETURNING id"
        )
        deep, ancient = (row[0] for row in cursor.fetchall())
        cursor.execute(
            "UPDATE pqjobs_job SET run_after = '0044-03-15 00:00:00+00 BC' WHERE id = %s",
            [ancient],
        )
    worker_factory(concurrency=4)
    wait_for(lambda: not Job.objects.active().exists())
    assert Job.objects.filter(pk__in=good, status="done").count() == 60
    assert Effect.objects.count() == 60
    for job_id in (deep, ancient):
        status, error_type, error = Job.objects.values_list(
            "status", "error_type", "last_error"
        ).get(pk=job_id)
        assert (status, error_type) == ("failed", "UndecodableJob")
        assert "could not read this job's row" in error


# --- 4. everything the docs promise to validate is validated at enqueue ---------------------


def nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


BAD_ENQUEUES = [
    pytest.param({"job_type": "t", "payload": {"a": "\udc80"}}, PayloadError, id="surrogate"),
    pytest.param({"job_type": "t\x00x"}, InvalidJobOption, id="nul-job-type"),
    pytest.param({"job_type": "t", "queue": "q\x00"}, InvalidJobOption, id="nul-queue"),
    pytest.param({"job_type": "t", "dedupe_key": "k\x00"}, InvalidJobOption, id="nul-dedupe"),
    pytest.param({"job_type": "t", "queue": "q" * 150}, InvalidJobOption, id="long-queue"),
    pytest.param({"job_type": "t", "priority": -(2**31)}, InvalidJobOption, id="min-int"),
    pytest.param(
        {"job_type": "t", "delay": timedelta(days=365 * 8000)}, InvalidJobOption, id="year-10k"
    ),
    pytest.param({"job_type": "t", "payload": nested(985)}, PayloadError, id="deep-payload"),
]


@pytest.mark.parametrize(("options", "error"), BAD_ENQUEUES)
def test_enqueue_job_refuses_with_our_error_and_the_callers_transaction_goes_on(options, error):
    with transaction.atomic():
        Counter.objects.create(name="before")
        with pytest.raises(error):
            enqueue_job(**options)
        Counter.objects.create(name="after")  # the transaction was not aborted
    assert Counter.objects.count() == 2
    assert not Job.objects.exists()


@pytest.mark.parametrize(("options", "error"), BAD_ENQUEUES)
def test_enqueue_on_commit_refuses_at_the_call_and_later_callbacks_still_run(options, error):
    ran: list[str] = []
    with transaction.atomic():
        with pytest.raises(error):
            enqueue_on_commit(**options)
        enqueue_on_commit("t", {"fine": True})
        transaction.on_commit(lambda: ran.append("a later callback"))
    assert ran == ["a later callback"]
    assert list(Job.objects.values_list("payload", flat=True)) == [{"fine": True}]


# --- 5. connections the server closed are not charged to jobs -------------------------------


def test_connections_the_server_closed_do_not_cost_a_job_its_attempt(worker_factory):
    worker_factory(concurrency=2)
    warm = enqueue_many("tests.effect", [{}] * 6)  # every executor opens its connection
    wait_for(lambda: Job.objects.filter(pk__in=warm, status="done").count() == 6)
    with connection.cursor() as cursor:  # as a restart, idle_session_timeout or a DBA would
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    ids = enqueue_many("tests.effect", [{}] * 6)
    wait_for(lambda: Job.objects.filter(pk__in=ids, status="done").count() == 6)
    assert not JobAttempt.objects.exists()
    assert set(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {1}


# --- 6. a long outage, and a restart in the middle of a drain -------------------------------


@pytest.mark.timeout(600)  # its drain may take minutes under load
@pytest.mark.slow
def test_a_restart_mid_drain_and_a_long_outage_lose_nothing():
    """On a disposable cluster: stop the server while 4 executors drain 1,500 jobs, keep it
    down far longer than the worker used to keep trying, start it again. Every job ends
    done, exactly once in effect, without waiting for the stale timeout (600 s here), and
    the worker is still running."""
    with disposable_cluster() as cluster:
        with cluster.connect() as db:
            db.execute(
                "INSERT INTO pqjobs_job (job_type, payload) "
                "SELECT 'tests.effect_quick_retry', '{}' FROM generate_series(1, 1500)"
            )

        def count(sql: str) -> int:
            with cluster.connect() as db:
                return int(db.execute(sql).fetchone()[0])

        done = "SELECT count(*) FROM pqjobs_job WHERE status = 'done'"
        with run_jobs("-c", "4", WORKER_STALE_TIMEOUT="600", **cluster.env()) as worker:
            wait_for(lambda: count(done) > 200)
            cluster.stop()
            time.sleep(8)
            cluster.start()
            wait_for(lambda: count(done) == 1500, timeout=240)
            assert worker.poll() is None, "the worker died in the outage"
            output = worker.output()
        assert count("SELECT count(*) FROM testapp_effect") == 1500
        assert count("SELECT count(*) FROM pqjobs_job WHERE status <> 'done'") == 0
        # handlers cut off mid-query were given their attempt back: none was charged
        assert count("SELECT count(*) FROM pqjobs_attempt WHERE outcome <> 'released'") == 0
    # an outage is reported, not a traceback every second
    # (a record's traceback may chain several: count the records that carry one; at most one
    # per thread and per maintenance step: the listener, the claim, each of the maintenance
    # thread's steps, as many of them as ran during the outage; and the completer's, one per
    # spell of failures: a CI run saw a second one 3 s after the restart, once it had written
    # again, so it may report two)
    lines = output.splitlines()
    with_traceback = [
        lines[n - 1]
        for n, line in enumerate(lines)
        if line.startswith("Traceback") and lines[n - 1]
    ]
    # what reported it: the message without its time and its count ("(1 in a row)", "(try
    # 1)", "; retrying in 0.1 s")
    sources = [
        re.split(r" \(|;", line.split("django_pqjobs: ", 1)[-1])[0] for line in with_traceback
    ]
    recorder = "database unavailable while recording job outcomes"
    others = [source for source in sources if source != recorder]
    assert len(others) == len(set(others)), "\n".join(with_traceback)
    assert sources.count(recorder) <= 2, "\n".join(with_traceback)
    assert len(with_traceback) <= 4 + len(Maintenance.STEPS), "\n".join(with_traceback)
    assert output.count("maintenance step schedule failed") <= 2


@pytest.mark.timeout(600)  # its drain may take up to 300 s under load
@pytest.mark.slow(seconds=40)
def test_a_restart_mid_drain_charges_no_job_an_attempt():
    """Jobs of one attempt each, two workers of four executors, the server restarted in the
    middle of the drain: handlers whose connection died under them are given their attempt
    back, so no job fails, and the drain ends soon after the server is back (a charged
    attempt would have failed its job; the stale timeout is 600 s)."""
    total = 3000
    with disposable_cluster() as cluster:
        with cluster.connect() as db:
            db.execute(
                "INSERT INTO pqjobs_job (job_type, payload, max_attempts) "
                "SELECT 'tests.effect_idempotent', '{}', 1 FROM generate_series(1, %s)",
                [total],
            )

        def count(sql: str) -> int:
            with cluster.connect() as db:
                return int(db.execute(sql).fetchone()[0])

        finished = "SELECT count(*) FROM pqjobs_job WHERE status IN ('done', 'failed')"
        env = {"WORKER_STALE_TIMEOUT": "600", **cluster.env()}
        with (
            run_jobs("-c", "4", "--worker-id", "a", **env) as first,
            run_jobs("-c", "4", "--worker-id", "b", **env) as second,
        ):
            wait_for(lambda: count(finished) > 300)
            cluster.stop()
            time.sleep(2)
            cluster.start()
            back = time.monotonic()
            wait_for(lambda: count(finished) == total, timeout=300)
            drained_in = time.monotonic() - back
            assert first.poll() is None and second.poll() is None
        assert count("SELECT count(*) FROM pqjobs_job WHERE status = 'failed'") == 0
        assert count("SELECT count(*) FROM pqjobs_attempt WHERE outcome <> 'released'") == 0
        assert count("SELECT count(*) FROM testapp_effect") == total
    # within half the stale timeout (600 s): the workers reconnected rather than waiting for
    # the jobs to go stale; ~10 s on a quiet machine
    assert drained_in < 300, f"the drain ended {drained_in:.1f} s after the server came back"


# --- 7. kill -9 does not charge jobs that never started -------------------------------------


def test_kill_9_charges_only_the_jobs_whose_handler_started():
    total = 400
    enqueue_many("tests.sleep", [{"seconds": 0.01, "effect": True}] * total, max_attempts=1)
    fast = {"WORKER_STALE_TIMEOUT": "2", "WORKER_REAP_INTERVAL": "0.5"}
    with run_jobs("-c", "2", "--worker-id", "doomed", **fast) as doomed:
        wait_for(lambda: Job.objects.filter(status="done").count() >= 60)
        doomed.signal(signal.SIGKILL)
        doomed.wait(10)
    wait_for(lambda: not other_sessions())
    held = list(Job.objects.filter(status="running", locked_by="doomed"))
    started = {
        job.id for job in held if job.started_at is not None and job.started_at >= job.locked_at
    }
    assert len(held) > len(started), "the worker held no job it had not started"
    with run_jobs("-c", "4", "--worker-id", "rescuer", **fast):
        wait_for(lambda: not Job.objects.active().exists())
    failed = set(Job.objects.filter(status="failed").values_list("id", flat=True))
    # only the jobs whose start was written (their handler had run START_MARK_DELAY) lost
    # their one attempt; the others were given it back
    assert failed == started
    assert Job.objects.filter(status="done").count() == total - len(failed)
    given_back = JobAttempt.objects.filter(error_type="WorkerLostBeforeStart")
    assert given_back.count() == len(held) - len(started)


# --- 13. names from the database cannot forge log lines -------------------------------------


def test_worker_logs_escape_names_written_behind_the_applications_back(worker_factory, caplog):
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pqjobs_job (job_type, payload, max_attempts) "
            "VALUES (%s, '{}', 1) RETURNING id",
            ["evil\x1b[31m\nFAKE job 1 done"],
        )
        (job_id,) = cursor.fetchone()
    worker_factory()
    wait_status(job_id, "failed")
    lines = [r.getMessage() for r in caplog.records if f"job {job_id} " in r.getMessage()]
    assert lines and all("\x1b" not in line and "\n" not in line for line in lines)
    assert any("evil\\x1b[31m\\nFAKE" in line for line in lines)
