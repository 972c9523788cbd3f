"""Putting jobs in the table: ``enqueue_job``, ``enqueue_on_commit``, ``enqueue_many``.

Two steps, one module each: ``preparation.py`` reads a job's options and validates and
serialises its payload before anything touches the database, so a bad payload is refused at
enqueue time with an error that names the job type, never at run time (so is a job type no
handler is registered for, unless ``ALLOW_UNKNOWN_JOB_TYPES``); ``insertion.py`` inserts the
prepared job (refusing a database that is not PostgreSQL, and job tables that ``migrate``
has not created). The names below keep the import paths code has used
(``django_pqjobs.enqueue.enqueue_job``).
"""

from __future__ import annotations

# The options' TypedDicts are declared with their readers; their names here are kept for the
# code that imported them from this module.
from ..specification import EnqueueOptions as EnqueueOptions
from ..specification import JobOptions as JobOptions
from ..specification import ManyOptions as ManyOptions
from .insertion import (
    Inserted,
    announce_replaced,
    deadlock_retried,
    enqueue_job,
    enqueue_many,
    enqueue_on_commit,
    insert,
    job_spec,
    ready_database,
)
from .preparation import (
    ALL_FINISHED,
    DEBOUNCE_KEY,
    NO_FLOW,
    Flow,
    PreparedJob,
    fair_key_of,
    flow_of,
    key_of,
    prepare,
    serialize_payload,
    stored_payload,
)

__all__ = [
    "ALL_FINISHED",
    "DEBOUNCE_KEY",
    "NO_FLOW",
    "EnqueueOptions",
    "Flow",
    "Inserted",
    "JobOptions",
    "ManyOptions",
    "PreparedJob",
    "announce_replaced",
    "deadlock_retried",
    "enqueue_job",
    "enqueue_many",
    "enqueue_on_commit",
    "fair_key_of",
    "flow_of",
    "insert",
    "job_spec",
    "key_of",
    "prepare",
    "ready_database",
    "serialize_payload",
    "stored_payload",
]
