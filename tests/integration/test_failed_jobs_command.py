"""manage.py failed_jobs: list failed jobs with filters, retry or cancel them in bulk."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import F

from django_pqjobs import enqueue_job
from django_pqjobs.models import Job, OperatorAction
from tests.helpers import ROOT, bound

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("unknown_job_types_allowed")]


def failed(job_type: str, error: str, *, queue: str = "default", hours_ago: float = 0) -> int:
    job_id = enqueue_job(job_type, queue=queue)
    Job.objects.filter(pk=job_id).update(
        status="failed",
        attempts=3,
        max_attempts=3,
        last_error=f"Traceback (most recent call last):\n  ...\n{error}",
        error_type=error.split(":")[0],
        finished_at=F("created_at") - timedelta(hours=hours_ago),
    )
    return job_id


def run(*args: str) -> str:
    out = StringIO()
    call_command("failed_jobs", *args, "--no-input", stdout=out)
    return out.getvalue()


def test_lists_failed_jobs_newest_first_with_their_error_line():
    first = failed("mail", "SMTPError: 550 mailbox unavailable", queue="emails", hours_ago=5)
    second = failed("report", "ValueError: bad \x1b[31mdate")
    enqueue_job("mail")  # ready: not listed
    lines = run().splitlines()
    assert lines[0] == "2 failed jobs match"
    assert lines[1].startswith(f"#{second} report queue=default attempts=3/3 at ")
    assert lines[1].endswith(": ValueError: bad \\x1b[31mdate")  # control characters escaped
    assert lines[2].startswith(f"#{first} mail queue=emails") and "550 mailbox" in lines[2]


def test_filters_type_queue_age_and_error_text():
    old_mail = failed("mail", "SMTPError: 550", queue="emails", hours_ago=5)
    new_mail = failed("mail", "TimeoutError: smtp", queue="emails")
    failed("report", "ValueError: x")
    assert f"#{old_mail} " in run("--type", "mail", "--older-than", "2h")
    assert f"#{new_mail} " not in run("--type", "mail", "--older-than", "2h")
    assert run("--newer-than", "1h").startswith("2 failed jobs match")
    assert run("--queue", "emails", "--error", "smtperror").startswith("1 failed job matches")
    assert run("--error", "TIMEOUT").splitlines()[1].startswith(f"#{new_mail} ")
    assert run("--limit", "1").startswith("3 failed jobs match (showing the newest 1")


def test_retry_in_bulk_with_a_dry_run_first():
    mails = [failed("mail", "SMTPError: 550") for _ in range(3)]
    other = failed("report", "ValueError: x")
    out = run("--type", "mail", "--retry", "--dry-run")
    assert out.startswith("3 failed jobs match; dry run: would retry 3")
    assert Job.objects.filter(status="failed").count() == 4
    out = run("--type", "mail", "--retry", "--by", "oncall")
    assert out.strip().endswith("3 jobs put back to ready")
    trail = OperatorAction.objects.values_list("action", "actor", "job_id")
    assert sorted(trail) == sorted(("retry", "oncall", job_id) for job_id in mails)
    assert set(Job.objects.filter(status="ready").values_list("pk", flat=True)) == set(mails)
    retried = Job.objects.get(pk=mails[0])
    # numbering goes on, with as many attempts again and the backoff from its first step
    assert (retried.attempts, retried.max_attempts, retried.retried_from) == (3, 6, 3)
    assert Job.objects.get(pk=other).status == "failed"


def test_retrying_jobs_can_be_cancelled_or_made_due():
    waiting = enqueue_job("flaky", delay=600)
    Job.objects.filter(pk=waiting).update(attempts=1, last_error="ConnectionError: refused")
    fresh = enqueue_job("flaky", delay=600)  # never failed: not "retrying"
    out = run("--status", "retrying")
    assert out.startswith("1 retrying job matches") and "next try" in out
    assert run("--status", "retrying", "--retry").strip().endswith("1 job made due now")
    assert Job.objects.filter(pk=waiting, run_after__lte=F("updated_at")).exists()
    assert run("--status", "retrying", "--cancel").strip().endswith("1 job cancelled")
    assert Job.objects.get(pk=waiting).status == "cancelled"
    assert Job.objects.get(pk=fresh).status == "ready"
    with pytest.raises(CommandError, match="--cancel applies to jobs waiting for a retry"):
        run("--cancel")


def test_cancelled_jobs_can_be_retried():
    job_id = enqueue_job("mail")
    call_command("failed_jobs", "--status", "cancelled", stdout=StringIO())
    Job.objects.filter(pk=job_id).update(status="cancelled", finished_at=F("created_at"))
    assert run("--status", "cancelled", "--retry").strip().endswith("1 job put back to ready")
    assert Job.objects.get(pk=job_id).status == "ready"


@pytest.mark.parametrize("answer", ["y", "Yes", "yes ", "no", ""])
def test_retry_asks_and_goes_on_only_on_yes_typed_in_full(monkeypatch, answer):
    """As Django's flush and collectstatic ask: 'yes', nothing else."""
    job_id = failed("mail", "SMTPError: 550")
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or answer)
    with pytest.raises(CommandError, match=r"^retry cancelled: nothing changed$"):
        call_command("failed_jobs", "--retry", stdout=StringIO())
    assert asked == ["Retry 1 job?\n\nType 'yes' to continue, or 'no' to cancel: "]
    assert Job.objects.get(pk=job_id).status == "failed"

    monkeypatch.setattr("builtins.input", lambda prompt: "yes")
    out = StringIO()
    call_command("failed_jobs", "--retry", stdout=out)
    assert out.getvalue().strip().endswith("1 job put back to ready")
    assert Job.objects.get(pk=job_id).status == "ready"


