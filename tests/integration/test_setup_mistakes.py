"""What a project sees when its setup is wrong (issue 17, item 5): it forgot ``migrate``, its
job database is not PostgreSQL, or it enqueues a job type no handler is registered for.

Each answer is one line that says what to do, not a database error or a traceback loop.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from urllib.parse import quote

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.db.migrations.loader import MigrationLoader
from django.test import override_settings

from django_pqjobs import (
    DatabaseNotReady,
    InvalidJobOption,
    UnknownJobType,
    enqueue_job,
    enqueue_many,
    enqueue_on_commit,
    schema,
)
from django_pqjobs.models import Job
from tests.helpers import ROOT, bound

pytestmark = pytest.mark.django_db(transaction=True)

ENQUEUE_FUNCTION = "pqjobs_enqueue(pqjobs_job_spec)"  # the one enqueue_job calls


# --- forgetting migrate ---------------------------------------------------------------------


class RolledBack(Exception):
    pass


def test_enqueue_without_the_enqueue_function_says_to_migrate():
    with pytest.raises(RolledBack), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"DROP FUNCTION {ENQUEUE_FUNCTION}")
        with pytest.raises(DatabaseNotReady) as caught:
            enqueue_job("t")
        raise RolledBack
    message = str(caught.value)
    assert message.startswith(
        "the job tables of database 'default' are missing or out of date: run "
        "`manage.py migrate` (PostgreSQL said: function pqjobs_enqueue("
    )
    assert "\n" not in message
    assert caught.value.__suppress_context__  # one error, not two tracebacks
    # raised from enqueue_job itself: the caller's line, not the frames below, leads to it
    assert [frame.name for frame in traceback.extract_tb(caught.tb)][-1] == "enqueue_job"
    assert enqueue_job("t")  # the function is back: nothing else changed


def test_enqueue_many_without_the_job_table_says_to_migrate():
    with pytest.raises(RolledBack), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE pqjobs_job RENAME TO pqjobs_job_elsewhere")
        with pytest.raises(DatabaseNotReady, match=r"run `manage.py migrate`.*pqjobs_job"):
            enqueue_many("t", [{}, {}])
        raise RolledBack


def test_other_database_errors_are_not_mistaken_for_missing_tables():
    with pytest.raises(RolledBack), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"REVOKE EXECUTE ON FUNCTION {ENQUEUE_FUNCTION} FROM PUBLIC")
            cursor.execute("CREATE ROLE pqjobs_no_rights_test")
            cursor.execute("GRANT SELECT, INSERT ON pqjobs_job TO pqjobs_no_rights_test")
            cursor.execute("SET LOCAL ROLE pqjobs_no_rights_test")
        with pytest.raises(Exception) as caught:
            enqueue_job("t")
        raise RolledBack
    assert not isinstance(caught.value, DatabaseNotReady)
    assert "permission denied" in str(caught.value)


def test_run_jobs_stops_with_one_line_when_migrations_are_not_applied():
    with pytest.raises(RolledBack), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "DELETE FROM django_migrations WHERE app = 'django_pqjobs' AND name >= '0011'"
            )
        with pytest.raises(CommandError) as caught:
            call_command("run_jobs", "--burst", verbosity=0)
        raise RolledBack
    names = [f"django_pqjobs.{name}" for name in _app_migrations_from("0011")]
    assert len(names) > 3  # the line names the first three and counts the rest
    unapplied = ", ".join(names[:3]) + f" and {len(names) - 3} more"
    assert str(caught.value) == (
        "the job tables of database 'default' are missing or out of date (not applied: "
        f"{unapplied}): run `manage.py migrate` first"
    )


def _app_migrations_from(first: str) -> list[str]:
    on_disk = MigrationLoader(None, ignore_no_migrations=True).disk_migrations
    names = sorted(name for app, name in on_disk if app == "django_pqjobs" and name >= first)
    assert len(names) >= 2
    return names


def _fresh_plan() -> list[str]:
    """The app's migrations a fresh database runs, in order (the squash, then the rest)."""
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    (leaf,) = graph.leaf_nodes("django_pqjobs")
    names = [name for app, name in graph.forwards_plan(leaf) if app == "django_pqjobs"]
    assert len(names) > 3  # the line names the first three and counts the rest
    return names


