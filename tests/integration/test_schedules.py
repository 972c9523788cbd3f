"""Schedules against PostgreSQL: exactly once across worker processes, overlap and misfire
policies, syncing declarations, admin pages and management commands."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from contextlib import ExitStack
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.db import connections
from django.db.models.functions import Now
from django.test import override_settings

from django_pqjobs.models import Job, OperatorAction, Schedule, WorkerRecord
from django_pqjobs.recurrence import ScheduleSpec, Timing, build_spec
from django_pqjobs.registry import registry
from django_pqjobs.schedules.scheduler import database_now, fire_due, trigger
from django_pqjobs.schedules.sync import sync_schedules
from tests.helpers import bound, run_jobs, wait_for, wait_status

pytestmark = pytest.mark.django_db(transaction=True)


def make_schedule(name: str = "s", **fields) -> Schedule:
    fields.setdefault("job_type", "tests.noop")
    if "cron" not in fields:
        fields.setdefault("interval_seconds", 3600)
    fields.setdefault("next_run_at", database_now("default"))
    return Schedule.objects.create(name=name, **fields)


def jobs_of(schedule: Schedule) -> list[Job]:
    return list(Job.objects.filter(schedule_id=schedule.pk).order_by("id"))


def no_scheduler():
    """In-process workers without their own scheduler pass (the test fires schedules)."""
    return override_settings(PQJOBS={**settings.PQJOBS, "SCHEDULER_INTERVAL": None})


# --- exactly once, many worker processes ------------------------------------------------


@pytest.mark.slow
def test_three_worker_processes_enqueue_each_tick_exactly_once():
    with ExitStack() as workers:
        procs = [
            workers.enter_context(run_jobs("-c", "2", "--worker-id", f"p{n}")) for n in range(3)
        ]
        # Wait for the workers, not the clock: on a busy machine they can take many seconds
        # to start, and a first tick set ahead of a start that took longer was missed. A
        # worker row comes with the first heartbeat, right before the first scheduler pass,
        # so once all three rows are there every worker is passing (and competing) every
        # second.
        wait_for(
            lambda: (
                WorkerRecord.objects.filter(worker_id__in=["p0", "p1", "p2"]).count() == 3
                or any(p.poll() is not None for p in procs)
            ),
            timeout=60,
        )
        assert all(p.poll() is None for p in procs), "a worker process died (see its log)"
        start = database_now("default").replace(microsecond=0) + timedelta(seconds=2)
        # overlap "allow": on a busy machine a tick's job may still wait for an executor
        # when the next tick comes, and the default policy would skip that tick by design.
        every_second = {"next_run_at": start, "overlap": "allow"}
        cron = make_schedule("every-second-cron", cron="* * * * * *", **every_second)
        interval = make_schedule("every-second-interval", interval_seconds=1, **every_second)
        wait_for(lambda: Job.objects.filter(schedule_id=cron.pk).count() >= 6)
        wait_for(lambda: Job.objects.filter(schedule_id=interval.pk).count() >= 6)
        Schedule.objects.update(enabled=False)
        time.sleep(1.5)  # let any pass in flight finish
        assert all(p.poll() is None for p in procs), "a worker process died (see its log)"

    for schedule in (cron, interval):
        keys = [j.dedupe_key for j in jobs_of(schedule)]
        assert all(key and key.startswith(f"schedule:{schedule.pk}:") for key in keys)
        assert Counter(keys).most_common(1)[0][1] == 1, "a tick was enqueued twice"
        ticks = sorted(datetime.fromisoformat(key.split(":", 2)[2]) for key in keys)
        assert ticks[0] == start
        steps = {(b - a).total_seconds() for a, b in itertools.pairwise(ticks)}
        assert steps == {1.0}, f"missed or extra ticks: {ticks}"
    ran = Job.objects.filter(schedule__isnull=False, locked_by__isnull=False)
    assert set(ran.values_list("locked_by", flat=True)) <= {"p0", "p1", "p2"}


def test_concurrent_scheduler_passes_fire_a_due_tick_once():
    schedule = make_schedule(interval_seconds=3600)
    barrier = threading.Barrier(8)
    results: list[int] = []

    def run() -> None:
        try:
            barrier.wait(bound(5))
            results.extend(f.job_id for f in fire_due() if f.job_id is not None)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(bound(10))
    assert len(results) == 1 and len(jobs_of(schedule)) == 1
    schedule.refresh_from_db()
    assert schedule.last_job_id == results[0]
    assert (schedule.next_run_at - jobs_of(schedule)[0].created_at).total_seconds() > 3500


def test_a_row_created_without_next_run_at_gets_its_first_tick():
    schedule = make_schedule(interval_seconds=60, next_run_at=None)
    assert fire_due() == []
    schedule.refresh_from_db()
    delay = (schedule.next_run_at - database_now("default")).total_seconds()
    assert 0 < delay <= 60


def test_a_finished_tick_is_not_enqueued_again():
    schedule = make_schedule(interval_seconds=3600)
    [fired] = fire_due()
    Job.objects.filter(pk=fired.job_id).update(status="done")
    assert fire_due() == []  # next_run_at moved on with the insert
    schedule.refresh_from_db()
    assert schedule.next_run_at == fired.tick + timedelta(hours=1)  # the grid, not now + 1 h


# --- overlap ----------------------------------------------------------------------------


def test_overlap_skip_while_the_slow_previous_run_is_active(worker_factory):
    schedule = make_schedule(job_type="tests.sleep", payload={"seconds": 3})
    with no_scheduler():
        worker_factory()
        [first] = fire_due()
        assert first.reason == "run"
        wait_status(first.job_id, "running")
        Schedule.objects.filter(pk=schedule.pk).update(next_run_at=Now())
        [second] = fire_due()
        assert (second.reason, second.job_id) == ("overlap_skip", None)
        assert trigger(schedule.pk).job_id is None  # Run now respects the policy too
        wait_status(first.job_id, "done")
        Schedule.objects.filter(pk=schedule.pk).update(next_run_at=Now())
        [third] = fire_due()
        assert third.reason == "run" and third.job_id != first.job_id
    assert len(jobs_of(schedule)) == 2


def test_overlap_allow_runs_beside_the_active_one():
    schedule = make_schedule(overlap="allow")
    [first] = fire_due()
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=Now())
    [second] = fire_due()
    assert second.reason == "run" and second.job_id != first.job_id
    assert [j.status for j in jobs_of(schedule)] == ["ready", "ready"]


# --- misfire ----------------------------------------------------------------------------


@pytest.mark.parametrize("policy, jobs", [("run_once", 1), ("skip", 0)])
def test_misfire_after_one_hour_downtime_never_bursts(policy, jobs):
    now = database_now("default")
    tick = now - timedelta(hours=1)
    schedule = make_schedule(interval_seconds=60, misfire=policy, next_run_at=tick)
    cron = make_schedule("cron", cron="*/5 * * * *", misfire=policy, next_run_at=tick)
    fired = fire_due()
    assert sorted(f.reason for f in fired) == [f"misfire_{policy}"] * 2
    assert len(jobs_of(schedule)) == jobs and len(jobs_of(cron)) == jobs
    assert fire_due() == []  # no catch-up for the 59 missed minutes
    schedule.refresh_from_db()
    cron.refresh_from_db()
    assert now < schedule.next_run_at <= now + timedelta(seconds=60)
    assert (schedule.next_run_at - tick).total_seconds() % 60 == 0  # still on the grid
    assert now < cron.next_run_at <= now + timedelta(minutes=5) and cron.next_run_at.minute % 5 == 0


def test_a_slightly_late_tick_is_not_a_misfire():
    schedule = make_schedule(
        misfire="skip", next_run_at=database_now("default") - timedelta(seconds=3)
    )
    assert [f.reason for f in fire_due()] == ["run"]
    assert len(jobs_of(schedule)) == 1


def test_a_broken_schedule_row_does_not_block_the_others(caplog):
    broken = make_schedule("broken", cron="* * * * *")
    Schedule.objects.filter(pk=broken.pk).update(timezone="Mars/Base")
    unknown = make_schedule("payload", payload={"x": "y" * 300_000})  # over the size limit
    good = make_schedule("good")
    fired = {f.schedule: f.reason for f in fire_due()}
    assert fired == {"broken": "error", "payload": "error", "good": "run"}
    assert len(jobs_of(good)) == 1 and jobs_of(unknown) == []
    assert "Mars/Base" in caplog.text


# --- sync -------------------------------------------------------------------------------


def spec(**options) -> ScheduleSpec:
    options.setdefault("cron", "0 3 * * *")
    return build_spec("nightly", "tests.noop", **options)


def test_sync_creates_updates_keeps_admin_edits_and_disables_removed():
    result = sync_schedules(specs=[spec(payload={"v": 1})])
    assert result.created == ["nightly"]
    row = Schedule.objects.get(name="nightly")
    assert row.enabled and row.payload == {"v": 1} and row.next_run_at is not None
    assert row.declared["cron"] == "0 3 * * *"

    # an operator pauses it and changes the payload in the admin
    Schedule.objects.filter(pk=row.pk).update(enabled=False, payload={"v": "admin"})
    assert sync_schedules(specs=[spec(payload={"v": 1})]).updated == []
    row.refresh_from_db()
    assert not row.enabled and row.payload == {"v": "admin"}  # kept: the code did not change

    # the code changes the payload (but not enabled): the payload follows the code
    sync_schedules(specs=[spec(payload={"v": 2})])
    row.refresh_from_db()
    assert row.payload == {"v": 2} and not row.enabled

    # the code changes the timing: next_run_at is recomputed (for when it is enabled)
    Schedule.objects.filter(pk=row.pk).update(enabled=True)
    sync_schedules(specs=[spec(cron=None, interval=30, payload={"v": 2})])
    row.refresh_from_db()
    assert (row.cron, row.interval_seconds) == ("", 30.0)
    assert (row.next_run_at - database_now("default")).total_seconds() <= 30

    # removed from code: disabled, not deleted; declared again: enabled again
    assert sync_schedules(specs=[]).disabled == ["nightly"]
    row.refresh_from_db()
    assert not row.enabled
    sync_schedules(specs=[spec(payload={"v": 2})])
    row.refresh_from_db()
    assert row.enabled and row.cron == "0 3 * * *"


def test_sync_leaves_admin_created_schedules_alone():
    make_schedule("made-in-admin")
    assert sync_schedules(specs=[]).disabled == []
    assert Schedule.objects.get(name="made-in-admin").enabled


def test_worker_syncs_job_decorator_and_settings_schedules(worker_factory):
    from django_pqjobs import job

    @job("tests.integration.every_hour", interval=3600, schedule_payload={"from": "code"})
    def every_hour(ctx):
        return None

    pqjobs = {
        **settings.PQJOBS,
        "SCHEDULES": [{"name": "from-settings", "job_type": "tests.noop", "cron": "0 4 * * *"}],
    }
    try:
        with override_settings(PQJOBS=pqjobs):
            worker_factory()
            names = {"tests.integration.every_hour", "from-settings"}
            # (the example app installed beside the test app declares one of its own)
            wait_for(lambda: names <= set(Schedule.objects.values_list("name", flat=True)))
        rows = {s.name: s for s in Schedule.objects.all()}
        assert rows["tests.integration.every_hour"].payload == {"from": "code"}
        assert rows["from-settings"].cron == "0 4 * * *"
    finally:
        registry.unregister("tests.integration.every_hour")


# --- commands ---------------------------------------------------------------------------


def test_list_schedules_and_trigger_schedule(capsys):
    make_schedule("report", cron="30 2 * * *", timezone="Europe/Berlin")
    call_command("list_schedules", "--next", "2")
    out = capsys.readouterr().out
    assert "report  job=tests.noop  cron '30 2 * * *'  tz=Europe/Berlin  enabled" in out
    assert out.count("next: ") == 2

    call_command("trigger_schedule", "report", "--by", "ops")
    assert "enqueued job" in capsys.readouterr().out
    [job] = jobs_of(Schedule.objects.get(name="report"))
    [run] = OperatorAction.objects.filter(action="schedule_run_now")
    assert (run.actor, run.target, run.schedule_id) == ("ops", "report", job.schedule_id)
    assert run.detail == f"schedule 'report': enqueued job {job.pk}"
    assert job.dedupe_key is None and job.job_type == "tests.noop"
    with pytest.raises(CommandError, match="still ready or running"):
        call_command("trigger_schedule", "report")
    with pytest.raises(CommandError, match="no schedule named 'nope'"):
        call_command("trigger_schedule", "nope")


# --- admin ------------------------------------------------------------------------------


def form_data(**overrides):
    data = {
        "name": "n",
        "job_type": "tests.noop",
        "cron": "0 3 * * *",
        "interval_seconds": "",
        "timezone": "UTC",
        "payload": "{}",
        "queue": "",
        "priority": "",
        "enabled": "on",
        "overlap": "skip",
        "misfire": "run_once",
    }
    data.update(overrides)
    return data


def test_admin_list_and_change_page_with_preview(admin_client):
    schedule = make_schedule("<b>x</b>", cron="30 2 * * *", timezone="Europe/Berlin")
    fire_due()
    page = admin_client.get("/admin/django_pqjobs/schedule/").content.decode()
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert "<code>30 2 * * *</code>" in page and "Europe/Berlin" in page
    assert "ready" in page  # the last job's status
    change = admin_client.get(f"/admin/django_pqjobs/schedule/{schedule.pk}/change/")
    html = change.content.decode()
    assert html.count("<li>") >= 5 and "02:30:00 CE" in html


@pytest.mark.parametrize(
    "overrides, field, message",
    [
        ({"cron": "0 3 * *"}, "cron", "has 4 fields"),
        ({"cron": "0 25 * * *"}, "cron", "is not valid"),
        ({"timezone": "Europe/Atlantis"}, "timezone", "not a known IANA"),
        ({"interval_seconds": "60"}, "cron", "not both"),
        ({"cron": ""}, "cron", "Give a cron expression"),
        ({"cron": "", "interval_seconds": "0"}, "interval_seconds", "more than zero"),
    ],
)
def test_admin_form_explains_bad_input(admin_client, overrides, field, message):
    response = admin_client.post("/admin/django_pqjobs/schedule/add/", form_data(**overrides))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert message in " ".join(errors[field])
    assert not Schedule.objects.exists()


def test_admin_add_computes_next_run(admin_client):
    response = admin_client.post(
        "/admin/django_pqjobs/schedule/add/", form_data(cron="", interval_seconds="90")
    )
    assert response.status_code == 302
    row = Schedule.objects.get()
    assert (
        row.declared is None
        and 0 < (row.next_run_at - database_now("default")).total_seconds() <= 90
    )


def test_admin_save_does_not_undo_a_run_fired_during_the_request(admin_client, monkeypatch):
    from django_pqjobs.admin.schedules import ScheduleForm

    schedule = make_schedule("a", interval_seconds=3600)
    fired = []
    clean = ScheduleForm.clean

    def clean_while_a_worker_fires(form):
        fired.extend(fire_due())  # after the admin loaded the row, before it saves it
        return clean(form)

    monkeypatch.setattr(ScheduleForm, "clean", clean_while_a_worker_fires)
    response = admin_client.post(
        f"/admin/django_pqjobs/schedule/{schedule.pk}/change/",
        form_data(name="a", cron="", interval_seconds="3600", payload='{"v": 2}'),
    )
    assert response.status_code == 302
    [run] = fired
    schedule.refresh_from_db()
    assert schedule.payload == {"v": 2} and schedule.last_job_id == run.job_id
    assert schedule.next_run_at == run.tick + timedelta(hours=1)
    assert fire_due() == []  # the fired tick is not due again


def test_admin_actions_enable_disable_run_now(admin_client):
    schedule = make_schedule("a")
    url = "/admin/django_pqjobs/schedule/"
    admin_client.post(url, {"action": "disable_schedules", "_selected_action": [schedule.pk]})
    schedule.refresh_from_db()
    assert not schedule.enabled
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=Now() - timedelta(days=3))
    admin_client.post(url, {"action": "enable_schedules", "_selected_action": [schedule.pk]})
    schedule.refresh_from_db()
    assert schedule.enabled and schedule.next_run_at > database_now("default")  # no misfire
    response = admin_client.post(
        url, {"action": "run_now", "_selected_action": [schedule.pk]}, follow=True
    )
    assert "enqueued job" in response.content.decode()
    assert len(jobs_of(schedule)) == 1
    response = admin_client.post(
        url, {"action": "run_now", "_selected_action": [schedule.pk]}, follow=True
    )
    assert "still ready or running" in response.content.decode()
    assert len(jobs_of(schedule)) == 1


def test_admin_actions_need_the_change_permission(client):
    schedule = make_schedule("a")
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_schedule"))
    client.force_login(user)
    page = client.get("/admin/django_pqjobs/schedule/").content.decode()
    assert "run_now" not in page
    client.post(
        "/admin/django_pqjobs/schedule/", {"action": "run_now", "_selected_action": [schedule.pk]}
    )
    assert jobs_of(schedule) == []


def test_timing_preview_matches_the_scheduler():
    schedule = make_schedule(cron="*/5 * * * *")
    timing = Timing.build(schedule.cron, None, schedule.timezone)
    [fired] = fire_due()
    schedule.refresh_from_db()
    assert schedule.next_run_at == timing.next_after(fired.tick)
