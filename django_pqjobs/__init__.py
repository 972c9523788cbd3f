"""django-pqjobs: the PostgreSQL your Django project already runs, as its job queue."""

from importlib.metadata import PackageNotFoundError, version

from . import flow
from .context import JobContext
from .embedded import start_embedded_worker
from .enqueue import enqueue_job, enqueue_many, enqueue_on_commit
from .errors import (
    DatabaseNotReady,
    DuplicateJob,
    InvalidJobOption,
    JobCancelled,
    JobTimeout,
    JobTypeAlreadyRegistered,
    PayloadError,
    PermanentError,
    PQJobsError,
    QueueFull,
    Retry,
    UnknownJobType,
)
from .operations import cancel_job, retry_job
from .options import Priority
from .policies import ExponentialBackoff, StepBackoff
from .registry import job

try:
    __version__ = version("django-pqjobs")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "DatabaseNotReady",
    "DuplicateJob",
    "ExponentialBackoff",
    "InvalidJobOption",
    "JobCancelled",
    "JobContext",
    "JobTimeout",
    "JobTypeAlreadyRegistered",
    "PQJobsError",
    "PayloadError",
    "PermanentError",
    "Priority",
    "QueueFull",
    "Retry",
    "StepBackoff",
    "UnknownJobType",
    "cancel_job",
    "enqueue_job",
    "enqueue_many",
    "enqueue_on_commit",
    "flow",
    "job",
    "retry_job",
    "start_embedded_worker",
]
