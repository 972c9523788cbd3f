"""The child side of process isolation: run one job, send its verdict back.

The verdict is decided with the same functions an executor thread uses
(:mod:`django_pqjobs.verdicts`), so a job ends the same way whichever way it ran.
"""

from __future__ import annotations

import asyncio
import resource
from multiprocessing.connection import Connection
from typing import Any

import django
from django.apps import apps
from django.db import connections

from .. import verdicts
from ..context import JobContext
from ..registry import registry
from ..verdicts import Verdict
from .hooks import Hooks


def child_main(
    pipe: Connection,
    fields: dict[str, Any],
    worker_id: str,
    alias: str,
    database_name: str,
    memory_limit: int | None,
) -> None:
    """Run one job and send an :class:`~django_pqjobs.verdicts.Verdict` through ``pipe``.

    ``database_name`` is the worker's: the same as in settings, except under a test runner
    that renamed the database after the fork server read the settings.
    """
    if not apps.ready:
        django.setup()
    # Here, not at the top: the fork server imports this module while Django is being
    # set up, before models can be imported.
    from ..models import Job

    connections[alias].settings_dict["NAME"] = database_name
    if memory_limit:
        # RLIMIT_DATA (heap and anonymous mappings), not RLIMIT_AS: the address space of a
        # process with Django loaded is already hundreds of MB of mapped libraries.
        resource.setrlimit(resource.RLIMIT_DATA, (memory_limit, memory_limit))
    job = Job(**fields)
    ctx = JobContext(job=job, worker_id=worker_id, attempt=job.attempts, using=alias)
    verdict = _run(job, ctx)
    connections.close_all()
    pipe.send(verdict)
    pipe.close()


def _run(job: Any, ctx: JobContext) -> Verdict:
    job_type = registry.resolve(job.job_type)
    if job_type is None:
        return verdicts.unknown_type(job.job_type)
    hooks = Hooks.configured()
    error: BaseException | None = None
    try:
        hooks.pre_execute(job)
        result = job_type.call(ctx)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
    except BaseException as exc:
        error = exc
        verdict = verdicts.classify(exc, progress_json=ctx.progress_json())
    else:
        verdict = verdicts.success(job.job_type, result, ctx.progress_json())
    hooks.post_execute(job, error)
    return verdict
