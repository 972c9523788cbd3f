"""The operator console's controls: Release, Delete (one job and bulk), Pause / Resume and
flow control on the dashboard and the list, the audit trail on the job page, and the job
page as a view (issues 14, 17 and 18)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from django_pqjobs import enqueue_job, flow
from django_pqjobs.admin.jobs import JobAdmin
from django_pqjobs.clock import database_now
from django_pqjobs.models import Job, JobAttempt, OperatorAction, Pause, Schedule
from django_pqjobs.transitions import Completion, Fence, complete
from django_pqjobs.worker import housekeeping
from django_pqjobs.worker.claiming import claim_jobs
from tests.helpers import make_user

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = reverse("admin:django_pqjobs_job_changelist")
DASHBOARD = reverse("admin:django_pqjobs_job_dashboard")
AUDIT_LIST = reverse("admin:django_pqjobs_operatoraction_changelist")
PAUSE = reverse("admin:django_pqjobs_job_pause", args=["pause"])
RESUME = reverse("admin:django_pqjobs_job_pause", args=["resume"])


def change_url(job_id: int) -> str:
    return reverse("admin:django_pqjobs_job_change", args=[job_id])


def release_url(job_id: int) -> str:
    return reverse("admin:django_pqjobs_job_release", args=[job_id])


def delete_url(job_id: int) -> str:
    return reverse("admin:django_pqjobs_job_delete", args=[job_id])


@pytest.fixture
def operator() -> Client:
    return make_user(
        "alice",
        "view_job",
        "change_job",
        "delete_job",
        "view_operatoraction",
        "view_schedule",
        "change_schedule",
        "add_job",  # Run now of a schedule enqueues
    )


@pytest.fixture
def viewer() -> Client:
    return make_user("victor", "view_job")


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def text_of(response) -> str:
    """The page as text (tags removed, whitespace collapsed)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


def running_job(worker: str = "stuck-worker", **options) -> Job:
    """A job claimed by ``worker`` (the highest priority, so other ready jobs stay)."""
    job_id = enqueue_job("tests.noop", priority=1000, **options)
    [job] = claim_jobs("default", worker, None, 1).jobs
    assert job.id == job_id
    return job


def failed_job(attempts: int = 3) -> int:
    job_id = enqueue_job("tests.noop", max_attempts=attempts)
    for n in range(1, attempts + 1):
        JobAttempt.objects.create(
            job_id=job_id,
            attempt=n,
            outcome="error",
            worker_id="w",
            error_type="ValueError",
            traceback=f"Traceback (most recent call last):\nValueError: try {n}",
        )
    Job.objects.filter(pk=job_id).update(
        status="failed",
        attempts=attempts,
        finished_at=database_now("default"),
        last_error=f"ValueError: try {attempts}",
        error_type="ValueError",
    )
    return job_id


# --- Retry: attempts numbered on, the retry in the timeline --------------------------------


def test_retry_shows_in_the_timeline_with_who_and_numbering_goes_on(operator):
    job_id = failed_job(attempts=2)
    operator.post(reverse("admin:django_pqjobs_job_action", args=[job_id, "retry"]))
    job = Job.objects.get(pk=job_id)
    assert (job.status, job.attempts, job.max_attempts) == ("ready", 2, 4)
    # a worker runs it again: attempt 3, not a second "attempt 1"
    (claimed,) = claim_jobs("default", "w2", None, 1).jobs
    assert claimed.attempts == 3
    assert complete("default", Completion(Fence.of(claimed), None, 5))
    response = operator.get(change_url(job_id))
    page = text_of(response)
    assert "retried by alice failed → ready; next attempt 3 of 4" in page
    # the timeline table names each attempt once (its picture draws them again, as SVG)
    html = response.content.decode()
    table = re.search(r'<table class="pqjobs-timeline">.*?</table>', html, re.S)
    assert table is not None and table.group(0).count("attempt 1: error") == 1
    assert "attempt 3 started w2" in page
    order = [page.index(s) for s in ("attempt 2: error", "retried by alice", "attempt 3 started")]
    assert order == sorted(order)
    [row] = OperatorAction.objects.filter(job_id=job_id)
    assert (row.actor, row.action, row.target) == ("alice", "retry", "tests.noop")


