"""django-pqjobs: the PostgreSQL your Django project already runs, as its job queue."""

from importlib.metadata import PackageNotFoundError, version

from .context import JobContext
from .embedded import start_embedded_worker
from .enqueue import enqueue_job, enqueue_many, enqueue_on_commit
from .errors import (
    DuplicateJob,
    InvalidJobOption,
    JobCancelled,
    JobTimeout,
    JobTypeAlreadyRegistered,
    PayloadError,
    PermanentError,
    PQJobsError,
    Retry,
)
from .operations import cancel_job, retry_job
from .policies import ExponentialBackoff, StepBackoff
from .registry import job

try:
    __version__ = version("django-pqjobs")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
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
    "Retry",
    "StepBackoff",
    "cancel_job",
    "enqueue_job",
    "enqueue_many",
    "enqueue_on_commit",
    "job",
    "retry_job",
    "start_embedded_worker",
]
