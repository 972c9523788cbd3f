"""Lifecycle hooks ``pre_execute(job)`` and ``post_execute(job, error)`` from ``PQJOBS['HOOKS']``.

They run where the handler runs: in the executor thread, or in the child process for
isolated jobs. An exception from ``pre_execute`` fails the attempt like a handler error; one
from ``post_execute`` is logged and otherwise ignored (the outcome is already decided).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..conf import conf

if TYPE_CHECKING:
    from ..models import Job

logger = logging.getLogger("django_pqjobs")


def _hook(name: str) -> Callable[..., Any] | None:
    return conf.HOOKS.get(name)


def pre_execute(job: Job) -> None:
    hook = _hook("pre_execute")
    if hook is not None:
        hook(job)


def post_execute(job: Job, error: BaseException | None) -> None:
    hook = _hook("post_execute")
    if hook is None:
        return
    try:
        hook(job, error)
    except Exception:
        logger.exception("post_execute hook failed for job %s", job.id)
