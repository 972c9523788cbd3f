"""The operator console: actions per status, permissions, escaping, job page, dashboard."""

from __future__ import annotations

import re
import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_pqjobs import enqueue_job, health, start_embedded_worker
from django_pqjobs.clock import database_now
from django_pqjobs.models import Job, JobAttempt, OperatorAction, WorkerRecord
from django_pqjobs.worker import worker as worker_module
from django_pqjobs.worker.claiming import claim_jobs
from django_pqjobs.worker.listener import Listener
from tests.helpers import bound, make_user, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = reverse("admin:django_pqjobs_job_changelist")
DASHBOARD = reverse("admin:django_pqjobs_job_dashboard")


def change_url(job_id: int) -> str:
    return reverse("admin:django_pqjobs_job_change", args=[job_id])


def action_url(job_id: int, action: str) -> str:
    return reverse("admin:django_pqjobs_job_action", args=[job_id, action])


@pytest.fixture
def operator() -> Client:
    return make_user("operator", "view_job", "change_job")


def one_of_each() -> dict[str, int]:
    """A job in every status (running ones claimed by a fake worker)."""
    ids = {
        "ready": enqueue_job("t"),
        "delayed": enqueue_job("t", delay=3600),
        "running": enqueue_job("t", priority=100),
        "failed": enqueue_job("t"),
        "cancelled": enqueue_job("t"),
        "done": enqueue_job("t"),
    }
    claim_jobs("default", "w", None, 1)
    Job.objects.filter(pk=ids["failed"]).update(status="failed", attempts=5, last_error="boom")
    JobAttempt.objects.create(job_id=ids["failed"], attempt=5, outcome="error", traceback="tb")
    Job.objects.filter(pk=ids["cancelled"]).update(status="cancelled")
    Job.objects.filter(pk=ids["done"]).update(status="done")
    return ids


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def bulk(client: Client, action: str, ids: list[int]):
    return client.post(CHANGELIST, {"action": action, "_selected_action": ids}, follow=True)


def test_bulk_retry_changes_failed_and_cancelled_and_skips_the_rest(operator):
    ids = one_of_each()
    response = bulk(operator, "retry_action", list(ids.values()))
    assert messages_of(response) == [
        "2 jobs put back to ready. 4 skipped: only failed, cancelled or expired jobs retry, and "
        "not while another job of their type holds their dedupe key."
    ]
    statuses = dict(Job.objects.values_list("pk", "status"))
    assert statuses[ids["failed"]] == statuses[ids["cancelled"]] == "ready"
    assert statuses[ids["running"]] == "running" and statuses[ids["done"]] == "done"
    retried = Job.objects.get(pk=ids["failed"])
    # attempt numbers go on (6 is next), with as many new attempts as the bound was
    assert (retried.attempts, retried.max_attempts) == (5, 10)
    assert JobAttempt.objects.filter(job_id=ids["failed"]).count() == 1  # history kept
    assert sorted(
        OperatorAction.objects.filter(action="retry").values_list("job_id", "actor")
    ) == sorted([(ids["failed"], "operator"), (ids["cancelled"], "operator")])


def test_bulk_cancel_cancels_ready_and_asks_running_to_stop(operator):
    ids = one_of_each()
    response = bulk(operator, "cancel_action", list(ids.values()))
    assert messages_of(response) == [
        "3 jobs cancelled or asked to stop. 3 skipped: already finished (or cancel already "
        "requested)."
    ]
    assert Job.objects.get(pk=ids["ready"]).status == "cancelled"
    assert Job.objects.get(pk=ids["delayed"]).status == "cancelled"
    running = Job.objects.get(pk=ids["running"])
    assert running.status == "running" and running.cancel_requested_at is not None


def test_bulk_run_now_moves_ready_jobs_to_the_head_of_the_queue(operator):
    ids = one_of_each()
    backlog = [enqueue_job("t") for _ in range(3)]
    response = bulk(operator, "run_now_action", list(ids.values()))
    assert messages_of(response) == [
        "2 jobs moved to the head of the queue. 4 skipped: only ready jobs can run now "
        "(blocked ones wait for flow control)."
    ]
    delayed = Job.objects.get(pk=ids["delayed"])
    assert delayed.run_after <= database_now("default")
    claimed = [j.id for j in claim_jobs("default", "w2", None, 10).jobs]
    assert claimed == [ids["ready"], ids["delayed"], *backlog]


