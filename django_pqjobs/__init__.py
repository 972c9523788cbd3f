"""django-pqjobs: the PostgreSQL your Django project already runs, as its job queue."""

from importlib.metadata import PackageNotFoundError, version

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
