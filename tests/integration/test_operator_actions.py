"""Operator actions from code (``operations.py``, ``flow``) and the audit trail they write."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import connection, connections

from django_pqjobs import InvalidJobOption, cancel_job, enqueue_job, flow, operations, retry_job
from django_pqjobs.models import Job, JobAttempt, OperatorAction
from django_pqjobs.worker.claiming import claim_jobs
from tests.helpers import bound

pytestmark = pytest.mark.django_db(transaction=True)


def trail() -> list[tuple]:
    return list(
        OperatorAction.objects.order_by("id").values_list("actor", "action", "job_id", "target")
    )


def failed(job_type: str = "tests.noop") -> int:
    job_id = enqueue_job(job_type)
    Job.objects.filter(pk=job_id).update(status="failed", attempts=5)
    return job_id


def test_every_job_action_from_code_is_audited_when_given_by():
    retried, cancelled, made_due, deleted = failed(), enqueue_job("t"), enqueue_job("t"), failed()
    running = enqueue_job("tests.echo", priority=10)
    (job,) = claim_jobs("default", "w1", None, 1).jobs
    assert retry_job(retried, by="cron:nightly-fix")
    assert cancel_job(cancelled, by="support-bot") == "cancelled"
    assert cancel_job(running, by="support-bot") == "cancel_requested"
    assert [r.job_id for r in operations.run_jobs_now([made_due], by="ops")] == [made_due]
    assert [d.job_id for d in operations.delete_jobs([deleted], by="ops")] == [deleted]
    assert operations.release_job(running, worker_id="w1", attempt=job.attempts, by="ops") == (
        "cancelled"  # its cancel request is honoured
    )
    assert trail() == [
        ("cron:nightly-fix", "retry", retried, "tests.noop"),
        ("support-bot", "cancel", cancelled, "t"),
        ("support-bot", "cancel", running, "tests.echo"),
        ("ops", "run_now", made_due, "t"),
        ("ops", "delete", deleted, "tests.noop"),  # the job is gone; its type is kept
        ("ops", "release", running, "tests.echo"),
    ]
    details = list(OperatorAction.objects.order_by("id").values_list("detail", flat=True))
    assert details == [
        "failed → ready; next attempt 6 of 10",
        "cancelled",
        "cancel requested (it was running)",
        "now first of its priority in the claim order",
        "deleted (was failed)",
        "attempt 1 on w1 released: cancelled",
    ]
    note = JobAttempt.objects.get(job_id=running, outcome="released").traceback
    assert note.startswith("released by ops while running on worker w1")


def test_without_by_nothing_is_recorded_and_skipped_jobs_leave_no_row():
    job_id = failed()
    assert retry_job(job_id)  # application code, not an operator
    assert not retry_job(job_id, by="ops")  # ready now: skipped, so not recorded
    assert cancel_job(999_999_999, by="ops") is None
    assert operations.release_job(job_id, worker_id="w", attempt=1, by="ops") is None
    assert not OperatorAction.objects.exists()


@pytest.mark.parametrize("by", ["", "  ", "a\nb", "x" * 151, 42])
def test_a_bad_by_is_refused_before_anything_changes(by):
    job_id = failed()
    with pytest.raises(InvalidJobOption, match="by"):
        retry_job(job_id, by=by)
    with pytest.raises(InvalidJobOption, match="by"):
        flow.pause_queue("emails", by=by or "\x00")
    assert Job.objects.get(pk=job_id).status == "failed"
    assert not OperatorAction.objects.exists()
    assert flow.paused() == []


def test_the_change_and_its_audit_row_commit_together(monkeypatch):
    from django_pqjobs import audit

    job_id = failed()

    def broken(*args, **kwargs):
        raise RuntimeError("the audit table is gone")

    monkeypatch.setattr(audit, "record_jobs", broken)
    with pytest.raises(RuntimeError):
        retry_job(job_id, by="ops")
    assert Job.objects.get(pk=job_id).status == "failed"  # rolled back with it


def test_pause_and_resume_from_code_are_audited_with_by():
    assert flow.pause_queue("emails", by="deploy-script")
    assert not flow.pause_queue("emails", by="deploy-script")  # paused already: no row
    assert flow.pause_job_type("tests.noop")  # no by: shown as paused by nobody, no row
    assert flow.resume_queue("emails", by="deploy-script") == 0
    assert flow.resume_job_type("tests.noop", by="alice") == 0
    assert flow.resume_job_type("tests.noop", by="alice") is None  # not paused: no row
    assert trail() == [
        ("deploy-script", "pause", None, "queue emails"),
        ("deploy-script", "resume", None, "queue emails"),
        ("alice", "resume", None, "job type tests.noop"),
    ]


def keyed_failure(key: str) -> int:
    job_id = enqueue_job("tests.noop", dedupe_key=key)
    Job.objects.filter(pk=job_id).update(status="failed", attempts=5)
    return job_id


def test_a_retry_leaves_a_job_whose_dedupe_key_an_active_job_holds():
    old = keyed_failure("invoice-7")
    active = enqueue_job("tests.noop", dedupe_key="invoice-7")
    assert active != old
    free = keyed_failure("invoice-8")
    # was an IntegrityError of the active dedupe index, and nothing was retried
    retried = operations.retry_jobs([old, free], by="ops")
    assert [r.job_id for r in retried] == [free]
    statuses = dict(Job.objects.values_list("pk", "status"))
    assert statuses == {old: "failed", active: "ready", free: "ready"}
    assert [row[2] for row in trail()] == [free]


def test_of_several_failed_jobs_with_one_key_a_retry_puts_back_the_newest():
    first, second = keyed_failure("k"), keyed_failure("k")
    assert first != second
    assert [r.job_id for r in operations.retry_jobs([first, second])] == [second]
    assert dict(Job.objects.values_list("pk", "status")) == {first: "failed", second: "ready"}


def test_a_retry_racing_an_enqueue_of_the_same_key_leaves_the_job_failed():
    # Another connection inserts an active job with the key and has not committed when the
    # retry runs: the retry's snapshot does not see it, its UPDATE waits on the index entry
    # and collides when the enqueue commits. The retry tries again and leaves the job.
    old = keyed_failure("race")
    params = connection.get_connection_params()
    with psycopg.connect(**params, autocommit=False) as other:
        other.execute(
            "SELECT pqjobs_enqueue('tests.noop', 'default', '{}'::jsonb, 0, 3, NULL, 0, NULL, "
            "'race', NULL, NULL, NULL, NULL)"
        )
        outcome: dict[str, object] = {}

        def retry() -> None:
            try:
                outcome["retried"] = operations.retry_jobs([old])
            except Exception as exc:  # pragma: no cover - the failure this test catches
                outcome["error"] = exc
            finally:
                connections.close_all()

        thread = threading.Thread(target=retry)
        thread.start()
        time.sleep(0.5)
        assert thread.is_alive()  # waiting for the enqueue's index entry
        other.commit()
        thread.join(bound(10))
    assert outcome == {"retried": []}
    statuses = sorted(Job.objects.filter(dedupe_key="race").values_list("status", flat=True))
    assert statuses == ["failed", "ready"]