def test_the_job_page_is_a_view_with_one_time_format(operator):
    job_id = failed_job()
    response = operator.get(change_url(job_id))
    page = response.content.decode()
    assert "<h1>View job</h1>" in page and "Change job" not in page
    shown = re.findall(r"<time [^>]*>([^<]+)</time>", page)
    assert shown and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \w+", t) for t in shown)
    shown_text = text_of(response)
    assert not re.search(r"\b(a\.m\.|p\.m\.)", shown_text)  # Django's default format is gone
    assert not re.search(r"\d\d:\d\d:\d\d\.\d+", shown_text)  # and so is str(datetime)


def test_a_done_job_does_not_show_an_error_as_if_it_failed(operator):
    job_id = enqueue_job("tests.noop")
    JobAttempt.objects.create(job_id=job_id, attempt=1, outcome="error", error_type="OldError")
    # written before completion cleared the error (or by hand)
    Job.objects.filter(pk=job_id).update(
        status="done",
        attempts=2,
        finished_at=database_now("default"),
        last_error="Traceback\nOldError: from attempt 1",
        error_type="OldError",
    )
    response = operator.get(change_url(job_id))
    assert "field-last_error_summary" not in response.content.decode()
    assert "attempt 1: error" in text_of(response)  # the history keeps it


# --- Release: one stuck running attempt, fenced ---------------------------------------------


def test_release_page_releases_the_attempt_it_showed(operator):
    job = running_job(max_attempts=2)
    page = text_of(operator.get(release_url(job.id)))
    assert "runs attempt 1 on worker stuck-worker" in page
    assert "That worker is not among the live workers" in page
    response = operator.post(
        release_url(job.id), {"worker": "stuck-worker", "attempt": "1"}, follow=True
    )
    assert messages_of(response) == [
        f"Job {job.id}: attempt 1 on worker stuck-worker released, the job is ready now. "
        "Whatever that worker still records is ignored."
    ]
    row = Job.objects.get(pk=job.id)
    assert (row.status, row.attempts, row.max_attempts) == ("ready", 1, 3)
    attempt = JobAttempt.objects.get(job_id=job.id)
    assert (attempt.outcome, attempt.error_type) == ("released", "ReleasedByOperator")
    assert attempt.traceback.startswith("released by alice while running on worker stuck-worker")
    [audit] = OperatorAction.objects.filter(job_id=job.id)
    assert (audit.actor, audit.action) == ("alice", "release")
    assert "released by alice" in text_of(operator.get(change_url(job.id)))
    # the old worker's late success is fenced off
    assert not complete("default", Completion(Fence(job.id, "stuck-worker", 1), None, 1))


def test_release_does_nothing_when_the_job_moved_on(operator):
    job = running_job()
    Job.objects.filter(pk=job.id).update(locked_by="another-worker", attempts=2)
    response = operator.post(
        release_url(job.id), {"worker": "stuck-worker", "attempt": "1"}, follow=True
    )
    assert (
        "was not released: attempt 1 on worker stuck-worker is no longer running"
        in (messages_of(response)[0])
    )
    assert Job.objects.get(pk=job.id).status == "running"
    assert not OperatorAction.objects.exists()


def test_release_needs_the_change_permission_and_post(viewer, operator):
    job = running_job()
    assert viewer.get(release_url(job.id)).status_code == 403
    assert (
        viewer.post(release_url(job.id), {"worker": "stuck-worker", "attempt": "1"}).status_code
        == 403
    )
    assert Job.objects.get(pk=job.id).status == "running"
    csrf = Client(enforce_csrf_checks=True)
    csrf.force_login(User.objects.get(username="alice"))
    assert (
        csrf.post(release_url(job.id), {"worker": "stuck-worker", "attempt": "1"}).status_code
        == 403
    )
    assert Job.objects.get(pk=job.id).status == "running"
    assert release_url(job.id) in operator.get(change_url(job.id)).content.decode()
    assert release_url(job.id) not in viewer.get(change_url(job.id)).content.decode()


# --- Delete: never a running job; bulk without listing the selection -----------------------


def test_the_job_page_refuses_to_delete_a_running_job(operator):
    job = running_job()
    assert delete_url(job.id) not in operator.get(change_url(job.id)).content.decode()
    response = operator.get(delete_url(job.id), follow=True)
    assert "is running and is not deleted" in messages_of(response)[0]
    operator.post(delete_url(job.id), {"post": "yes"})
    assert Job.objects.filter(pk=job.id).exists()
    assert not OperatorAction.objects.exists()


