"""Prometheus metrics: the values a scrape shows for a known set of jobs run by several
worker processes, read from the database by any web process; who may scrape."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import F
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_pqjobs import enqueue_job, enqueue_many, flow, monitoring, transitions
from django_pqjobs.models import Job, OutcomeCount, WorkerRecord
from tests.helpers import run_jobs

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "t0k3n-for-the-metrics-view-tests-0123456789"


@pytest.fixture
def client(db) -> Client:
    """A client logged in as an active staff user (not a superuser): it may scrape."""
    user = get_user_model().objects.create_user("ops", password="pw", is_staff=True)
    staff = Client()
    staff.force_login(user)
    return staff


def scrape(client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of one scrape of /metrics."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_counters_and_histogram_add_up_over_several_worker_processes(client):
    sleepers = enqueue_many("tests.sleep", [{"seconds": 0.15}] * 16, queue="m")
    permanent = [enqueue_job("tests.permanent", queue="m") for _ in range(3)]
    flaky = [enqueue_job("tests.retry_then_ok", {"succeed_on": 2}, queue="m") for _ in range(2)]
    # one process after the other, so that both surely run jobs (side by side, a loaded
    # machine may start the second after the first ran them all): the first claims the
    # first 8 sleepers and stops, the second the rest
    args = ("--burst", "--queue", "m", "--concurrency", "2")
    with run_jobs(*args, "--max-jobs", "8", "--worker-id", "w1") as first:
        assert first.wait(90) == 0
    with run_jobs(*args, "--worker-id", "w2") as second:
        assert second.wait(90) == 0
    # both processes ran jobs, and each added what it recorded when it stopped
    ran_by = set(Job.objects.filter(pk__in=sleepers).values_list("locked_by", flat=True))
    assert ran_by == {"w1", "w2"}
    assert Job.objects.filter(pk__in=permanent, status="failed").count() == 3
    assert Job.objects.filter(pk__in=flaky, status="done").count() == 2

    samples = scrape(client)
    total = "pqjobs_attempts_total"
    assert value(samples, total, queue="m", job_type="tests.sleep", outcome="done") == 16
    assert value(samples, total, queue="m", job_type="tests.permanent", outcome="failed") == 3
    assert value(samples, total, queue="m", job_type="tests.retry_then_ok", outcome="retry") == 2
    assert value(samples, total, queue="m", job_type="tests.retry_then_ok", outcome="done") == 2
    assert sum(v for (name, _), v in samples.items() if name == total) == 23

    histogram = "pqjobs_attempt_duration_seconds"
    sleep = {"queue": "m", "job_type": "tests.sleep"}
    assert value(samples, f"{histogram}_count", **sleep) == 16
    assert value(samples, f"{histogram}_bucket", le="0.1", **sleep) == 0  # each slept 0.15 s
    assert value(samples, f"{histogram}_bucket", le="0.25", **sleep) == 16
    assert value(samples, f"{histogram}_bucket", le="+Inf", **sleep) == 16
    assert 16 * 0.15 <= value(samples, f"{histogram}_sum", **sleep) < 16 * 0.25
    flaky_labels = {"queue": "m", "job_type": "tests.retry_then_ok"}
    assert value(samples, f"{histogram}_count", **flaky_labels) == 4  # retries and successes
    assert (
        value(samples, "pqjobs_jobs", queue="m", job_type="tests.permanent", status="failed") == 3
    )


def test_gauges_show_the_queue_as_it_is_now(client):
    enqueue_many("tests.noop", [{}] * 3, queue="waiting")
    Job.objects.filter(queue="waiting").update(run_after=F("run_after") - timedelta(minutes=5))
    enqueue_many("tests.noop", [{}] * 2, queue="waiting", delay=3600)
    running = enqueue_job("tests.echo", queue="busy")
    Job.objects.filter(pk=running).update(status="running", locked_by="elsewhere")
    now = timezone.now()
    WorkerRecord.objects.create(worker_id="live", concurrency=4, heartbeat_at=now)
    WorkerRecord.objects.create(
        worker_id="gone", concurrency=8, heartbeat_at=now - timedelta(minutes=10)
    )
    samples = scrape(client)
    waiting = {"queue": "waiting", "job_type": "tests.noop"}
    assert value(samples, "pqjobs_jobs", status="ready", **waiting) == 5
    assert value(samples, "pqjobs_jobs_due", **waiting) == 3
    assert 300 <= value(samples, "pqjobs_queue_lag_seconds", queue="waiting") < 360
    assert value(samples, "pqjobs_jobs", queue="busy", job_type="tests.echo", status="running") == 1
    assert value(samples, "pqjobs_queue_lag_seconds", queue="busy") is None  # nothing ready
    assert value(samples, "pqjobs_workers", state="live") == 1
    assert value(samples, "pqjobs_workers", state="stale") == 1
    assert value(samples, "pqjobs_worker_threads") == 4
    assert value(samples, "pqjobs_scrape_duration_seconds") > 0


def test_an_in_process_worker_adds_its_counts_every_stats_interval(worker_factory, settings):
    settings.PQJOBS = {**settings.PQJOBS, "STATS_INTERVAL": 0.2}
    for _ in range(3):
        enqueue_job("tests.noop", queue="stats")
    enqueue_job("tests.permanent", queue="stats")
    worker_factory(concurrency=2, queues=["stats"])

    def counts() -> dict[str, int]:
        rows = OutcomeCount.objects.filter(queue="stats")
        return {f"{r.job_type} {r.outcome}": r.count for r in rows}

    from tests.helpers import wait_for

    wait_for(lambda: counts() == {"tests.noop done": 3, "tests.permanent failed": 1})


def test_the_sample_grafana_dashboard_uses_only_metrics_the_view_exports(client):
    import json
    import re

    from tests.helpers import ROOT

    enqueue_job("tests.noop", queue="g")
    enqueue_job("tests.noop", queue="g", depends_on=[enqueue_job("tests.noop", queue="g")])
    flow.pause_queue("held")
    flow.pause_job_type("tests.sleep")
    enqueue_job("tests.noop", queue="held")
    transitions.hold_back(connection.alias, ["held"], 10)
    OutcomeCount.objects.create(job_type="tests.noop", queue="g", outcome="done", count=1)
    from django_pqjobs.models import DurationBucket

    DurationBucket.objects.create(job_type="tests.noop", queue="g", le=0.005, count=1)
    exported = {name for name, _ in scrape(client)}
    dashboard = json.loads((ROOT / "docs" / "grafana" / "pqjobs-dashboard.json").read_text())
    used = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bpqjobs_[a-z_]+", target["expr"])
    }
    assert used and used <= exported, used - exported


def test_without_the_extra_the_metrics_module_says_what_to_install(monkeypatch):
    import importlib
    import sys

    from django.core.exceptions import ImproperlyConfigured

    monkeypatch.delitem(sys.modules, "django_pqjobs.metrics")
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImproperlyConfigured, match=r"pip install 'django-pqjobs\[metrics\]'"):
        importlib.import_module("django_pqjobs.metrics")


# --- who may scrape --------------------------------------------------------------------------


def metrics_status(client: Client, **headers: str) -> int:
    response = client.get("/metrics", **headers)
    if response.status_code != 200:
        assert b"pqjobs_" not in response.content
    return response.status_code


def test_only_active_staff_users_may_scrape_by_default():
    enqueue_job("tests.noop", queue="secret-queue")
    anonymous = Client()
    assert metrics_status(anonymous) == 403
    users = get_user_model().objects
    member = Client()
    member.force_login(users.create_user("member", password="pw"))
    assert metrics_status(member) == 403
    retired = Client()
    retired.force_login(users.create_user("retired", password="pw", is_staff=True))
    users.filter(username="retired").update(is_active=False)
    assert metrics_status(retired) == 403
    staff = Client()
    staff.force_login(users.create_user("staff", password="pw", is_staff=True))
    assert metrics_status(staff) == 200
    # no token is configured: a bearer header opens nothing
    assert metrics_status(anonymous, HTTP_AUTHORIZATION=f"Bearer {TOKEN}") == 403


def test_the_metrics_token_opens_the_view_and_nothing_else_does(settings):
    settings.PQJOBS = {**settings.PQJOBS, "METRICS_TOKEN": TOKEN}
    anonymous = Client()
    response = anonymous.get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert "Authorization" in response["Vary"]
    assert metrics_status(anonymous, HTTP_AUTHORIZATION=f"Bearer {TOKEN}") == 200
    assert metrics_status(anonymous, HTTP_AUTHORIZATION=f"bearer  {TOKEN} ") == 200
    refused = [
        f"Bearer {TOKEN[:-1]}",
        f"Bearer {TOKEN}x",
        f"Bearer {TOKEN[:-1]}\u00e9",  # not ASCII: compared as bytes, never a 500
        f"Basic {TOKEN}",
        TOKEN,
        "Bearer",
        "Bearer ",
        "",
        "\x00\xff",
        f"Bearer {TOKEN} {TOKEN}",
    ]
    for header in refused:
        assert metrics_status(anonymous, HTTP_AUTHORIZATION=header) == 401, header
    staff = Client()
    staff.force_login(get_user_model().objects.create_user("s", password="pw", is_staff=True))
    assert metrics_status(staff) == 200  # staff need no token


def test_an_inactive_staff_user_is_refused_whatever_the_auth_backend(settings):
    settings.AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.AllowAllUsersModelBackend"]
    retired = get_user_model().objects.create_user(
        "retired", password="pw", is_staff=True, is_active=False
    )
    client = Client()
    client.force_login(retired)
    assert metrics_status(client) == 403
    retired.is_active = True
    retired.save()
    assert metrics_status(client) == 200


def test_metrics_public_opens_the_view_to_anyone(settings):
    settings.PQJOBS = {**settings.PQJOBS, "METRICS_PUBLIC": True}
    assert metrics_status(Client()) == 200


# --- held work ---------------------------------------------------------------------------------


def test_held_waiting_and_paused_work_show_as_metrics(client):
    # a paused queue with a backlog: all of it held (blocked) as it was enqueued
    flow.pause_queue("held")
    enqueue_many("tests.noop", [{}] * 3, queue="held")
    Job.objects.filter(queue="held").update(run_after=F("run_after") - timedelta(minutes=5))
    # jobs held by a rate limit and by a concurrency limit wait for room: that is lag
    throttled = enqueue_many("tests.noop", [{}] * 2, queue="throttled")
    Job.objects.filter(pk__in=throttled).update(
        status="blocked", blocked_by="rate", run_after=timezone.now() - timedelta(minutes=2)
    )
    limited = enqueue_job("tests.echo", queue="throttled")
    Job.objects.filter(pk=limited).update(status="blocked", blocked_by="limit")
    # a job waiting for a dependency
    first = enqueue_job("tests.noop", queue="deps", delay=3600)
    enqueue_job("tests.noop", queue="deps", depends_on=[first])
    flow.pause_job_type("tests.sleep")

    samples = scrape(client)
    held = {"queue": "held", "job_type": "tests.noop"}
    assert value(samples, "pqjobs_jobs", status="blocked", **held) == 3
    assert value(samples, "pqjobs_jobs", status="ready", **held) is None
    assert value(samples, "pqjobs_jobs_blocked", queue="held", blocked_by="paused") == 3
    assert value(samples, "pqjobs_queue_paused", queue="held") == 1
    assert value(samples, "pqjobs_job_type_paused", job_type="tests.sleep") == 1
    assert 300 <= value(samples, "pqjobs_queue_paused_lag_seconds", queue="held") < 360
    assert value(samples, "pqjobs_queue_lag_seconds", queue="held") is None  # a pause is apart

    assert value(samples, "pqjobs_jobs_blocked", queue="throttled", blocked_by="rate") == 2
    assert value(samples, "pqjobs_jobs_blocked", queue="throttled", blocked_by="limit") == 1
    assert (
        value(samples, "pqjobs_jobs", queue="throttled", job_type="tests.noop", status="blocked")
        == 2
    )
    assert 120 <= value(samples, "pqjobs_queue_lag_seconds", queue="throttled") < 180
    assert value(samples, "pqjobs_queue_paused_lag_seconds", queue="throttled") is None

    deps = {"queue": "deps", "job_type": "tests.noop"}
    assert value(samples, "pqjobs_jobs", status="waiting", **deps) == 1
    assert value(samples, "pqjobs_jobs", status="ready", **deps) == 1
    assert value(samples, "pqjobs_queue_paused", queue="deps") is None

    flow.resume_queue("held")
    samples = scrape(client)
    assert value(samples, "pqjobs_jobs", status="ready", **held) == 3
    assert value(samples, "pqjobs_queue_paused", queue="held") is None
    assert 300 <= value(samples, "pqjobs_queue_lag_seconds", queue="held") < 360


# --- dead letters ------------------------------------------------------------------------------


def fail(job_type: str, queue: str, count: int) -> None:
    ids = enqueue_many(job_type, [{}] * count, queue=queue)
    Job.objects.filter(pk__in=ids).update(status="failed", finished_at=timezone.now())


def test_failed_jobs_are_counted_exactly_up_to_the_bound_then_estimated(client, monkeypatch):
    fail("tests.noop", "dead", 8)
    fail("tests.echo", "dead", 4)  # the newest
    samples = scrape(client)
    noop = {"queue": "dead", "job_type": "tests.noop", "status": "failed"}
    echo = {"queue": "dead", "job_type": "tests.echo", "status": "failed"}
    assert (value(samples, "pqjobs_jobs", **noop), value(samples, "pqjobs_jobs", **echo)) == (8, 4)

    # past the bound only the newest are read, and their shares scale the planner's total
    monkeypatch.setattr(monitoring, "FAILED_EXACT_UP_TO", 5)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pqjobs_job")
    rows = [row for row in monitoring.depth() if row.status == "failed"]
    assert rows and all(row.estimated for row in rows)
    samples = scrape(client)
    counts = value(samples, "pqjobs_jobs", **noop), value(samples, "pqjobs_jobs", **echo)
    assert sum(counts) == 12  # the planner knows the small table exactly
    assert counts == (4, 8)  # the newest six: two noop, four echo
