"""Concurrency changed live (issue 32): an operator's setting, picked up by running workers
within a few seconds, within the bounds each was started with."""

from __future__ import annotations

import io
import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_pqjobs import capacity, enqueue_many
from django_pqjobs.models import ConcurrencySetting, Job, OperatorAction, WorkerRecord
from tests.helpers import run_jobs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def running() -> int:
    return Job.objects.filter(status="running").count()


def most_running(seconds: float) -> int:
    """The most jobs seen running at once over ``seconds``."""
    seen = 0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        seen = max(seen, running())
        time.sleep(0.05)
    return seen


@pytest.mark.slow
def test_a_running_worker_follows_the_setting_within_its_bounds():
    enqueue_many("tests.sleep", [{"seconds": 0.6}] * 200)
    with run_jobs(
        "--concurrency", "1", "--max-concurrency", "4", "--worker-id", "live",
        DJANGO_SETTINGS_MODULE="tests.settings_fast_heartbeat",  # its row follows in 1 s
    ):  # fmt: skip
        wait_for(lambda: running() == 1)
        assert most_running(1.5) == 1

        capacity.set_concurrency(4, name="live", by="oncall")
        wait_for(lambda: running() == 4)
        wait_for(lambda: WorkerRecord.objects.get(pk="live").concurrency == 4)

        capacity.set_concurrency(10, name="*")  # beyond its bound: the row for "live" wins
        capacity.set_concurrency(2, name="live")
        # read (its row says so), and the jobs started before it finish: no more than 2
        # from then on
        wait_for(lambda: WorkerRecord.objects.get(pk="live").concurrency == 2)
        before = list(Job.objects.filter(status="running").values_list("pk", flat=True))
        wait_for(lambda: not Job.objects.filter(pk__in=before, status="running").exists())
        assert most_running(2) <= 2

        capacity.set_concurrency(None, name="live")  # now "*" (10) applies, capped at 4
        wait_for(lambda: running() == 4)
    trail = OperatorAction.objects.filter(action="concurrency").order_by("id")
    trail = trail.values_list("actor", "detail")
    assert list(trail) == [("oncall", "4 at once")]


@pytest.mark.slow
def test_the_processes_of_a_worker_group_follow_the_group_s_setting():
    enqueue_many("tests.sleep", [{"seconds": 0.5}] * 100)
    with run_jobs(
        "--processes", "2", "--worker-id", "grp", "--concurrency", "1", "--max-concurrency", "3",
        DJANGO_SETTINGS_MODULE="tests.settings_fast_heartbeat",  # their rows follow in 1 s
    ):  # fmt: skip
        wait_for(lambda: WorkerRecord.objects.filter(pk__in=["grp-1", "grp-2"]).count() == 2)
        call_command("set_concurrency", "3", "--workers", "grp", stdout=io.StringIO())
        wait_for(lambda: running() == 6)
        wait_for(lambda: set(WorkerRecord.objects.values_list("concurrency", flat=True)) == {3})


def test_set_concurrency_lists_sets_clears_and_refuses_bad_input():
    out = io.StringIO()
    call_command("set_concurrency", stdout=out)
    assert "no concurrency is set" in out.getvalue()
    call_command("set_concurrency", "8", "--by", "ops", stdout=out)
    call_command("set_concurrency", "2", "--workers", "web", stdout=io.StringIO())
    listing = io.StringIO()
    call_command("set_concurrency", stdout=listing)
    assert "*: 8 at once" in listing.getvalue() and "by ops" in listing.getvalue()
    assert "web: 2 at once" in listing.getvalue()
    assert capacity.concurrency_for("default", "web") == 2
    assert capacity.concurrency_for("default", "web-3") == 2  # a process of group web
    assert capacity.concurrency_for("default", "other-1") == 8
    call_command("set_concurrency", "--clear", "--workers", "web", stdout=io.StringIO())
    assert capacity.concurrency_for("default", "web") == 8
    for args, message in [
        (["0"], "from 1 to 1024"),
        (["5000"], "from 1 to 1024"),
        (["3", "--clear"], "not both"),
        (["3", "--workers", "bad\nname"], "--workers"),
    ]:
        with pytest.raises(CommandError, match=message):
            call_command("set_concurrency", *args, stdout=io.StringIO())
    assert dict(ConcurrencySetting.objects.values_list("name", "concurrency")) == {"*": 8}


def test_a_group_row_names_the_processes_of_that_group():
    capacity.set_concurrency(5, name="web")
    assert capacity.names_of("web-3") == ["web-3", "web", "*"]
    assert capacity.concurrency_for("default", "web-3") == 5
    assert capacity.concurrency_for("default", "webby-3") is None


def test_run_jobs_refuses_a_max_concurrency_below_its_concurrency():
    with pytest.raises(CommandError, match="--max-concurrency must be from"):
        call_command("run_jobs", "--concurrency", "4", "--max-concurrency", "2", "--burst")


def test_the_admin_sets_and_clears_a_concurrency_with_an_audit_row(admin_client):
    url = "/admin/django_pqjobs/concurrencysetting/add/"
    response = admin_client.post(url, {"name": "web", "concurrency": "3"})
    assert response.status_code == 302
    assert capacity.concurrency_for("default", "web-1") == 3
    refused = admin_client.post(url, {"name": "x\x07y", "concurrency": "0"})
    assert refused.status_code == 200
    assert b"control character" in refused.content or b"must be" in refused.content
    admin_client.post("/admin/django_pqjobs/concurrencysetting/web/delete/", {"post": "yes"})
    assert not ConcurrencySetting.objects.exists()
    actions = list(OperatorAction.objects.order_by("id").values_list("action", "target", "detail"))
    assert actions == [
        ("concurrency", "workers web", "3 at once"),
        ("concurrency", "workers web", "cleared: workers run at their own concurrency"),
    ]