def test_retry_wakes_idle_workers_of_the_job_queue(operator, listener):
    job_id = enqueue_job("t", queue="emails")
    assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["emails"]
    Job.objects.filter(pk=job_id).update(status="failed")
    operator.post(action_url(job_id, "retry"))
    notes = list(listener.notifies(timeout=2, stop_after=1))
    assert [n.payload for n in notes] == ["emails"]


def test_search_matches_id_type_active_dedupe_key_and_running_worker(operator):
    ids = one_of_each()  # the running one is claimed by worker "w"
    deduped = enqueue_job("tests.echo", dedupe_key="order:7")

    def found(term: str) -> set[int]:
        page = operator.get(CHANGELIST, {"q": term}).content.decode()
        return {pk for pk in [*ids.values(), deduped] if change_url(pk) in page}

    assert found(str(ids["failed"])) == {ids["failed"]}
    assert found("tests.echo") == {deduped}
    assert found("order:7") == {deduped}
    assert found("w") == {ids["running"]}
    assert found("nothing") == set()
    Job.objects.filter(pk=deduped).update(status="done")  # finished: its key binds nothing
    assert found("order:7") == set()


def test_job_page_buttons_post_only_with_csrf(operator):
    ids = one_of_each()
    assert operator.get(action_url(ids["failed"], "retry")).status_code == 405
    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(User.objects.get(username="operator"))
    assert csrf_client.post(action_url(ids["failed"], "retry")).status_code == 403
    response = operator.post(action_url(ids["failed"], "retry"), follow=True)
    assert messages_of(response) == [
        f"Job {ids['failed']} retried: it was put back to ready. Its status and timeline "
        "below show what has happened to it since."
    ]
    assert Job.objects.get(pk=ids["failed"]).status == "ready"
    response = operator.post(action_url(ids["done"], "cancel"), follow=True)
    assert messages_of(response) == [
        f"Job {ids['done']} was not changed: already finished (or cancel already requested)."
    ]
    assert operator.post(action_url(ids["done"], "explode")).status_code == 403


@pytest.mark.parametrize(
    "who, perms, list_code, page_code, dashboard_code, can_act",
    [
        ("anonymous", None, 302, 302, 302, False),
        ("staff_without_perms", (), 403, 403, 403, False),
        ("viewer", ("view_job",), 200, 200, 200, False),
        ("changer", ("view_job", "change_job"), 200, 200, 200, True),
    ],
)
def test_permission_matrix(who, perms, list_code, page_code, dashboard_code, can_act):
    ids = one_of_each()
    client = Client() if perms is None else make_user(who, *perms)
    assert client.get(CHANGELIST).status_code == list_code
    assert client.get(change_url(ids["failed"])).status_code == page_code
    assert client.get(DASHBOARD).status_code == dashboard_code
    response = client.post(action_url(ids["failed"], "retry"))
    if can_act:
        assert response.status_code == 302
        assert Job.objects.get(pk=ids["failed"]).status == "ready"
    else:
        assert response.status_code in (302, 403)
        assert Job.objects.get(pk=ids["failed"]).status == "failed"
    bulk_response = client.post(
        CHANGELIST, {"action": "cancel_action", "_selected_action": [ids["ready"]]}
    )
    assert Job.objects.get(pk=ids["ready"]).status == ("cancelled" if can_act else "ready")
    if list_code == 200:
        page = client.get(CHANGELIST).content.decode()
        assert ("retry_action" in page) is can_act
        assert bulk_response.status_code in (200, 302)
        detail = client.get(change_url(ids["failed"])).content.decode()
        assert (action_url(ids["failed"], "retry") in detail) is can_act
        assert 'name="_save"' not in detail  # nothing editable by form
    assert client.get(reverse("admin:django_pqjobs_job_add")).status_code in (302, 403)


