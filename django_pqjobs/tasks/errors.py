"""Errors of the Tasks framework backend, and the classes a ``TaskError`` names for failures
that raised no exception inside the task (a lost worker, a killed process, ...)."""

from __future__ import annotations

from ..errors import PayloadError, PermanentError, PQJobsError


class TaskArgumentsError(PayloadError, TypeError):
    """A task's arguments do not round-trip through JSON; raised by ``enqueue()``."""


class TaskNotLoadable(PermanentError):
    """A stored task path does not lead to a ``Task`` of this backend.

    The job fails at once; the object the path names is never called.
    """


class TaskReturnValueError(PermanentError, TypeError):
    """A task returned a value that does not round-trip through JSON; the job fails at once."""


# What a job's failure history records by name, as classes a TaskError can point at.


class WorkerLost(PQJobsError):
    """The worker running the attempt stopped heartbeating; the job was rescued."""


class WorkerLostBeforeStart(PQJobsError):
    """The worker holding the attempt stopped before the task started; the attempt did not
    count (the job was given one more)."""


class UndecodableJob(PQJobsError):
    """The worker could not read the job's row (written behind the application's back)."""


class ResultNotStorable(PQJobsError):
    """The database refused to store the task's return value."""


class ChildKilled(PQJobsError):
    """The attempt's process (process isolation) was killed, most likely out of memory."""


class ChildCrashed(PQJobsError):
    """The attempt's process (process isolation) died of a signal."""


class ChildExited(PQJobsError):
    """The attempt's process (process isolation) exited before reporting a result."""


class UnknownJobType(PQJobsError):
    """No handler was registered for the job's type when a worker claimed it."""
