"""System checks for declared schedules (the settings themselves are checked as E040-E042).

Registered by ``PQJobsConfig.ready()``; importing this module registers nothing.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Warning

from ..conf import conf
from ..recurrence import ScheduleError
from ..registry import registry


def check_schedules(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Settings schedules name registered job types and do not clash with @job schedules."""
    try:
        specs = conf.SCHEDULES
    except (ScheduleError, ValueError):
        return []  # reported as pqjobs.E040 by the settings check
    messages: list[CheckMessage] = []
    from_code = {t.name for t in registry.all() if t.schedule is not None}
    for spec in specs:
        if spec.name in from_code:
            messages.append(
                Error(
                    f"schedule {spec.name!r} is declared both by @job(cron=/interval=) and in "
                    "PQJOBS['SCHEDULES']",
                    hint="Rename one of them: schedule names are unique.",
                    id="pqjobs.E043",
                    obj="settings.PQJOBS",
                )
            )
        if spec.job_type not in registry:
            messages.append(
                Warning(
                    f"PQJOBS['SCHEDULES'] schedule {spec.name!r} runs job type "
                    f"{spec.job_type!r}, which no @job registers",
                    hint="Its jobs would fail with 'no handler registered'.",
                    id="pqjobs.W040",
                    obj="settings.PQJOBS",
                )
            )
    return messages