def test_a_role_that_cannot_read_the_migration_table_is_told_which_tables_are_missing():
    with pytest.raises(RolledBack), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("CREATE ROLE pqjobs_worker_only_test")
            cursor.execute("ALTER TABLE pqjobs_audit RENAME TO pqjobs_audit_elsewhere")
            cursor.execute("SET LOCAL ROLE pqjobs_worker_only_test")
        assert schema.missing_migrations("default") == ["table pqjobs_audit"]
        raise RolledBack
    assert schema.missing_migrations("default") == []


def django_process(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", **env},
        capture_output=True,
        text=True,
        timeout=bound(60),
    )


def test_a_project_that_forgot_migrate_is_told_so_by_run_jobs_and_enqueue(empty_database):
    worker = django_process(["run_jobs"], PQJOBS_TEST_DATABASE=empty_database)
    assert worker.returncode == 1
    names = [f"django_pqjobs.{name}" for name in _fresh_plan()]
    assert worker.stderr.strip().splitlines() == [
        "CommandError: the job tables of database 'default' are missing or out of date (not "
        f"applied: {', '.join(names[:3])} and {len(names) - 3} more): run "
        "`manage.py migrate` first"
    ]
    shell = django_process(
        ["shell", "-c", "from django_pqjobs import enqueue_job; enqueue_job('t')"],
        PQJOBS_TEST_DATABASE=empty_database,
    )
    assert shell.returncode == 1
    last = shell.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "django_pqjobs.errors.DatabaseNotReady: the job tables of database 'default' are "
        "missing or out of date: run `manage.py migrate` (PostgreSQL said: type "
        '"pqjobs_job_spec" does not exist'
    )
    assert "ProgrammingError" not in shell.stderr
    assert "ready_database" not in shell.stderr and "_insert_plain" not in shell.stderr


# --- a database that cannot be reached ----------------------------------------------------


def database_url(**changes: str) -> str:
    """The test database's URL with ``name`` or ``user`` changed."""
    params = {**connection.settings_dict, **{key.upper(): value for key, value in changes.items()}}
    password = f":{quote(params['PASSWORD'], safe='')}" if params["PASSWORD"] else ""
    host = params["HOST"] or "127.0.0.1"
    return (
        f"postgres://{quote(params['USER'], safe='')}{password}@{host}:{params['PORT'] or 5432}"
        f"/{params['NAME']}"
    )


@pytest.mark.parametrize(
    "wrong, said",
    [
        ({"name": "pqjobs_no_such_database"}, 'database "pqjobs_no_such_database" does not exist'),
        ({"user": "pqjobs_no_such_role"}, 'role "pqjobs_no_such_role" does not exist'),
    ],
)
def test_run_jobs_that_cannot_connect_at_start_says_why_in_one_line_and_exits(wrong, said):
    """A wrong database name or login is fatal at start: one line, exit 1, at once. (A
    database that goes away once the worker runs is an outage the worker rides out: see
    test_hardening.py.)"""
    started = time.monotonic()
    worker = django_process(["run_jobs"], DATABASE_URL=database_url(**wrong))
    assert worker.returncode == 1
    assert time.monotonic() - started < bound(30)
    assert worker.stdout == ""
    [line] = worker.stderr.strip().splitlines()
    assert line.startswith("CommandError: cannot connect to database 'default': connection to ")
    assert line.endswith(f" failed: FATAL: {said} (see DATABASES['default'])")


