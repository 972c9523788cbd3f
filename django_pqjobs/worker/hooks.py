"""Lifecycle hooks ``pre_execute(job)`` and ``post_execute(job, error)`` from ``PQJOBS['HOOKS']``.

They run where the handler runs: in the executor thread, or in the child process for
isolated jobs. An exception from ``pre_execute`` fails the attempt like a handler error; one
from ``post_execute`` is logged and otherwise ignored (the verdict is already decided).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..conf import conf

if TYPE_CHECKING:
    from ..models import Job

logger = logging.getLogger("django_pqjobs")


@dataclass(frozen=True)
class Hooks:
    """The hooks as configured when :meth:`configured` read them."""

    pre: Callable[..., Any] | None = None
    post: Callable[..., Any] | None = None

    @classmethod
    def configured(cls) -> Hooks:
        hooks = conf.HOOKS
        return cls(hooks.get("pre_execute"), hooks.get("post_execute"))

    def pre_execute(self, job: Job) -> None:
        if self.pre is not None:
            self.pre(job)

    def post_execute(self, job: Job, error: BaseException | None) -> None:
        if self.post is None:
            return
        try:
            self.post(job, error)
        except Exception:
            logger.exception("post_execute hook failed for job %s", job.id)