def test_deleting_one_job_counts_its_history_and_is_audited(operator):
    job_id = failed_job(attempts=3)
    assert delete_url(job_id) in operator.get(change_url(job_id)).content.decode()
    confirm = text_of(operator.get(delete_url(job_id)))
    assert f"Job {job_id}: tests.noop (failed)" in confirm
    assert "3 attempts of its history" in confirm
    response = operator.post(delete_url(job_id), {"post": "yes"}, follow=True)
    assert response.status_code == 200
    assert not Job.objects.filter(pk=job_id).exists()
    assert not JobAttempt.objects.filter(job_id=job_id).exists()
    [row] = OperatorAction.objects.all()
    assert (row.action, row.actor, row.job_id, row.target) == (
        "delete",
        "alice",
        job_id,
        "tests.noop",
    )
    assert row.detail == "deleted (was failed)"
    # the trail outlives the job: found by its id in the audit list
    assert "deleted (was failed)" in text_of(operator.get(AUDIT_LIST, {"q": str(job_id)}))


def test_a_job_claimed_while_its_delete_is_posted_is_kept(operator, monkeypatch):
    job_id = enqueue_job("tests.noop")
    assert operator.get(delete_url(job_id)).status_code == 200  # the confirmation page
    counting = JobAdmin.get_deleted_objects

    def claimed_meanwhile(self, objs, request):
        # after the page's own status check, before the delete: a worker claims the job
        claim_jobs("default", "w", None, 1)
        return counting(self, objs, request)

    monkeypatch.setattr(JobAdmin, "get_deleted_objects", claimed_meanwhile)
    response = operator.post(delete_url(job_id), {"post": "yes"}, follow=True)
    assert "was not deleted: a worker claimed it meanwhile" in messages_of(response)[0]
    assert Job.objects.get(pk=job_id).status == "running"


def test_bulk_delete_counts_by_status_deletes_all_but_running_jobs(operator):
    ready = [enqueue_job("tests.noop") for _ in range(3)]
    running = running_job()
    failed = failed_job()
    selected = [*ready, running.id, failed]
    confirm = operator.post(CHANGELIST, {"action": "delete_action", "_selected_action": selected})
    page = text_of(confirm)
    assert "Delete 4 jobs with their attempt history?" in page
    assert "ready 3 deleted" in page and "failed 1 deleted" in page
    assert "running 1 kept: running jobs are not deleted" in page
    assert change_url(failed) not in confirm.content.decode()  # a summary, not a list
    response = operator.post(
        CHANGELIST,
        {"action": "delete_action", "_selected_action": selected, "post": "yes"},
        follow=True,
    )
    assert messages_of(response) == ["4 jobs deleted. 1 skipped: running jobs are not deleted."]
    assert list(Job.objects.values_list("pk", flat=True)) == [running.id]
    assert sorted(OperatorAction.objects.values_list("job_id", flat=True)) == sorted(
        [*ready, failed]
    )


def test_bulk_delete_across_the_whole_filtered_list(operator, monkeypatch):
    from django_pqjobs.admin import actions

    monkeypatch.setattr(actions, "DELETE_BATCH", 7)  # several batches
    keep = enqueue_job("tests.echo")
    doomed = [enqueue_job("tests.noop") for _ in range(60)]  # more than a page (50)
    url = f"{CHANGELIST}?job_type=tests.noop"
    on_page = doomed[-50:]
    data = {"action": "delete_action", "_selected_action": on_page, "select_across": "1"}
    confirm = operator.post(url, data)
    assert "Delete 60 jobs" in text_of(confirm)
    assert confirm.content.decode().count('name="_selected_action"') == 50
    response = operator.post(url, {**data, "post": "yes"}, follow=True)
    assert messages_of(response) == ["60 jobs deleted."]
    assert list(Job.objects.values_list("pk", flat=True)) == [keep]


def test_bulk_delete_needs_the_delete_permission(viewer):
    changer = make_user("carol", "view_job", "change_job")
    job_id = enqueue_job("tests.noop")
    for client in (viewer, changer):
        assert "delete_action" not in client.get(CHANGELIST).content.decode()
        client.post(
            CHANGELIST, {"action": "delete_action", "_selected_action": [job_id], "post": "yes"}
        )
    assert Job.objects.filter(pk=job_id).exists()


# --- flow control: pause and resume, what holds jobs, declared limits ----------------------


