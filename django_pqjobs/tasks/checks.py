"""System checks of the backend, run through the framework's own ``check_tasks`` (which calls
every configured backend's ``check()``), so they run even when ``django_pqjobs`` itself is
missing from INSTALLED_APPS."""

from __future__ import annotations

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error

from ..conf import conf


def backend_checks(alias: str) -> list[CheckMessage]:
    where = f"settings.TASKS[{alias!r}]"
    errors: list[CheckMessage] = []
    if not apps.is_installed("django_pqjobs"):
        errors.append(
            Error(
                f"TASKS[{alias!r}] uses django_pqjobs.tasks.PQJobsBackend, but 'django_pqjobs' "
                "is not in INSTALLED_APPS",
                hint="Add 'django_pqjobs' to INSTALLED_APPS (its tables hold the tasks), then "
                "run migrate.",
                id="pqjobs.E080",
                obj=where,
            )
        )
    database = conf.raw("DATABASE")
    if isinstance(database, str) and database in settings.DATABASES:
        engine = str(settings.DATABASES[database].get("ENGINE", ""))
        if "postgresql" not in engine.lower():
            errors.append(
                Error(
                    f"TASKS[{alias!r}] stores tasks in database {database!r}, which uses "
                    f"{engine!r}; django_pqjobs.tasks.PQJobsBackend needs PostgreSQL",
                    hint="Point PQJOBS['DATABASE'] at a PostgreSQL database (13 or newer).",
                    id="pqjobs.E081",
                    obj=where,
                )
            )
    return errors