def test_everything_a_job_contains_is_escaped(operator, unknown_job_types_allowed):
    evil = "<script>alert(1)</script>"
    job_id = enqueue_job(evil, {"note": evil})
    Job.objects.filter(pk=job_id).update(
        status="failed",
        result={"html": evil},
        last_error=f"ValueError: {evil}",
        error_type=evil,
        progress={"done": 1, "total": 2, "message": evil},
    )
    JobAttempt.objects.create(
        job_id=job_id,
        attempt=1,
        outcome="error",
        error_type=evil,
        traceback=f"Traceback\n{evil}",
        worker_id=evil,
    )
    for url in (CHANGELIST, change_url(job_id), DASHBOARD, f"{CHANGELIST}?job_type=x"):
        page = operator.get(url).content.decode()
        assert evil not in page, url
    page = operator.get(change_url(job_id)).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_job_page_shows_payload_result_timeline_tracebacks_and_links(operator):
    parent = enqueue_job("tests.chain")
    child = enqueue_job("tests.echo", {"k": [1, 2]})
    Job.objects.filter(pk=child).update(
        parent_id=parent,
        status="done",
        result={"ok": True},
        progress={"done": 3, "total": 4, "message": "nearly"},
        finished_at=database_now("default"),
    )
    JobAttempt.objects.create(
        job_id=child,
        attempt=1,
        outcome="timeout",
        worker_id="w1",
        traceback="Traceback ...\nJobTimeout: too slow",
        started_at=database_now("default") - timedelta(seconds=5),
    )
    page = operator.get(change_url(child)).content.decode()
    assert "&quot;k&quot;: [" in page and "&quot;ok&quot;: true" in page
    assert "attempt 1: timeout" in page and "JobTimeout: too slow" in page
    assert change_url(parent) in page
    assert "75% nearly" in page
    assert change_url(child) in operator.get(change_url(parent)).content.decode()


def test_list_filters_and_search(operator):
    a = enqueue_job("tests.echo", queue="emails", dedupe_key="key-1")
    b = enqueue_job("tests.noop")
    Job.objects.filter(pk=b).update(status="failed", last_error="boom")
    page = operator.get(CHANGELIST).content.decode()
    assert "?job_type=tests.echo" in page and "?queue=emails" in page
    assert f">{a}<" in operator.get(f"{CHANGELIST}?queue=emails").content.decode()
    failed = operator.get(f"{CHANGELIST}?status__exact=failed").content.decode()
    assert change_url(b) in failed and change_url(a) not in failed
    assert change_url(b) in operator.get(f"{CHANGELIST}?has_error=yes").content.decode()
    assert change_url(a) in operator.get(f"{CHANGELIST}?q=key-1").content.decode()
    assert change_url(a) in operator.get(f"{CHANGELIST}?q={a}").content.decode()


def test_dashboard_shows_depth_lag_throughput_failures_and_workers(operator):
    enqueue_job("tests.noop", queue="emails")
    done = enqueue_job("tests.echo")
    failed = enqueue_job("tests.echo")
    now = database_now("default")
    Job.objects.filter(pk=done).update(status="done", finished_at=now)
    Job.objects.filter(pk=failed).update(status="failed", finished_at=now)
    WorkerRecord.objects.create(worker_id="host-1-abc", hostname="host", pid=1, concurrency=4)
    WorkerRecord.objects.create(worker_id="host-2-def", queues=["mail", "sms"])
    page = operator.get(DASHBOARD).content.decode()
    assert "<td>all</td>" in page and "<td>mail, sms</td>" in page and " s ago)</span>" in page
    assert "<svg" in page and "peak 2 / min" in page
    assert "emails" in page and "Queue lag" in page
    assert "tests.echo" in page and "50 %" in page
    assert "host-1-abc" in page
    assert DASHBOARD in operator.get(CHANGELIST).content.decode()
    app_index = operator.get(reverse("admin:app_list", args=["django_pqjobs"])).content.decode()
    assert DASHBOARD in app_index


def worker_rows(page: str) -> dict[str, str]:
    """The dashboard's worker table: each worker's row as text, by worker id."""
    table = re.search(r'<table id="pqjobs-workers">(.*?)</table>', page, re.S)
    assert table is not None
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.S)
    texts = [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in rows[1:]]
    return {text.split()[0]: text for text in texts}