def test_pause_and_resume_a_queue_from_the_dashboard(operator):
    enqueue_job("tests.noop", queue="emails")
    response = operator.post(PAUSE, {"kind": "queue", "name": "emails"}, follow=True)
    assert messages_of(response) == [
        "Paused the queue 'emails': workers start none of its jobs from now on "
        "(running ones finish)."
    ]
    pause = Pause.objects.get()
    assert (pause.kind, pause.name, pause.paused_by) == ("queue", "emails", "alice")
    page = text_of(operator.get(DASHBOARD))
    # its ready job was held by the pause itself
    assert "queue emails alice" in page and "emails (paused) blocked 1" in page
    listing = text_of(operator.get(CHANGELIST))
    assert "Paused: queue emails (by alice, since " in listing
    assert claim_jobs("default", "w", None, 10).jobs == []  # the pause holds
    assert Job.objects.get().status == "blocked"
    response = operator.post(RESUME, {"kind": "queue", "name": "emails"}, follow=True)
    assert messages_of(response) == [
        "Resumed the queue 'emails': 1 job held by the pause went back to ready."
    ]
    assert not Pause.objects.exists() and Job.objects.get().status == "ready"
    assert "Paused:" not in text_of(operator.get(CHANGELIST))
    assert list(OperatorAction.objects.order_by("id").values_list("action", "target", "actor")) == [
        ("pause", "queue emails", "alice"),
        ("resume", "queue emails", "alice"),
    ]


def test_pausing_a_job_type_nobody_knows_says_so(operator):
    response = operator.post(PAUSE, {"kind": "job_type", "name": "tests.nope"}, follow=True)
    assert messages_of(response)[0].endswith(
        " Check the spelling: the job type 'tests.nope' is declared by no @job or @task, and no "
        "job has it; did you mean 'tests.noop'?"
    )
    known = operator.post(PAUSE, {"kind": "job_type", "name": "tests.noop"}, follow=True)
    assert "check the spelling" not in messages_of(known)[0]
    again = operator.post(PAUSE, {"kind": "job_type", "name": "tests.noop"}, follow=True)
    assert messages_of(again) == ["The job type 'tests.noop' was paused already."]


@pytest.mark.parametrize(
    "data, error",
    [
        ({"kind": "queue", "name": "emails\x1b[31m"}, "must not contain control characters"),
        ({"kind": "queue", "name": "q" * 150}, "longer than 100 characters"),
        ({"kind": "job_type", "name": "t" * 250}, "at most 200 characters"),
        ({"kind": "queue", "name": " "}, "must be a non-empty string"),
        ({"kind": "worker", "name": "x"}, "Select a valid choice"),
        ({"kind": "queue"}, "This field is required"),
    ],
)
def test_pause_form_refuses_bad_names_with_the_reason(operator, data, error):
    response = operator.post(PAUSE, data, follow=True)
    [message] = messages_of(response)
    assert message.startswith("Nothing paused: ") and error in message
    assert not Pause.objects.exists()


def test_pause_and_resume_need_the_change_permission_post_and_csrf(viewer):
    assert viewer.post(PAUSE, {"kind": "queue", "name": "emails"}).status_code == 403
    page = viewer.get(DASHBOARD).content.decode()
    assert PAUSE not in page
    flow.pause_queue("emails", by="ops")
    assert RESUME not in viewer.get(DASHBOARD).content.decode()
    assert viewer.post(RESUME, {"kind": "queue", "name": "emails"}).status_code == 403
    operator = User.objects.create_superuser("root", password="pw")
    csrf = Client(enforce_csrf_checks=True)
    csrf.force_login(operator)
    assert csrf.post(RESUME, {"kind": "queue", "name": "emails"}).status_code == 403
    assert Pause.objects.exists()
    client = Client()
    client.force_login(operator)
    assert client.get(PAUSE).status_code == 405
    assert client.post(reverse("admin:django_pqjobs_job_pause", args=["x"])).status_code == 403


def test_blocked_jobs_show_what_holds_them_on_the_list_and_the_dashboard(operator):
    held = [enqueue_job("tests.limited", {"k": "acct-7"}) for _ in range(3)]
    claim_jobs("default", "w", None, 10)  # one runs, two are held by the limit of key k:acct-7
    statuses = dict(Job.objects.filter(pk__in=held).values_list("pk", "status"))
    blocked = [pk for pk, status in statuses.items() if status == "blocked"]
    assert len(blocked) == 2
    listing = text_of(operator.get(CHANGELIST, {"status__exact": "blocked"}))
    assert listing.count("blocked attempts 0 / 1 concurrency limit of key k:acct-7") == 2
    page = text_of(operator.get(change_url(blocked[0])))
    assert "held back by the concurrency limit of key k:acct-7" in page
    dashboard = text_of(operator.get(DASHBOARD))
    assert "concurrency limit k:acct-7 2" in dashboard
    # the declarations of the test app's types
    assert "tests.limited 1 k:{k} - - -" in dashboard
    assert "tests.rated - - - 20/1s type:tests.rated" in dashboard


