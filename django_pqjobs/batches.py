"""Batches: jobs enqueued together, with callbacks when all of them are finished.

``batch()`` opens a transaction; jobs enqueued inside it (``enqueue_job``,
``enqueue_many``, Django Tasks' ``enqueue()``) join the batch, and the batch and its
members commit together or not at all. From then on the database keeps the counts and
enqueues each callback once per finish of the batch (sql/schema/composition.sql,
``composition.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Unpack

from django.db import connections, transaction

from . import composition, specification
from .composition import OpenBatch
from .conf import conf
from .enqueue import PreparedJob, enqueue_many, prepare, ready_database
from .errors import InvalidJobOption
from .options import NAME_MAX_LENGTH, storable_text
from .specification import ManyOptions
from .sql import queries
from .statuses import BATCH_CALLBACKS

QUERIES = queries("batches")

if TYPE_CHECKING:
    from .models import Batch

__all__ = ["OpenBatch", "batch", "enqueue_batch", "get_batch"]

_CREATE = QUERIES["create"]
_SET_CALLBACKS = QUERIES["set_callbacks"]


def _callback(kind: str, callback: Any, payload: Any, batch_id: int) -> dict[str, Any] | None:
    """A callback's job, prepared now: a bad type or payload is refused at batch creation.

    ``callback`` is a job type name, or a task of Django's Tasks framework whose backend is
    django-pqjobs' (called with ``batch_id=`` and ``payload``'s items as keyword
    arguments).
    """
    if callback is None:
        return None
    where = f"on_{kind}"
    if isinstance(callback, str):
        job = prepare(callback, payload)
    elif hasattr(callback, "module_path") and hasattr(callback, "get_backend"):
        job = _task_callback(callback, payload, batch_id, where)
    else:
        raise InvalidJobOption(f"{where} must be a job type name or a task, got {callback!r:.120}")
    # the fields of the job row (pqjobs_job_spec, sql/schema/enqueue.sql) the callback job
    # is enqueued with, by pqjobs_batch_finished (sql/schema/composition.sql)
    return {
        "job_type": job.job_type,
        "queue": job.queue,
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "timeout_seconds": job.timeout,
        "payload": json.loads(job.payload_json),
        "payload_version": job.payload_version,
    }


def _task_callback(task: Any, payload: Any, batch_id: int, where: str) -> PreparedJob:
    backend = task.get_backend()
    prepare_call = getattr(backend, "prepare_call", None)
    if prepare_call is None:
        raise InvalidJobOption(
            f"{where}: task {task.module_path!r} uses backend {type(backend).__name__}, not "
            "django_pqjobs.tasks.PQJobsBackend"
        )
    if payload is not None and not isinstance(payload, dict):
        raise InvalidJobOption(
            f"{where}: a task callback takes callback_payload as keyword arguments: a dict, "
            f"got {payload!r:.120}"
        )
    job: PreparedJob = prepare_call(task, [], {"batch_id": batch_id, **(payload or {})})
    return job


@contextmanager
def batch(
    *,
    on_success: Any = None,
    on_failure: Any = None,
    on_finish: Any = None,
    callback_payload: Any = None,
    label: str = "",
    using: str | None = None,
) -> Iterator[OpenBatch]:
    """Enqueue jobs as one batch: ``with batch(on_success="reports.mail") as b: ...``.

    Jobs enqueued inside the block join the batch. The block runs in one transaction
    (a savepoint inside yours): if it raises, neither the batch nor its members exist.
    When every member is finished the callbacks are enqueued, each once per finish:

    - ``on_success``: every member is ``done``;
    - ``on_failure``: some member ``failed`` (for good: retries used up, or a permanent
      error);
    - ``on_finish``: every member is finished, however each ended.

    A callback is a job type name, or a task of Django's Tasks framework (on this
    backend), which is called with ``batch_id=`` and ``callback_payload``'s items as
    keyword arguments. A member cancelled (or deleted before it finished) counts as
    finished but not done.
    Retrying a failed member reopens the batch; its callbacks fire again when it finishes
    again. Each callback job gets ``callback_payload`` (``{}`` by default) and
    ``ctx.batch``, the :class:`~django_pqjobs.models.Batch` with its counts.

    The yielded object has ``id`` and ``job_ids`` (the members enqueued so far).
    """
    alias = using or conf.DATABASE
    if not isinstance(label, str):
        raise InvalidJobOption(f"batch label must be text, got {label!r:.120}")
    name = storable_text(label, "batch label")
    if len(name) > NAME_MAX_LENGTH:
        raise InvalidJobOption(
            f"batch label is longer than {NAME_MAX_LENGTH} characters ({len(name)})"
        )
    given = dict(zip(BATCH_CALLBACKS, (on_success, on_failure, on_finish), strict=True))
    with ready_database(alias), transaction.atomic(using=alias):
        with connections[alias].cursor() as cursor:
            cursor.execute(_CREATE, [name])
            (batch_id,) = cursor.fetchone()
            callbacks = {
                kind: spec
                for kind, callback in given.items()
                if (spec := _callback(kind, callback, callback_payload, batch_id)) is not None
            }
            cursor.execute(_SET_CALLBACKS, [json.dumps(callbacks), batch_id])
        open_batch = OpenBatch(id=int(batch_id), alias=alias)
        with composition.filling(open_batch):
            yield open_batch
        with connections[alias].cursor() as cursor:
            cursor.execute(QUERIES["batch"], [open_batch.id])


def enqueue_batch(
    job_type: str,
    payloads: Iterable[Any],
    *,
    on_success: Any = None,
    on_failure: Any = None,
    on_finish: Any = None,
    callback_payload: Any = None,
    label: str = "",
    dedupe_keys: Sequence[str | None] | None = None,
    using: str | None = None,
    **options: Unpack[ManyOptions],
) -> OpenBatch:
    """Enqueue one job of ``job_type`` per payload as a batch, in one statement (as
    :func:`~django_pqjobs.enqueue_many`, which takes the same options); return the batch
    (``id``, ``job_ids``: its members). A duplicate (a key another job holds) is no member.

    Callbacks as for :func:`batch`.
    """
    # a misspelt option is refused before the batch exists
    specification.check_names("many", f"job type {job_type!r}", options)
    with batch(
        on_success=on_success,
        on_failure=on_failure,
        on_finish=on_finish,
        callback_payload=callback_payload,
        label=label,
        using=using,
    ) as opened:
        enqueue_many(job_type, payloads, dedupe_keys=dedupe_keys, using=using, **options)
    return opened


def get_batch(batch_id: int, using: str | None = None) -> Batch:
    """The batch with its counts now (``total``, ``pending``, ``done``, ``failed``,
    ``cancelled``, ``finishes``, ``finished_at``)."""
    from .models import Batch  # the package is imported before the app registry is ready

    return Batch.objects.using(using or conf.DATABASE).get(pk=batch_id)