def test_dashboard_shows_a_worker_stale_by_the_rule_jobs_health_uses(operator):
    """Live while its heartbeat is at most three heartbeats old (30 s by default), stale
    after, as jobs_health says, though its record stays until the stale timeout (20 min)."""
    now = database_now("default")
    WorkerRecord.objects.create(worker_id="live-1", heartbeat_at=now - timedelta(seconds=20))
    WorkerRecord.objects.create(worker_id="gone-1", heartbeat_at=now - timedelta(seconds=66))
    WorkerRecord.objects.create(worker_id="gone-2", heartbeat_at=now - timedelta(hours=1))
    assert health.check_worker(worker_id="live-1").line.startswith("ok")
    assert health.check_worker(worker_id="gone-1").line.startswith("stale")

    page = operator.get(DASHBOARD).content.decode()
    rows = worker_rows(page)
    assert list(rows) == ["live-1", "gone-1", "gone-2"]  # the live ones first
    assert rows["live-1"].startswith("live-1 live ")
    assert rows["gone-1"].startswith("gone-1 stale ") and " UTC (66 s ago) " in rows["gone-1"]
    assert rows["gone-2"].startswith("gone-2 stale ")
    assert "at most 30 s old" in page


def test_a_stopped_embedded_worker_leaves_the_dashboard_at_once(operator, monkeypatch):
    """Its record goes as soon as no heartbeat can write it back, before the parts that are
    slower to stop (here a listener that takes its time): runserver's autoreloader kills
    its child 0.25 s after Ctrl-C, and a record left behind was listed as a live worker."""
    listener_may_end = threading.Event()

    class SlowListener(Listener):
        def run(self) -> None:
            super().run()
            listener_may_end.wait(bound(10))

    monkeypatch.setattr(worker_module, "Listener", SlowListener)
    worker = start_embedded_worker(concurrency=1, listen=True)
    assert worker is not None and worker.thread is not None
    try:
        wait_for(lambda: worker.listener is not None and worker.listener.listening.is_set())
        assert list(worker_rows(operator.get(DASHBOARD).content.decode())) == [worker.worker_id]
        worker.stop()  # what the process's exit does (atexit)
        wait_for(lambda: not WorkerRecord.objects.filter(worker_id=worker.worker_id).exists(), 3)
        assert worker.listener.is_alive()  # it was not waited for
        assert worker_rows(operator.get(DASHBOARD).content.decode()) == {
            "No": "No worker is recorded: none is running, or each stopped and removed its record."
        }
    finally:
        listener_may_end.set()
        worker.stop()
        worker.thread.join(bound(15))
    assert not worker.thread.is_alive()


# --- a failed job's error, on the job page's first screen and in the list -------------------

EVIL = "<img src=x onerror=alert(1)>"


def failed_with_markup() -> int:
    """A job that failed as the worker records it: the traceback, its error type."""
    job_id = enqueue_job("tests.echo")
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/billing/jobs.py", line 12, in charge\n'
        "    gateway.charge(card)\n"
        "    ~~~~~~~~~~~~~~^^^^^^\n"
        f"django_pqjobs.errors.PermanentError: card {EVIL} declined\n"
    )
    Job.objects.filter(pk=job_id).update(
        status="failed", attempts=3, last_error=traceback, error_type="PermanentError"
    )
    return job_id


def field_rows(page: str) -> list[str]:
    """The job page's rows, by the name of their field, in order."""
    return re.findall(r'<div class="form-row field-(\w+)', page)


def test_a_failed_job_page_shows_its_last_error_first_escaped(operator):
    job_id = failed_with_markup()
    page = operator.get(change_url(job_id)).content.decode()
    assert field_rows(page)[:3] == ["status_detail", "last_error_summary", "job_type"]
    summary = re.search(r'<div class="pqjobs-error">(.*?)</div>', page, re.S)
    assert summary is not None
    text = " ".join(re.sub(r"<[^>]+>", " ", summary.group(1)).split())
    assert text == (
        "PermanentError : card &lt;img src=x onerror=alert(1)&gt; declined "
        "in charge, &quot;/srv/app/billing/jobs.py&quot;, line 12 · attempt 3 · traceback below"
    )
    assert EVIL not in page
    assert 'href="#pqjobs-tracebacks"' in page and 'id="pqjobs-tracebacks"' in page