# --- the dashboard's chart counts each job once --------------------------------------------


def test_dashboard_chart_counts_a_failed_job_once(operator):
    now = database_now("default") - timedelta(seconds=5)
    done = [enqueue_job("tests.noop") for _ in range(3)]
    Job.objects.filter(pk__in=done).update(status="done", finished_at=now, attempts=1)
    failed = failed_job(attempts=2)  # two failed attempts: one retried, one its failure
    Job.objects.filter(pk=failed).update(finished_at=now)
    retried = enqueue_job("tests.noop")  # failed once, waiting to retry
    JobAttempt.objects.create(job_id=retried, attempt=1, outcome="error")
    released = enqueue_job("tests.noop")  # given back at a shutdown: not a failure
    JobAttempt.objects.create(job_id=released, attempt=1, outcome="released")
    JobAttempt.objects.update(finished_at=now)
    page = text_of(operator.get(DASHBOARD))
    # 3 done + 1 failed job + 2 failed attempts that were retried, not 7
    assert "peak 6 / min" in page
    assert "done 3 failed jobs 1 failed attempts retried 2" in page


# --- the audit trail: every action, kept past the job, pruned on its own -------------------


def test_schedule_actions_are_audited(operator):
    schedule = Schedule.objects.create(
        name="nightly", job_type="tests.noop", interval_seconds=60, enabled=True
    )
    url = reverse("admin:django_pqjobs_schedule_changelist")
    for action in ("disable_schedules", "disable_schedules", "enable_schedules", "run_now"):
        operator.post(url, {"action": action, "_selected_action": [schedule.pk]})
    rows = list(
        OperatorAction.objects.order_by("id").values_list("action", "target", "schedule_id")
    )
    assert rows == [
        ("schedule_disable", "nightly", schedule.pk),  # the second disable changed nothing
        ("schedule_enable", "nightly", schedule.pk),
        ("schedule_run_now", "nightly", schedule.pk),
    ]
    job_id = Job.objects.get(schedule_id=schedule.pk).pk
    assert OperatorAction.objects.get(action="schedule_run_now").detail == (
        f"schedule 'nightly': enqueued job {job_id}"
    )


def test_the_trail_outlives_the_pruned_job_and_is_pruned_on_its_own(operator, settings):
    job_id = failed_job()
    operator.post(reverse("admin:django_pqjobs_job_action", args=[job_id, "retry"]))
    operator.post(reverse("admin:django_pqjobs_job_action", args=[job_id, "cancel"]))
    Job.objects.filter(pk=job_id).update(finished_at=database_now("default") - timedelta(days=60))
    old = OperatorAction.objects.create(actor="bob", action="pause", target="queue x")
    OperatorAction.objects.filter(pk=old.pk).update(
        at=database_now("default") - timedelta(days=400)
    )
    housekeeping.prune_finished("default")
    assert not Job.objects.filter(pk=job_id).exists()  # pruned (cancelled, 7 days)
    kept = list(OperatorAction.objects.order_by("id").values_list("job_id", "action"))
    assert kept == [(job_id, "retry"), (job_id, "cancel")]  # the year-old pause is gone
    page = text_of(operator.get(AUDIT_LIST, {"q": str(job_id)}))
    assert "alice Retry" in page and "alice Cancel" in page
    settings.PQJOBS = {**settings.PQJOBS, "AUDIT_RETENTION": None}
    OperatorAction.objects.update(at=database_now("default") - timedelta(days=4000))
    housekeeping.prune_finished("default")
    assert OperatorAction.objects.count() == 2  # kept forever


def test_the_audit_list_is_read_only_and_filters_by_action(operator):
    OperatorAction.objects.create(actor="alice", action="retry", job_id=5, target="t")
    OperatorAction.objects.create(actor="bob", action="pause", target="queue emails")
    assert "queue emails" not in text_of(operator.get(AUDIT_LIST, {"action": "retry"}))
    assert operator.get(AUDIT_LIST, {"action": "explode"}).status_code == 400
    assert text_of(operator.get(AUDIT_LIST, {"q": "bob"})).count("queue emails") == 1
    add = reverse("admin:django_pqjobs_operatoraction_add")
    assert operator.get(add).status_code == 403
    row = OperatorAction.objects.get(actor="bob")
    change = reverse("admin:django_pqjobs_operatoraction_change", args=[row.pk])
    operator.post(change, {"actor": "mallory"})
    assert OperatorAction.objects.get(pk=row.pk).actor == "bob"
