"""django-pqjobs: the PostgreSQL your Django project already runs, as its job queue."""

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from . import flow
from .batches import batch, enqueue_batch, get_batch
from .context import JobContext, job_context
from .decorator import TypedJob, job
from .embedded import start_embedded_worker
from .enqueue import enqueue_job, enqueue_many, enqueue_on_commit
from .errors import (
    DatabaseNotReady,
    DuplicateJob,
    InvalidJobOption,
    JobCancelled,
    JobExpired,
    JobFailed,
    JobNotFound,
    JobTimeout,
    JobTypeAlreadyRegistered,
    JobWasCancelled,
    PayloadError,
    PermanentError,
    PQJobsError,
    QueueFull,
    Retry,
    Snooze,
    UnknownJobOption,
    UnknownJobType,
    WaitTimeout,
)
from .fairness import fair_keys, set_fair_weight
from .graphs import JobGraph, chain
from .operations import cancel_job, retry_job
from .options import Priority
from .policies import ExponentialBackoff, StepBackoff
from .waiting import wait_for, wait_for_async
from .workflows import SignalTimeout, StepResultNotSerializable, send_signal


def _version() -> str:
    """The version pyproject.toml declares (its one declaration): the installed package's
    metadata, or, for a source tree on ``sys.path`` that was never installed, its
    pyproject.toml; ``"0+unknown"`` when neither is there."""
    try:
        return version("django-pqjobs")
    except PackageNotFoundError:
        pass
    try:
        with (Path(__file__).resolve().parent.parent / "pyproject.toml").open("rb") as file:
            project = tomllib.load(file)["project"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "0+unknown"
    if project.get("name") != "django-pqjobs" or not isinstance(project.get("version"), str):
        return "0+unknown"
    return project["version"]


__version__ = _version()

__all__ = [
    "DatabaseNotReady",
    "DuplicateJob",
    "ExponentialBackoff",
    "InvalidJobOption",
    "JobCancelled",
    "JobContext",
    "JobExpired",
    "JobFailed",
    "JobGraph",
    "JobNotFound",
    "JobTimeout",
    "JobTypeAlreadyRegistered",
    "JobWasCancelled",
    "PQJobsError",
    "PayloadError",
    "PermanentError",
    "Priority",
    "QueueFull",
    "Retry",
    "SignalTimeout",
    "Snooze",
    "StepBackoff",
    "StepResultNotSerializable",
    "TypedJob",
    "UnknownJobOption",
    "UnknownJobType",
    "WaitTimeout",
    "batch",
    "cancel_job",
    "chain",
    "enqueue_batch",
    "enqueue_job",
    "enqueue_many",
    "enqueue_on_commit",
    "fair_keys",
    "flow",
    "get_batch",
    "job",
    "job_context",
    "retry_job",
    "send_signal",
    "set_fair_weight",
    "start_embedded_worker",
    "wait_for",
    "wait_for_async",
]