def test_a_job_without_an_error_has_no_last_error_row(operator):
    job_id = enqueue_job("tests.echo")
    assert "field-last_error_summary" not in operator.get(change_url(job_id)).content.decode()


def test_without_the_data_permission_the_last_error_is_its_type(operator, settings):
    settings.PQJOBS = {**settings.PQJOBS, "ADMIN_DATA_PERMISSION": "django_pqjobs.delete_job"}
    job_id = failed_with_markup()
    page = operator.get(change_url(job_id)).content.decode()
    assert field_rows(page)[:2] == ["status_detail", "last_error_summary"]
    assert "<strong>PermanentError</strong>" in page
    assert "declined" not in page and "billing/jobs.py" not in page
    assert "the permission &#x27;django_pqjobs.delete_job&#x27;" in page


def test_the_list_names_the_exception_by_its_class(operator):
    job_id = failed_with_markup()
    page = operator.get(f"{CHANGELIST}?status__exact=failed").content.decode()
    cell = re.search(r'<td class="field-error">(.*?)</td>', page, re.S)
    assert cell is not None
    assert cell.group(1) == (
        '<span title="django_pqjobs.errors.PermanentError">'
        "PermanentError: card &lt;img src=x onerror=alert(1)&gt; declined</span>"
    )
    assert change_url(job_id) in page and EVIL not in page


def test_the_throughput_chart_has_a_time_axis(operator, settings):
    """A tick every ten minutes of the hour, in the admin's time zone; the bars' titles in
    it too."""
    settings.TIME_ZONE = "Asia/Kathmandu"  # UTC+05:45: its ten minutes are not UTC's
    done = enqueue_job("tests.noop")
    Job.objects.filter(pk=done).update(status="done", finished_at=database_now("default"))
    before = timezone.localtime()
    page = operator.get(DASHBOARD).content.decode()
    minutes = {f"{moment:%H:%M}" for moment in (before, timezone.localtime())}
    chart = re.search(r'<svg [^>]*class="pqjobs-chart".*?</svg>', page, re.S)
    assert chart is not None
    labels = re.findall(r'<text x="[\d.]+" y="134" text-anchor="\w+">([^<]*)</text>', chart[0])
    assert len(labels) == 6 and all(re.fullmatch(r"\d\d:\d0", label) for label in labels)
    assert any(f"<title>{m}: 1 done, 0 failed, 0 retried</title>" in chart[0] for m in minutes)
    assert "times in +0545" in page


def test_dashboard_sums_up_the_processes_of_a_worker_group(operator):
    """run_jobs --processes 3 --worker-id web names its processes web-1 to web-3: the
    dashboard shows them as one group, live only while every process is, as jobs_health."""
    now = database_now("default")
    for n, age in ((1, 2), (2, 3), (3, 200)):
        WorkerRecord.objects.create(
            worker_id=f"web-{n}",
            hostname="host-a",
            concurrency=4,
            heartbeat_at=now - timedelta(seconds=age),
        )
    WorkerRecord.objects.create(worker_id="solo-1", hostname="host-b", concurrency=2)
    WorkerRecord.objects.create(worker_id="host-b-77-a1b2c3", hostname="host-b", concurrency=1)
    page = operator.get(DASHBOARD).content.decode()
    table = re.search(r'<table id="pqjobs-worker-groups">(.*?)</table>', page, re.S)
    assert table is not None
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.S)
    texts = [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in rows[1:]]
    assert texts == ["web 2 of 3 12 0 host-a"]  # group, live, threads, running, host
    assert 'class="pqjobs-stale"><td><strong>web</strong>' in page
    assert health.check_worker(worker_id="web").line.startswith("stale")
    # the processes are still listed one by one below
    assert {"web-1", "web-2", "web-3", "solo-1", "host-b-77-a1b2c3"} <= set(worker_rows(page))
