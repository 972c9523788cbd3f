"""A failover that loses commits (issue #40): jobs marked ``running`` under a live worker that
is not running them are given back by that worker within seconds (its reconcile), not after
the stale timeout; a job it does run is never given back.

The first tests forge such a row on the shared server, as a promoted standby leaves it; the
last one crashes a disposable primary in the middle of a drain and promotes its
asynchronous standby, the workers reaching both through one multi-host DSN.
"""

from __future__ import annotations

import logging
import time

import pytest
from django.db import connection

from django_pqjobs import enqueue_job, enqueue_many
from django_pqjobs.models import Job, JobAttempt
from django_pqjobs.transitions import NOT_RUN_BY_WORKER
from tests.helpers import run_jobs, wait_for
from tests.pgcluster import disposable_cluster, standby_of
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


def forge_running(job_id: int, worker_id: str) -> None:
    """What a promoted standby that never received the job's end shows: running, under a
    worker that finished it, with a fresh heartbeat."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pqjobs_job SET status = 'running', locked_by = %s, heartbeat_at = now(), "
            "finished_at = NULL WHERE id = %s",
            [worker_id, job_id],
        )


def test_a_job_marked_running_under_a_worker_that_is_not_running_it_is_given_back(
    worker_factory, settings, caplog
):
    settings.PQJOBS = {**settings.PQJOBS, "RECONCILE_INTERVAL": 0.5}
    worker = worker_factory(concurrency=2, worker_id="w-reconcile", stale_timeout=600)
    job_id = enqueue_job("tests.effect_idempotent", {})
    wait_for(lambda: Job.objects.get(pk=job_id).status == "done")
    max_attempts = Job.objects.get(pk=job_id).max_attempts

    forge_running(job_id, worker.worker_id)
    forged_at = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="django_pqjobs"):
        given_back = wait_for(
            lambda: JobAttempt.objects.filter(job_id=job_id, error_type=NOT_RUN_BY_WORKER).first(),
            timeout=60,
        )
        released_in = time.monotonic() - forged_at
        # given back, it runs again (its handler is idempotent) and is done
        wait_for(lambda: Job.objects.get(pk=job_id).status == "done")

    assert released_in < 60  # by the reconciliation; the stale timeout is 600 s
    assert given_back.attempt == 1
    assert given_back.outcome == "released"
    assert given_back.worker_id == worker.worker_id
    assert given_back.traceback == (
        "released: worker w-reconcile was not running it (lost after a failover or reconnect)"
    )
    job = Job.objects.get(pk=job_id)
    # uncharged: one more attempt allowed, the attempt number not reused
    assert job.max_attempts == max_attempts + 1
    assert job.attempts == 2
    logged = [r for r in caplog.records if "was not running it" in r.getMessage()]
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert logged[0].levelno == logging.WARNING
    assert (
        logged[0]
        .getMessage()
        .startswith(
            f"released job {job_id} tests.effect_idempotent attempt 1: this worker (w-reconcile)"
        )
    )
    assert worker.outcomes.get("released") == 1


def test_a_job_claimed_before_the_worker_started_is_left_to_the_stale_rescue(
    worker_factory, settings
):
    """A process restarted under the same worker id (``run_jobs --processes`` restarts a dead
    one so) did not claim its predecessor's jobs: the stale rescue frees them, charging the
    attempts whose handler started."""
    settings.PQJOBS = {**settings.PQJOBS, "RECONCILE_INTERVAL": 0.1}
    old = enqueue_job("tests.effect_idempotent", {})
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pqjobs_job SET status = 'running', locked_by = 'w-same', attempts = 1, "
            "locked_at = now() - interval '1 minute', heartbeat_at = now() WHERE id = %s",
            [old],
        )
    worker = worker_factory(concurrency=2, worker_id="w-same", stale_timeout=600)
    ran = enqueue_job("tests.effect_idempotent", {})
    wait_for(lambda: Job.objects.get(pk=ran).status == "done")
    forge_running(ran, worker.worker_id)
    wait_for(lambda: Job.objects.get(pk=ran).status != "running")
    assert Job.objects.get(pk=old).status == "running"
    assert not JobAttempt.objects.filter(job_id=old).exists()


def test_the_reconcile_never_gives_back_a_job_the_worker_runs(
    worker_factory, settings, monkeypatch
):
    """A drain of short jobs with the reconcile as often as it goes beside it, each claim
    slowed between its commit and the worker's slots (as a busy process may be): the
    reconcile waits for the claim's jobs to be in the slots before it compares, so none is
    given back, and every job runs once (a second run of tests.effect breaks its unique key
    and fails)."""
    from django_pqjobs.worker import claim_loop

    claim_jobs = claim_loop.claim_jobs

    def slow_claim(*args, **kwargs):
        batch = claim_jobs(*args, **kwargs)
        if batch.jobs:
            time.sleep(0.02)  # committed, not yet in the slots
        return batch

    monkeypatch.setattr(claim_loop, "claim_jobs", slow_claim)
    settings.PQJOBS = {**settings.PQJOBS, "RECONCILE_INTERVAL": 0.01}
    total = 800
    worker = worker_factory(concurrency=4, worker_id="w-drain", stale_timeout=600)
    enqueue_many("tests.effect", [{}] * total)
    wait_for(
        lambda: JobAttempt.objects.exists() or Job.objects.filter(status="done").count() == total,
        timeout=90,
    )
    assert worker.claims > 10  # claims enough for the reconcile to meet some on their way
    assert not JobAttempt.objects.exists()
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    assert Effect.objects.count() == total


# --- a real failover -------------------------------------------------------------------------


@pytest.mark.timeout(600)  # its drain may take up to 300 s under load
@pytest.mark.slow(seconds=45)
def test_a_failover_to_a_standby_that_lost_commits_drains_within_seconds():
    """A primary and its asynchronous standby; two workers on a multi-host DSN
    (``target_session_attrs=read-write``) drain 4,000 jobs. Mid-drain the standby stops
    receiving WAL, the drain goes on for half a second (those commits are lost), the primary
    crashes and the standby is promoted. The workers reconnect to it and give back the jobs
    it shows running under them that they no longer run (their completion was lost): the
    drain ends long before the stale timeout (600 s) after the promotion, every job done.

    The jobs were enqueued before the standby was made: a failover loses the enqueues its
    standby had not received (those jobs are gone; nothing can bring them back)."""
    total = 4000
    with disposable_cluster() as primary:
        with primary.connect() as db:
            db.execute(
                "INSERT INTO pqjobs_job (job_type, payload) "
                "SELECT 'tests.effect_idempotent', '{}' FROM generate_series(1, %s)",
                [total],
            )
        with standby_of(primary) as standby:
            both = (
                f"postgres://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/"
                f"{primary.database}?target_session_attrs=read-write"
            )
            env = {
                **primary.env(),
                "DATABASE_URL": both,
                "WORKER_STALE_TIMEOUT": "600",
            }

            def count(cluster, sql: str) -> int:
                with cluster.connect() as db:
                    return int(db.execute(sql).fetchone()[0])

            done = "SELECT count(*) FROM pqjobs_job WHERE status = 'done'"
            with (
                run_jobs("-c", "4", "--worker-id", "a", **env) as first,
                run_jobs("-c", "4", "--worker-id", "b", **env) as second,
            ):
                wait_for(lambda: count(primary, done) > 400)
                # the standby stops receiving: what commits from now on is lost
                with standby.connect() as db:
                    db.execute("ALTER SYSTEM SET primary_conninfo = ''")
                    db.execute("SELECT pg_reload_conf()")
                wait_for(
                    lambda: not count(standby, "SELECT count(*) FROM pg_stat_wal_receiver"),
                    timeout=60,
                )
                time.sleep(0.5)
                assert count(primary, done) < total, "the drain ended before the failover"
                primary.crash()
                standby.promote()
                promoted = time.monotonic()
                left_at_promotion = count(
                    standby, "SELECT count(*) FROM pqjobs_job WHERE status <> 'done'"
                )
                wait_for(lambda: count(standby, done) == total, timeout=300)
                drained_in = time.monotonic() - promoted
                assert first.poll() is None and second.poll() is None
                output = first.output() + second.output()
            # long before the stale timeout (600 s) could have given the jobs back; ~10 s
            # on a quiet machine, more when two suites share two cores
            assert drained_in < 300, f"drained {drained_in:.1f} s after the promotion"
            assert left_at_promotion > 0
            assert count(standby, "SELECT count(*) FROM pqjobs_job WHERE status <> 'done'") == 0
            given_back = count(
                standby,
                "SELECT count(*) FROM pqjobs_attempt WHERE error_type = 'NotRunByWorker'",
            )
            assert given_back > 0, "no completion was lost: the test did not test the reconcile"
            assert output.count("was not running it") == given_back
            assert count(standby, "SELECT count(*) FROM testapp_effect") == total