def test_retry_without_an_answer_changes_nothing(monkeypatch):
    job_id = failed("mail", "SMTPError: 550")

    def closed(prompt: str) -> str:
        raise EOFError

    monkeypatch.setattr("builtins.input", closed)
    with pytest.raises(CommandError) as refused:
        call_command("failed_jobs", "--retry", stdout=StringIO())
    assert str(refused.value) == (
        "retry cancelled: no answer to the confirmation (the input is closed); pass --no-input "
        "to act without asking"
    )
    assert Job.objects.get(pk=job_id).status == "failed"


@pytest.mark.django_db(transaction=True)
def test_an_answer_piped_in_is_read_too():
    """Not only on a terminal: `echo no | manage.py failed_jobs --retry` retries nothing."""
    job_id = failed("mail", "SMTPError: 550")
    done = subprocess.run(
        [sys.executable, "-m", "django", "failed_jobs", "--retry"],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PQJOBS_TEST_DATABASE": connection.settings_dict["NAME"],
        },
        input="no\n",
        capture_output=True,
        text=True,
        timeout=bound(60),
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "CommandError: retry cancelled: nothing changed"
    assert Job.objects.get(pk=job_id).status == "failed"


def test_status_expired_lists_and_retries_the_jobs_that_missed_their_deadline():
    expired = enqueue_job("mail", expires_in=60)
    Job.objects.filter(pk=expired).update(
        status="expired",
        finished_at=F("created_at"),
        error_type="Expired",
        last_error="not started by its deadline, 2026-11-27 08:00:00 UTC",
    )
    failed("mail", "SMTPError: 550")
    lines = run("--status", "expired").splitlines()
    assert lines[0] == "1 expired job matches"
    assert lines[1].startswith(f"#{expired} mail") and "deadline" in lines[1]
    assert run("--status", "expired", "--retry").splitlines()[-1] == "1 job put back to ready"
    job = Job.objects.get(pk=expired)
    assert (job.status, job.expires_at) == ("ready", None)
