"""Management commands against PostgreSQL: --verbosity, --database, and names from the
database printed with their control characters escaped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_pqjobs import enqueue_job, monitoring
from django_pqjobs.flow import pause_queue, paused
from django_pqjobs.models import Job, OperatorAction, Schedule
from django_pqjobs.registry import registry
from django_pqjobs.schedules.scheduler import database_now
from django_pqjobs.worker.claiming import claim_jobs
from tests.helpers import run_jobs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "second"])

TASKS_QUEUE = "tasks-only-queue"
EVIL_NAME = "evil\x1b[2J\nforged line"
EVIL_SHOWN = "evil\\x1b[2J\\nforged line"


def command_output(name: str, *args: str, **options) -> str:
    out = StringIO()
    call_command(name, *args, stdout=out, **options)
    return out.getvalue()


def stale_running_jobs(alias: str, worker_id: str, count: int) -> list[int]:
    """``count`` new running jobs of ``worker_id`` whose heartbeat stopped an hour ago."""
    Job.objects.using(alias).filter(status="ready").update(status="done")
    ids = [enqueue_job("tests.noop", using=alias) for _ in range(count)]
    assert [job.id for job in claim_jobs(alias, worker_id, None, count).jobs] == ids
    Job.objects.using(alias).filter(pk__in=ids).update(
        heartbeat_at=database_now(alias) - timedelta(hours=1)
    )
    return ids


def make_schedule(alias: str, name: str) -> Schedule:
    return Schedule.objects.using(alias).create(
        name=name,
        job_type="tests.noop",
        interval_seconds=3600,
        next_run_at=database_now(alias) + timedelta(hours=1),
        payload={"report": "weekly"},
    )


# --- reap_stale -------------------------------------------------------------------------


def test_reap_stale_prints_by_verbosity():
    first = stale_running_jobs("default", "gone", 1)[0]
    assert command_output("reap_stale", verbosity=0) == ""
    assert Job.objects.get(pk=first).status == "ready"  # quiet, but done

    stale_running_jobs("default", "gone", 2)
    assert command_output("reap_stale", verbosity=1) == (
        "rescued 2 stale jobs (no heartbeat for 20 minutes)\n"
    )

    [third] = stale_running_jobs("default", "gone", 1)
    lines = command_output("reap_stale", verbosity=2).splitlines()
    assert lines == [
        f"job {third} tests.noop attempt 1 (worker gone) -> ready",
        "rescued 1 stale job (no heartbeat for 20 minutes)",
    ]


def test_reap_stale_frees_the_jobs_of_a_worker_said_to_be_gone():
    gone = stale_running_jobs("default", "gone", 2)
    alive = stale_running_jobs("default", "alive", 1)
    Job.objects.update(heartbeat_at=database_now("default"))  # fresh: not stale at all
    assert command_output("reap_stale", verbosity=1) == (
        "rescued 0 stale jobs (no heartbeat for 20 minutes)\n"
    )
    lines = command_output("reap_stale", "--worker-id", "gone", verbosity=2).splitlines()
    assert lines == [
        *(f"job {job_id} tests.noop attempt 1 (worker gone) -> ready" for job_id in gone),
        "rescued 2 jobs of worker gone",
    ]
    assert Job.objects.get(pk=alive[0]).status == "running"
    with pytest.raises(CommandError, match="not allowed with argument"):
        call_command("reap_stale", "--worker-id", "gone", "--older-than", "1m")


def test_reap_stale_escapes_job_types_and_worker_ids():
    [job_id] = stale_running_jobs("default", "w\x1b[31m", 1)
    Job.objects.filter(pk=job_id).update(job_type=EVIL_NAME)
    text = command_output("reap_stale", verbosity=2)
    assert f"job {job_id} {EVIL_SHOWN} attempt 1 (worker w\\x1b[31m) -> ready\n" in text
    assert "\x1b" not in text and text.count("\n") == 2


def test_reap_stale_works_on_the_database_it_is_given():
    [here] = stale_running_jobs("default", "gone", 1)
    [there] = stale_running_jobs("second", "gone", 1)
    text = command_output("reap_stale", "--database", "second", verbosity=2)
    assert f"job {there} tests.noop" in text
    assert Job.objects.using("second").get(pk=there).status == "ready"
    assert Job.objects.get(pk=here).status == "running"


# --- prune_jobs -------------------------------------------------------------------------


def finished_days_ago(alias: str, days: int) -> int:
    job_id = enqueue_job("tests.noop", using=alias)
    Job.objects.using(alias).filter(pk=job_id).update(
        status="done", finished_at=database_now(alias) - timedelta(days=days)
    )
    return job_id


def test_prune_jobs_prints_by_verbosity():
    finished_days_ago("default", 30)
    assert command_output("prune_jobs", verbosity=0) == ""
    assert not Job.objects.exists()
    finished_days_ago("default", 30)
    OperatorAction.objects.create(actor="alice", action="retry", job_id=1)
    OperatorAction.objects.create(actor="bob", action="retry", job_id=2)
    OperatorAction.objects.filter(actor="alice").update(
        at=database_now("default") - timedelta(days=400)
    )
    assert command_output("prune_jobs", verbosity=1).splitlines() == [
        "done: deleted 1 (older than 7 days)",
        "failed: deleted 0 (older than 30 days)",
        "cancelled: deleted 0 (older than 7 days)",
        "expired: deleted 0 (older than 7 days)",
        "batches: deleted 0 (finished, no job left)",
        "history: not moved (PQJOBS['HISTORY_AFTER'] is None)",
        "sequences: forgot 0 (their last job is gone)",
        "operator actions: deleted 1 (older than 365 days)",
    ]
    assert list(OperatorAction.objects.values_list("actor", flat=True)) == ["bob"]


def test_prune_jobs_works_on_the_database_it_is_given():
    here = finished_days_ago("default", 30)
    finished_days_ago("second", 30)
    assert "done: deleted 1" in command_output("prune_jobs", "--database", "second")
    assert not Job.objects.using("second").exists()
    assert list(Job.objects.values_list("pk", flat=True)) == [here]


# --- list_schedules and trigger_schedule ------------------------------------------------


# The one schedule the test apps declare in code (shop's @job(cron=...)), until synced.
UNSYNCED = (
    "count_unsent_receipts  job=count_unsent_receipts  cron '0 3 * * *'  tz=UTC  declared in "
    "code, not in the table yet: created when a worker starts (or list_schedules --sync)"
)


def test_list_schedules_prints_by_verbosity():
    make_schedule("default", "weekly")
    assert command_output("list_schedules", verbosity=0) == ""
    summary = command_output("list_schedules", "--next", "1", verbosity=1).splitlines()
    assert summary[0].startswith("weekly  job=tests.noop  every 3600 s  tz=UTC  enabled")
    assert [line.split(":")[0] for line in summary[1:2]] == ["    next"]
    assert summary[2:] == [UNSYNCED]
    detailed = command_output("list_schedules", "--next", "1", verbosity=2).splitlines()
    assert detailed[1] == '    queue=default  priority=0  payload={"report": "weekly"}'
    assert detailed[0] == summary[0] and detailed[2:] == summary[1:]


def test_list_schedules_shows_the_queue_and_priority_the_jobs_get():
    def fields(job_type: str, **own) -> str:
        Schedule.objects.all().delete()
        make_schedule("default", "s")
        Schedule.objects.update(job_type=job_type, **own)
        return command_output("list_schedules", "--next", "1", verbosity=2).splitlines()[1]

    assert fields("send_receipt").startswith("    queue=emails  priority=0  ")  # @job(queue=)
    assert fields("summarize").startswith("    queue=default  priority=10  ")  # @job(priority=)
    assert fields("summarize", queue="reports", priority=-5).startswith(
        "    queue=reports  priority=-5  "
    )
    assert fields("gone.elsewhere") == (
        "    queue=(the job type's)  priority=(the job type's)  "
        'payload={"report": "weekly"}  (job type not registered here)'
    )


def test_list_schedules_shows_runs_in_the_schedules_time_zone():
    make_schedule("default", "paris")
    Schedule.objects.update(
        cron="0 3 * * *",
        interval_seconds=None,
        timezone="Europe/Paris",
        next_run_at=datetime(2026, 7, 1, 1, 0, tzinfo=UTC),  # 03:00 summer time
        last_run_at=datetime(2026, 1, 1, 2, 0, tzinfo=UTC),  # 03:00 winter time
        last_job_id=7,
    )
    lines = command_output("list_schedules", "--next", "2").splitlines()
    assert lines[1:4] == [
        "    next: 2026-07-01T03:00:00+02:00",
        "    next: 2026-07-02T03:00:00+02:00",
        "    last: 2026-01-01T03:00:00+01:00 (job 7)",
    ]


def test_list_schedules_says_what_the_next_sync_changes_and_syncs_on_request():
    make_schedule("default", "weekly")
    assert command_output("list_schedules", "--next", "1").splitlines()[-1] == UNSYNCED

    assert command_output("list_schedules", "--next", "1", "--sync").splitlines()[0] == (
        "synced: 1 schedule created (count_unsent_receipts)"
    )
    synced = Schedule.objects.get(name="count_unsent_receipts")
    assert UNSYNCED not in command_output("list_schedules")
    assert command_output("list_schedules", "--sync").startswith("synced: nothing to change\n")

    Schedule.objects.filter(pk=synced.pk).update(declared={**synced.declared, "cron": "0 4 * * *"})
    Schedule.objects.filter(name="weekly").update(declared={"enabled": True})
    lines = command_output("list_schedules", "--next", "1").splitlines()
    assert lines[2] == (
        "    the code declares it otherwise: synced when a worker starts (or list_schedules --sync)"
    )
    assert lines[5] == (
        "    no longer declared in code: disabled when a worker starts (or list_schedules --sync)"
    )
    assert command_output("list_schedules", "--sync").splitlines()[0] == (
        "synced: 1 schedule updated (count_unsent_receipts); 1 schedule disabled (weekly)"
    )


def test_list_schedules_escapes_names_from_the_database():
    make_schedule("default", EVIL_NAME)
    Schedule.objects.update(job_type="type\r\x1b[0m")
    text = command_output("list_schedules", "--next", "1")
    assert text.startswith(f"{EVIL_SHOWN}  job=type\\r\\x1b[0m  every 3600 s")
    assert "\x1b" not in text and "\r" not in text


def test_list_schedules_and_trigger_schedule_use_the_database_they_are_given():
    make_schedule("second", "only-there")
    assert command_output("list_schedules") == f"{UNSYNCED}\n"
    assert command_output("list_schedules", "--database", "second").startswith("only-there  ")
    with pytest.raises(CommandError, match="no schedule named 'only-there'"):
        call_command("trigger_schedule", "only-there")
    text = command_output("trigger_schedule", "only-there", "--database", "second")
    [job] = Job.objects.using("second").all()
    assert text == f"schedule 'only-there': enqueued job {job.pk}\n"
    assert not Job.objects.exists()


def test_trigger_schedule_prints_by_verbosity_and_escapes_names():
    make_schedule("default", EVIL_NAME)
    assert command_output("trigger_schedule", EVIL_NAME, verbosity=0) == ""
    assert Job.objects.count() == 1
    with pytest.raises(CommandError) as refused:
        call_command("trigger_schedule", "nope", verbosity=0)
    assert str(refused.value) == f"no schedule named 'nope' (known: {EVIL_SHOWN})"
    Job.objects.update(status="done")
    text = command_output("trigger_schedule", EVIL_NAME, verbosity=1)
    assert text.startswith(f"schedule '{EVIL_SHOWN}': enqueued job ")


# --- pause_jobs and resume_jobs ---------------------------------------------------------


def warnings_of(name: str, *args: str, verbosity: int = 1) -> list[str]:
    err = StringIO()
    call_command(name, *args, stdout=StringIO(), stderr=err, verbosity=verbosity)
    return err.getvalue().splitlines()


def test_pause_and_resume_warn_of_a_name_nothing_declares(settings, unknown_job_types_allowed):
    backend = settings.TASKS["default"]
    queues = [*backend["QUEUES"], TASKS_QUEUE]
    settings.TASKS = {**settings.TASKS, "default": {**backend, "QUEUES": queues}}
    queue_typo = (
        "the queue 'emials' is named by no job type, schedule, DEFAULT_QUEUE, QUEUES or TASKS "
        "backend, and holds no job; did you mean 'emails'?"
    )
    type_typo = (
        "the job type 'tests.nooop' is declared by no @job or @task, and no job has it; did "
        "you mean 'tests.noop'?"
    )
    # a likely typo is refused, naming each, and nothing is paused (not even the known one)
    with pytest.raises(CommandError) as refused:
        call_command("pause_jobs", "-q", "emials", "-q", "default", "-t", "tests.nooop")
    assert str(refused.value) == (
        f"{queue_typo}; {type_typo}. Nothing was paused: pass --new to pause a name nothing "
        "declares yet"
    )
    assert paused("default") == []
    # --new pauses them all the same, with the hints as warnings
    assert warnings_of("pause_jobs", "-q", "emials", "-t", "tests.nooop", "--new") == [
        f"warning: {queue_typo}",
        f"warning: {type_typo}",
    ]
    assert {p.name for p in paused("default")} == {"emials", "tests.nooop"}

    # declared by @job, by a TASKS backend's QUEUES, a task's path, a type jobs exist of, a
    # queue jobs wait in
    enqueue_job("reports.only_in_the_workers")
    enqueue_job("tests.noop", queue="adhoc")
    assert TASKS_QUEUE not in {job_type.queue for job_type in registry.all()}
    declared = ["-q", "default", "-q", TASKS_QUEUE, "-q", "adhoc", "-t", "tests.noop"]
    declared += ["-t", "tests.tasks_backport.tasks.add", "-t", "reports.only_in_the_workers"]
    assert warnings_of("pause_jobs", *declared) == []
    assert warnings_of("pause_jobs", "-q", "emials", "--new", verbosity=0) == []

    # resuming a paused name is what to do with a typo; one that was not paused gets the hint
    assert warnings_of("resume_jobs", "-q", "emials", "-t", "tests.nooop") == []
    assert warnings_of("resume_jobs", "-q", "emials") == [
        "warning: the queue 'emials' is named by no job type, schedule, DEFAULT_QUEUE, QUEUES "
        "or TASKS backend, and holds no job; did you mean 'emails'?"
    ]


# --- run_jobs ---------------------------------------------------------------------------


def test_run_jobs_runs_the_worker_on_the_database_it_is_given():
    here = enqueue_job("tests.noop")
    there = enqueue_job("tests.noop", using="second")
    with run_jobs("--burst", "--database", "second", "-v", "2") as worker:
        assert worker.wait(120) == 0
        output = worker.output()
    assert Job.objects.using("second").get(pk=there).status == "done"
    assert Job.objects.get(pk=here).status == "ready"
    lines = output.splitlines()
    assert lines[0].startswith("job types: ") and "tests.noop" in lines[0]
    assert "    tests.noop" in lines
    assert "    tests.iso_echo (isolation=process)" in lines


def test_run_jobs_prints_nothing_at_verbosity_0():
    enqueue_job("tests.noop")
    with run_jobs("--burst", "-v", "0") as worker:
        assert worker.wait(120) == 0
        assert worker.output() == ""
    assert Job.objects.get().status == "done"


def test_run_jobs_counts_in_the_singular_and_the_plural():
    enqueue_job("tests.noop")
    with run_jobs("--max-jobs", "1") as worker:
        assert worker.wait(120) == 0
        output = worker.output()
    assert "stopped after 1 attempt (1 done); 1 claim, 0 of them empty" in output


def test_a_worker_of_a_project_with_only_tasks_says_it_runs_them():
    with run_jobs("--burst", DJANGO_SETTINGS_MODULE="tests.settings_tasks_only") as worker:
        assert worker.wait(120) == 0
        first = worker.output().splitlines()[0]
    assert first == (
        "tasks: every @task enqueued through TASKS['default'] and TASKS['retrying'], each "
        "imported from its app when its first job arrives"
    )


@pytest.mark.slow
def test_a_burst_worker_says_what_it_left_behind():
    with run_jobs("--burst") as worker:
        assert worker.wait(120) == 0
        assert worker.output().splitlines()[-1] == "left behind: nothing"

    retry = enqueue_job("tests.noop")
    Job.objects.filter(pk=retry).update(
        attempts=1, run_after=database_now("default") + timedelta(minutes=10)
    )
    enqueue_job("tests.noop", delay=3600)
    enqueue_job("tests.noop", delay=7200)
    pause_queue("held")
    held = enqueue_job("tests.noop", queue="held")
    done = enqueue_job("tests.noop")
    with run_jobs("--burst") as worker:
        assert worker.wait(120) == 0
        last = worker.output().splitlines()[-1]
    assert Job.objects.get(pk=done).status == "done"
    assert Job.objects.get(pk=held).status == "blocked"
    assert last == (
        "left behind: 1 retry due in 10 minutes, 2 delayed jobs, the first due in 1 hour, "
        "1 job held by a pause"
    )

    # only what the worker would have taken: its queues, its priority floor
    with run_jobs("--burst", "--queue", "default", "--min-priority", "high") as worker:
        assert worker.wait(120) == 0
        assert worker.output().splitlines()[-1] == "left behind: nothing"


def test_left_behind_counts_what_the_next_worker_would_find():
    now = database_now("default")
    schedule = make_schedule("default", "hourly")
    ticks = [enqueue_job("tests.noop", queue="q") for _ in range(2)]
    Job.objects.filter(pk__in=ticks).update(schedule=schedule)
    enqueue_job("tests.noop", queue="q")
    retrying = enqueue_job("tests.noop", queue="q")
    Job.objects.filter(pk=retrying).update(attempts=2, run_after=now + timedelta(seconds=30))
    enqueue_job("tests.noop", queue="q", delay=timedelta(days=1))
    limited = enqueue_job("tests.noop", queue="q")
    Job.objects.filter(pk=limited).update(status="blocked", blocked_by="limit")
    enqueue_job("tests.noop", queue="elsewhere")
    left = monitoring.left_behind("default", ["q"])
    assert (left.due, left.due_from_schedules, left.retries, left.delayed) == (3, 2, 1, 1)
    assert (left.paused, left.limited) == (0, 1)
    assert left.retry_in is not None and 25 < left.retry_in <= 30
    assert left.delayed_in is not None and 86000 < left.delayed_in <= 86400
    assert monitoring.left_behind("default", ["q"], min_priority=50).due == 0
    assert monitoring.left_behind("default").due == 4
