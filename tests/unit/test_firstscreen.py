"""firstscreen.plan: the job page's rows and sections for each status, from a job and what
the page read about it (no database)."""

from __future__ import annotations

from django_pqjobs.admin.firstscreen import Facts, WorkerSeen, plan
from django_pqjobs.models import Job


def rows_of(job: Job, facts: Facts) -> list[str]:
    return [name for _, spec in plan(job, facts) for name in spec["fields"]]


def titles(job: Job, facts: Facts) -> list[str | None]:
    return [title for title, _ in plan(job, facts)]


def test_a_failed_job_leads_with_its_error_then_its_payload_and_attempts():
    job = Job(status="failed", job_type="t", queue="default", attempts=3, max_attempts=3)
    facts = Facts(has_error=True, has_traceback=True, attempts=3, failures=3)
    first = plan(job, facts)[0][1]["fields"]
    assert first == ["status_detail", "last_error_summary", "job_type", "queue", "tries"]
    assert titles(job, facts)[:3] == [None, "Payload and result", "Attempt history"]
    assert titles(job, facts)[-1] == "Tracebacks"


def test_rows_that_do_not_apply_are_left_out():
    job = Job(status="ready", job_type="t", queue="default")
    rows = rows_of(job, Facts())
    for empty in ("dedupe_key", "key_held", "sequence", "fair", "why_waiting", "links"):
        assert empty not in rows
    for unset in ("deadline", "claimed", "worker", "heartbeat", "finished", "cancel_requested"):
        assert unset not in rows
    assert "Attempt history" not in titles(job, Facts())
    keyed = Job(status="ready", job_type="t", dedupe_key="k", sequence_key="s", fair_key="f")
    assert {"dedupe_key", "key_held", "sequence", "fair"} <= set(rows_of(keyed, Facts()))


def test_a_running_job_shows_its_worker_and_no_old_error_on_top():
    job = Job(status="running", job_type="t", locked_by="w-1", attempts=2)
    stale = WorkerSeen("w-1", heartbeat_age=95.0, live_after=15.0)
    facts = Facts(has_error=True, attempts=1, failures=1, worker=stale)
    first = plan(job, facts)[0][1]["fields"]
    assert first[:2] == ["status_detail", "worker_state"]
    assert "last_error_summary" not in first and "previous_error" not in first
    assert not stale.live and stale.stale_for == 80.0
    assert WorkerSeen("w-1", 3.0, 15.0).live and WorkerSeen("w-1", 3.0, 15.0).stale_for is None
    assert not WorkerSeen("w-1", None, 15.0).live


def test_a_waiting_workflow_shows_its_steps_first():
    job = Job(status="waiting", job_type="t", waiting_for=0)
    facts = Facts(has_steps=True, waits_because=True, attempts=2)
    assert titles(job, facts)[:2] == [None, "Workflow"]
    assert "why_waiting" in plan(job, facts)[0][1]["fields"]
    assert "Tracebacks" not in titles(job, facts)  # a park has none


def test_a_retried_job_calls_the_old_error_the_previous_attempts():
    job = Job(status="ready", job_type="t", attempts=3)
    first = plan(job, Facts(has_error=True))[0][1]["fields"]
    assert first[:2] == ["status_detail", "previous_error"]


def test_an_expired_job_says_why_even_without_an_error():
    job = Job(status="expired", job_type="t")
    assert plan(job, Facts())[0][1]["fields"][:2] == ["status_detail", "expiry"]
    assert "Tracebacks" not in titles(job, Facts(has_error=True))


def test_without_the_data_permission_the_data_is_said_hidden():
    job = Job(status="failed", job_type="t")
    rows = rows_of(job, Facts(shows_data=False, has_error=True, has_traceback=True))
    assert "data_hidden" in rows and "payload_pretty" not in rows and "tracebacks" not in rows
