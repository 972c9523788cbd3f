"""Commands say what happened (issue 43, item 8): what a setting makes each live worker run,
a name that matches nothing, a clear of nothing, near names, a dry run, what to run on an
unmigrated database; the worker's log lines say only what applies to it."""

from __future__ import annotations

import logging
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_pqjobs import capacity, enqueue_job, enqueue_many, health
from django_pqjobs.flow import pause_queue
from django_pqjobs.models import Job, WorkerRecord
from django_pqjobs.testing import drain
from tests.helpers import make_user, run_jobs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def command(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def live_worker(worker_id: str, started: int | None, most: int | None, now: int) -> None:
    """A worker row as a live worker's heartbeat writes it."""
    WorkerRecord.objects.create(
        worker_id=worker_id,
        concurrency=now,
        started_concurrency=started,
        max_concurrency=most,
    )


@pytest.mark.slow
def test_a_worker_records_the_bounds_of_its_concurrency_and_the_command_says_what_it_runs():
    with run_jobs(
        "--concurrency", "2", "--max-concurrency", "3", "--worker-id", "main",
        DJANGO_SETTINGS_MODULE="tests.settings_fast_heartbeat",  # its row follows in 1 s
    ):  # fmt: skip
        record = wait_for(lambda: WorkerRecord.objects.filter(pk="main").first())
        assert (record.started_concurrency, record.max_concurrency) == (2, 3)

        # above its --max-concurrency: said, with the value it will run
        out, err = command("set_concurrency", "20", "--workers", "main")
        assert out.splitlines() == ["workers main: 20 at once, within a few seconds"]
        assert err.splitlines() == [
            "warning: worker main: runs 3 (its own setting 'main', which asks 20: bounded by "
            "its --max-concurrency 3)"
        ]
        wait_for(lambda: WorkerRecord.objects.get(pk="main").concurrency == 3)

        # a typo matches no live worker: said, with the closest live name
        out, err = command("set_concurrency", "5", "--workers", "mian")
        assert err.splitlines() == [
            "warning: no live worker is 'mian' or in a worker group of that name (did you "
            "mean 'main'?); the setting is kept for workers started under that name (live: "
            "main)"
        ]
        # clearing what was never set says so, and changes nothing
        out, err = command("set_concurrency", "--clear", "--workers", "nobody")
        assert out.splitlines() == ["workers nobody: nothing was set, nothing to clear"]
        assert err == ""
        # clearing its own row: back to what it was started with
        out, err = command("set_concurrency", "--clear", "--workers", "main")
        assert out.splitlines() == [
            "workers main: cleared, back to the concurrency each was started with",
            "worker main: runs 2 (started with it)",
        ]
        wait_for(lambda: WorkerRecord.objects.get(pk="main").concurrency == 2)


def test_a_more_specific_setting_is_named_when_it_wins():
    live_worker("grp-1", started=1, most=8, now=1)
    live_worker("grp-2", started=1, most=8, now=1)
    capacity.set_concurrency(2, name="grp-2")
    out, err = command("set_concurrency", "6", "--workers", "grp")
    assert out.splitlines() == [
        "workers grp: 6 at once, within a few seconds",
        "worker grp-1: runs 6 (its group's setting 'grp')",
    ]
    assert err.splitlines() == [
        "warning: worker grp-2: runs 2 (its own setting 'grp-2'): a more specific setting "
        "applies to it"
    ]
    ran = {w.worker_id: (w.runs, w.source) for w in capacity.effective()}
    assert ran == {
        "grp-1": (6, "its group's setting 'grp'"),
        "grp-2": (2, "its own setting 'grp-2'"),
    }


def test_the_concurrency_page_shows_the_live_workers_and_where_their_number_comes_from():
    live_worker("web-1", started=2, most=4, now=2)
    capacity.set_concurrency(9, name="*")
    stale = timezone.now() - timedelta(hours=1)
    WorkerRecord.objects.create(worker_id="gone", concurrency=1, heartbeat_at=stale)
    admin = make_user("ops", "view_concurrencysetting", "view_job", "change_job")
    page = admin.get("/admin/django_pqjobs/concurrencysetting/").content.decode()
    assert "Live workers" in page
    assert "<strong>web-1</strong></td><td>2</td><td>4</td>" in page
    assert (
        "every worker&#x27;s setting (*), which asks 9: bounded by its --max-concurrency 4" in page
    )
    assert "gone" not in page  # not live


def test_failed_jobs_and_jobs_health_suggest_the_near_name():
    enqueue_job("tests.noop")
    out, err = command("failed_jobs", "--type", "tests.nooop")
    assert out.splitlines() == ["0 failed jobs match"]
    assert err.splitlines() == [
        "warning: the job type 'tests.nooop' is declared by no @job or @task, and no job has "
        "it; did you mean 'tests.noop'?"
    ]
    _, err = command("failed_jobs", "--type", "tests.noop")  # known: no hint
    assert err == ""

    live_worker("reports-1", started=1, most=1, now=1)
    verdict = health.check_worker(worker_id="report-1")
    assert verdict.line == "no worker: found no record of worker report-1 (did you mean reports-1?)"


def test_jobs_health_on_an_unmigrated_database_says_to_migrate(empty_database):
    from tests.integration.test_setup_mistakes import django_process

    done = django_process(["jobs_health"], PQJOBS_TEST_DATABASE=empty_database)
    assert done.returncode == 4
    [line] = done.stdout.strip().splitlines()
    assert line.startswith(
        "unreachable: the job tables of database 'default' are missing or out of date: run "
        "`manage.py migrate`"
    )


def test_prune_jobs_dry_run_counts_what_a_run_would_do_and_changes_nothing():
    old = enqueue_many("tests.noop", [{}] * 3)
    Job.objects.filter(pk__in=old).update(
        status="done", finished_at=timezone.now() - timedelta(days=30)
    )
    out, _ = command("prune_jobs", "--dry-run")
    lines = out.splitlines()
    assert "done: would delete 3 (older than 7 days)" in lines
    assert lines[-1] == "dry run: nothing was changed"
    assert Job.objects.filter(pk__in=old).count() == 3
    out, _ = command("prune_jobs")
    assert "done: deleted 3 (older than 7 days)" in out.splitlines()
    assert not Job.objects.filter(pk__in=old).exists()


def test_a_worker_warns_at_start_only_of_the_pauses_of_what_it_serves():
    pause_queue("elsewhere")
    pause_queue("mine")
    with run_jobs("--queue", "mine", "--queue", "other") as worker:
        wait_for(lambda: "paused at start" in worker.output())
        assert "paused at start: queue mine" in worker.output()
        assert "elsewhere" not in worker.output()


def test_a_park_log_line_says_what_wakes_it(caplog):
    job_id = enqueue_job("tests.workflow", {"order": "o9"})
    with caplog.at_level(logging.INFO, logger="django_pqjobs"):
        drain()  # a durable sleep: no signal wakes it
        drain(run_delayed=True)  # now a wait for its signal, without a timeout
    parked = [r.getMessage() for r in caplog.records if "parked" in r.getMessage()]
    assert parked == [
        f"job {job_id} tests.workflow parked (sleeping 1 hour (cool-off)), woken in 1 hour",
        f"job {job_id} tests.workflow parked (waiting for signal 'confirmed'), woken by the "
        "signal 'confirmed' (no timeout)",
    ]


def test_the_send_signal_form_is_filled_with_the_awaited_signal():
    job_id = enqueue_job("tests.workflow", {"order": "o8", "sleep": 0})
    drain()
    wait_for(lambda: Job.objects.get(pk=job_id).status == "waiting")
    admin = make_user("ops", "view_concurrencysetting", "view_job", "change_job")
    form = admin.get(f"/admin/django_pqjobs/job/{job_id}/signal/").content.decode()
    assert 'name="name" value="confirmed"' in form


def test_the_settings_lists_show_times_in_the_console_s_one_format():
    capacity.set_concurrency(3, name="web")
    from django_pqjobs import fairness

    fairness.set_fair_weight("tenant:1", 4)
    admin = make_user("ops", "view_concurrencysetting", "view_fairweight")
    for url in ("/admin/django_pqjobs/concurrencysetting/", "/admin/django_pqjobs/fairweight/"):
        page = admin.get(url).content.decode()
        assert " UTC</time>" in page and "a.m." not in page and "p.m." not in page, url
