"""What binds a task to its job type, shared by the handler (``runner``) and the finish
signal (``bridge``): the task with its family and options, and the names of what the handler
leaves on the claimed Job for the signal.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..registry import JobType
from .options import TaskOptions
from .typed import TypedCall, plan_of

if TYPE_CHECKING:
    from .families import Family

# Set on the claimed Job object by the handler: the return value the worker is about to
# store, so the task_finished signal need not read it back from the database; and the
# attempt's TaskResult, sent with task_started, to be updated and sent with task_finished.
RETURN_VALUE = "_pqjobs_task_return_value"
STARTED_RESULT = "_pqjobs_task_result"


@dataclass(frozen=True, eq=False)
class BoundTask:
    """What the handler of a task's job type runs: the task, its family and its options."""

    task: Any
    family: Family
    options: TaskOptions

    @property
    def path(self) -> str:
        return str(self.task.module_path)

    @cached_property
    def typed(self) -> TypedCall | None:
        """Its typed parameters (None: none), worked out once, at its first enqueue or run:
        by then its module is imported whole, so annotations naming classes defined below
        the task resolve."""
        return plan_of(self.task)


def bound_task(job_type: JobType | None) -> BoundTask | None:
    """The task a job type runs, or None for a native job type."""
    return getattr(job_type.handler, "pqjobs_task", None) if job_type is not None else None