@pytest.mark.slow
def test_the_other_commands_and_the_demo_say_it_in_one_line_too(empty_database):
    unreachable = database_url(name="pqjobs_no_such_database")
    for command in (["list_schedules"], ["failed_jobs"], ["pause_jobs", "-q", "emails"]):
        done = django_process(command, DATABASE_URL=unreachable)
        assert done.returncode == 1
        assert done.stderr.startswith("CommandError: cannot connect to database 'default': ")
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        missing = django_process(command, PQJOBS_TEST_DATABASE=empty_database)
        assert missing.returncode == 1
        [line] = missing.stderr.strip().splitlines()
        assert line.startswith(
            "CommandError: the job tables of database 'default' are missing or out of date: "
            'run `manage.py migrate` (PostgreSQL said: relation "pqjobs_'
        )
    demo = django_process(["demo"], DATABASE_URL=unreachable)
    assert demo.returncode == 1
    [line] = demo.stderr.strip().splitlines()
    assert line.startswith("CommandError: cannot connect to database 'default': ")
    assert line.endswith("does not exist (see DATABASES['default']); check DATABASE_URL")


# --- a database that is not PostgreSQL --------------------------------------------------


def test_enqueue_on_sqlite_from_a_shell_says_postgresql_is_needed(tmp_path: Path):
    done = django_process(
        [
            "shell",
            "-c",
            "from django_pqjobs import enqueue_job\n"
            "try:\n"
            "    enqueue_job('t')\n"
            "except Exception as exc:\n"
            "    print(type(exc).__name__, exc)",
        ],
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
    )
    assert done.stdout.strip().splitlines()[-1] == (
        "DatabaseNotReady django-pqjobs needs PostgreSQL, but the job database 'default' is "
        "sqlite (django.db.backends.sqlite3): make DATABASES['default'] a PostgreSQL database, "
        "or point PQJOBS['DATABASE'] at one"
    ), done.stderr


def test_every_way_in_refuses_a_database_that_is_not_postgresql(monkeypatch):
    monkeypatch.setattr(connection, "vendor", "sqlite")
    for enqueue in (
        lambda: enqueue_job("t"),
        lambda: enqueue_many("t", [{}]),
        lambda: enqueue_on_commit("t"),
    ):
        with pytest.raises(DatabaseNotReady, match="needs PostgreSQL"):
            enqueue()
    monkeypatch.undo()
    assert not Job.objects.exists()


# --- a job type no handler is registered for ---------------------------------------------


def test_an_unknown_job_type_is_refused_with_where_handlers_come_from():
    with pytest.raises(UnknownJobType) as caught:
        enqueue_job("tests.nooop", {"a": 1})
    message = str(caught.value)
    assert message.startswith(
        "no handler is registered for job type 'tests.nooop'; did you mean 'tests.noop'? "
        "Handlers are registered by @job in a jobs.py module of an installed app "
        "(INSTALLED_APPS), imported when Django starts. Registered: "
    )
    first_twenty = caught.value.registered[:20]  # in name order, then a count of the rest
    assert all(repr(name) in message for name in first_twenty) and " more. " in message
    assert message.endswith(
        "If only your workers' code has this handler, set PQJOBS['ALLOW_UNKNOWN_JOB_TYPES'] = True."
    )
    assert isinstance(caught.value, InvalidJobOption)
    assert "tests.noop" in caught.value.registered
    for enqueue in (
        lambda: enqueue_many("billing.charge", [{}]),
        lambda: enqueue_on_commit("billing.charge"),
    ):
        with pytest.raises(UnknownJobType, match=r"'billing\.charge'\. Handlers"):
            enqueue()
    assert not Job.objects.exists()


@override_settings(PQJOBS={"ALLOW_UNKNOWN_JOB_TYPES": True})
def test_a_split_deployment_may_enqueue_types_only_its_workers_know():
    job_id = enqueue_job("reports.only_in_the_worker_codebase")
    assert Job.objects.get(pk=job_id).job_type == "reports.only_in_the_worker_codebase"
