"""Inserting prepared jobs (``preparation.py``): ``enqueue_job``, ``enqueue_on_commit``,
``enqueue_many``, and ``insert`` for the other entry points (batches, workflows, the Tasks
backend, the scheduler). One job goes in through ``pqjobs_enqueue(pqjobs_job_spec)``
(sql/schema/enqueue.sql) as one JSON row; many through one bulk INSERT; every statement is
in sql/queries/enqueue.sql. A duplicate is answered here by its dedupe strategy, a deadlock's
victim tried again, and a database that is not ready named.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, NamedTuple, TypeVar, Unpack

from django.db import DatabaseError, OperationalError, connections, transaction

from .. import composition, endings, options, schema, signals, specification, tracing, transitions
from ..conf import conf
from ..errors import DatabaseNotReady, DuplicateJob, InvalidJobOption, QueueFull
from ..keys import payload_key
from ..notify import channel, notify_queues
from ..registry import registry
from ..specification import EnqueueOptions, ManyOptions
from ..sql import held_by_key, queries
from .preparation import (
    NO_FLOW,
    Flow,
    PreparedJob,
    fair_key_of,
    flow_of,
    prepare,
    serialize_payload,
    stored_payload,
)

_DEDUPE_RETRIES = 20
# A deadlock's victim tries again this many times in all, after a pause of up to
# _DEADLOCK_PAUSE seconds times its tries so far (see deadlock_retried).
_DEADLOCK_TRIES = 5
_DEADLOCK_PAUSE = 0.05
_DEADLOCK_DETECTED = "40P01"
# The statements (sql/queries/enqueue.sql), with the predicate of the unique index of keys.
_QUERIES = {
    name: text.replace("{held}", held_by_key()) for name, text in queries("enqueue").items()
}
_ENQUEUE_ONE = _QUERIES["enqueue_one"]
_KEY_LOCK = _QUERIES["key_lock"]
_WAITING = _QUERIES["waiting"]
_REPLACE_LOCK = _QUERIES["replace_lock"]
_REPLACE_MANY_LOCK = _QUERIES["replace_many_lock"]
_FIND_HOLDERS = _QUERIES["find_holders"]
_INSERT_MANY = _QUERIES["insert_many"]


@contextmanager
def ready_database(alias: str) -> Iterator[None]:
    """Refuse a database that is not PostgreSQL; say "run migrate" for missing tables."""
    schema.require_postgresql(alias)
    try:
        yield
    except DatabaseError as exc:
        not_ready = schema.not_migrated(exc, alias)
        if not_ready is None:
            raise
        raise not_ready from None


_T = TypeVar("_T")
# The databases whose deadlock_retried() attempt this thread (or task) is inside.
_retrying: ContextVar[frozenset[str]] = ContextVar("pqjobs_retrying", default=frozenset())


def deadlock_retried(alias: str, attempt: Callable[[], _T], *, atomic: bool = True) -> _T:
    """Run ``attempt`` (every enqueue's writes go through here), again if PostgreSQL ends it
    as the victim of a deadlock, up to ``_DEADLOCK_TRIES`` times in all.

    With ``atomic``, ``attempt`` runs in ``transaction.atomic`` (a savepoint inside the
    caller's transaction): the victim is rolled back to its start, its locks released and
    nothing it wrote left, so the next try cannot make a job twice. Without (one job, whose
    statements each hold no key while they wait), it is tried again only outside a
    transaction, where the statement PostgreSQL ended was its own transaction; inside the
    caller's, the caller's transaction is aborted and the error is the caller's to see.
    """

    def once() -> _T:
        if not atomic:
            return attempt()
        with transaction.atomic(using=alias):
            return attempt()

    outer = _retrying.get()
    if alias in outer:
        return once()  # part of an attempt that is tried again whole, by its own call
    connection = connections[alias]
    for tries in range(1, _DEADLOCK_TRIES + 1):
        token = _retrying.set(outer | {alias})
        try:
            return once()
        except OperationalError as exc:
            cause = exc.__cause__
            sqlstate = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
            if (
                sqlstate != _DEADLOCK_DETECTED
                or tries == _DEADLOCK_TRIES
                or not (atomic or connection.get_autocommit())
            ):
                raise
        finally:
            _retrying.reset(token)
        # the other side of the deadlock goes on meanwhile; tries at once would meet again
        time.sleep(random.uniform(0, _DEADLOCK_PAUSE * tries))
    raise AssertionError("unreachable: the last try returns or raises")


def insert(job: PreparedJob, using: str | None = None) -> int:
    """Insert a prepared job, applying its dedupe strategy; return the job id.

    Inside a ``batch()`` block the job joins the batch (a duplicate does not: the job
    holding its key is returned, and stays out of the batch); with ``depends_on`` it waits
    for its dependencies. Both happen in the transaction of the INSERT (a savepoint inside
    yours).
    """
    alias = using or conf.DATABASE
    open_batch = composition.batch_for(alias)
    if open_batch is None and not job.depends_on and job.sequence_key is None:
        return _insert_plain(job, alias).job_id
    where = f"job type {job.job_type!r}"
    specification.check_rules(
        {
            "dedupe_key": job.dedupe_key,
            "concurrency": job.flow.concurrency_limit,
            "max_waiting": job.flow.max_waiting,
            "depends_on": job.depends_on,
            "sequence": job.sequence_key,
            "debounce": job.debounce,
        },
        where,
        batch=open_batch is not None,
    )

    def attempt() -> int:
        last = None
        if job.sequence_key is not None:
            with connections[alias].cursor() as cursor:
                last = composition.take_turn(cursor, job.sequence_key)
        job_id, created = _insert_plain(job, alias)
        with connections[alias].cursor() as cursor:
            if job.depends_on:
                composition.depend(cursor, job_id, job.depends_on, job.on_dependency_failure, where)
            if job.sequence_key is not None:
                composition.follow(
                    cursor, job_id, job.sequence_key, last, job.sequence_on_failure, where
                )
            # A duplicate is no member: the job holding its key is not this batch's. Last,
            # as it notes the member in open_batch too, which a try rolled back would not undo.
            if open_batch is not None and created:
                composition.join_batch(cursor, open_batch, [job_id])
        return job_id

    return deadlock_retried(alias, attempt)


class Inserted(NamedTuple):
    """What one enqueue put in its place: the job's id, and whether it is a new job (not
    the one holding its key, nor the newest waiting one of a full key)."""

    job_id: int
    created: bool


def _insert_plain(job: PreparedJob, alias: str) -> Inserted:
    with ready_database(alias):
        span = tracing.enqueue_span(job.job_type, job.queue)
        if span is None:
            return deadlock_retried(alias, lambda: _insert_job(job, alias, None), atomic=False)
        with span:
            context = span.context_json
            inserted = deadlock_retried(
                alias, lambda: _insert_job(job, alias, context), atomic=False
            )
            span.job_id(inserted.job_id)
            return inserted


def job_spec(job: PreparedJob, trace_context: str | None, notify_channel: str | None) -> str:
    """The job as pqjobs_enqueue() takes it: a JSON object of the pqjobs_job_spec fields it
    has (sql/schema/enqueue.sql; a field left out is NULL there, or its default). The
    payload and the trace context are JSON text already, and go in as they are."""
    spec: dict[str, Any] = {
        "job_type": job.job_type,
        "queue": job.queue,
        "priority": job.priority,
        "max_attempts": job.max_attempts,
    }
    optional = (
        ("run_at", None if job.run_at is None else job.run_at.isoformat()),
        ("delay_seconds", job.delay or None),
        ("timeout_seconds", job.timeout),
        ("dedupe_key", job.dedupe_key),
        ("parent_id", job.parent_id),
        ("schedule_id", job.schedule_id),
        ("notify_channel", notify_channel),
        ("concurrency_key", job.flow.concurrency_key),
        ("concurrency_limit", job.flow.concurrency_limit),
        ("rate_key", job.flow.rate_key),
        ("rate_limit", job.flow.rate_limit),
        ("rate_period", job.flow.rate_period),
        ("unique_for", job.unique_for),
        ("unique_states", job.unique_states or None),
        ("expires_at", None if job.deadline is None else job.deadline.isoformat()),
        ("expires_in", job.expires_in),
        ("payload_version", job.payload_version),
        ("fair_key", job.fair_key),
    )
    for name, given in optional:
        if given is not None:
            spec[name] = given
    raw = f'"payload":{job.payload_json}'
    if trace_context is not None:
        raw += f',"trace_context":{trace_context}'
    return f"{{{raw},{json.dumps(spec, separators=(',', ':'))[1:]}"


def _insert_job(job: PreparedJob, alias: str, trace_context: str | None) -> Inserted:
    params = [job_spec(job, trace_context, channel())]
    flow = job.flow
    if flow.max_waiting is not None:
        assert flow.concurrency_key is not None
        with transaction.atomic(using=alias, savepoint=False):
            with connections[alias].cursor() as cursor:
                # enqueuers of one key take turns, so the count below stays true
                cursor.execute(_KEY_LOCK, [flow.concurrency_key])
                cursor.execute(_WAITING, [flow.concurrency_key])
                waiting, newest = cursor.fetchone()
            if waiting >= flow.max_waiting:
                if flow.when_waiting_full == "skip":
                    return Inserted(int(newest), False)
                raise QueueFull(job.job_type, flow.concurrency_key, int(waiting))
            return _insert(job, alias, params)
    if job.dedupe_key is not None and job.dedupe == "replace":
        # Replacing enqueuers of one key take turns; without the lock, many of them at once
        # keep cancelling each other's new job and none gets through.
        with transaction.atomic(using=alias, savepoint=False):
            with connections[alias].cursor() as cursor:
                cursor.execute(_REPLACE_LOCK, [job.job_type, job.job_type, job.dedupe_key])
            return _insert(job, alias, params)
    return _insert(job, alias, params)


def announce_replaced(alias: str, job_ids: list[int]) -> None:
    """The ready duplicates a ``replace`` cancelled end once the enqueue commits."""
    if job_ids:
        endings.announce_after_commit(
            alias, dict.fromkeys(job_ids, "cancelled"), dependents_of=job_ids
        )


def _insert(job: PreparedJob, alias: str, params: list[Any]) -> Inserted:
    with connections[alias].cursor() as cursor:
        for _ in range(_DEDUPE_RETRIES):
            if job.dedupe_key is not None and job.dedupe == "replace":
                replaced = transitions.cancel_duplicates(
                    cursor, job.job_type, [job.dedupe_key], job.unique_for
                )
                announce_replaced(alias, replaced)
            cursor.execute(_ENQUEUE_ONE, params)
            (new_id,) = cursor.fetchone()
            if new_id is not None:
                signals.job_enqueued.send(
                    sender=job.job_type, job_id=new_id, job_type=job.job_type, created=True
                )
                return Inserted(int(new_id), True)
            assert job.dedupe_key is not None  # only a dedupe conflict returns NULL
            existing_id = _answer_duplicates(cursor, job, [job.dedupe_key]).get(job.dedupe_key)
            if existing_id is None:
                continue
            signals.job_enqueued.send(
                sender=job.job_type, job_id=existing_id, job_type=job.job_type, created=False
            )
            return Inserted(existing_id, False)
    raise RuntimeError(
        f"could not enqueue job type {job.job_type!r} with dedupe_key {job.dedupe_key!r}: "
        f"the active duplicate kept changing ({_DEDUPE_RETRIES} tries)"
    )


def enqueue_job(
    job_type: str,
    payload: Any = None,
    *,
    using: str | None = None,
    **options: Unpack[EnqueueOptions],
) -> int:
    """Insert one job and return its id.

    Inside ``transaction.atomic(using=...)`` on the same database the job commits or rolls
    back with the surrounding work. Options left as ``None`` come from the job type's
    ``@job(...)`` options, then from ``PQJOBS``.

    - ``run_after`` (aware datetime) or ``delay`` (timedelta or seconds): when it may run.
    - ``dedupe_key``: at most one active (ready or running) job per ``(job_type, key)``.
      ``dedupe`` decides what happens on a duplicate: ``"skip"`` returns the existing id,
      ``"replace"`` cancels an existing *ready* job and enqueues this one (a running one is
      kept and its id returned), ``"error"`` raises :class:`~django_pqjobs.DuplicateJob`.
    - ``unique_for`` (``"1h"``, timedelta or seconds): the key is held for the window of
      that length the job is enqueued in (windows start at multiples of it since the Unix
      epoch), whatever the job's status; ``unique_states`` (``"done"``, ``"failed"``,
      ``"cancelled"``, or a list): also held in those finished statuses. Given either (or
      ``unique_by``) and no ``dedupe_key``, the key is a digest of the payload, or of the
      payload fields ``unique_by`` names. Default: the job type's.
    - ``debounce`` (``"30s"``): one pending job per key (the job type's own, unless
      ``unique_by`` or ``dedupe_key`` say): a duplicate gives it its payload and makes it due
      ``debounce`` from now, never later than ``debounce_max`` after it was enqueued; one
      that meets the job running is enqueued to run after it.
    - ``expires_in`` (``"10m"``, timedelta or seconds; default: the job type's) or
      ``deadline`` (aware datetime): no attempt starts after that moment (``expires_in`` is
      counted from when the job is due); a job not started by then ends ``expired``.
    - ``concurrency_key``: the key of this job's concurrency limit, instead of the one its
      type derives from the payload (the type must declare ``concurrency=N``).
    - ``sequence``: the job runs after the job enqueued before it with this key, one at a
      time, in enqueue order (instead of the key its type's ``sequence`` derives).
    - ``fair_key``: the key workers share out by (instead of the key its type's
      ``fair_key`` derives): among due jobs of equal priority, keys take turns.
    - ``depends_on``: ids of jobs this one waits for (status ``waiting``); it becomes
      ``ready`` once every one of them is ``done``. ``on_dependency_failure`` says what
      happens if one fails for good, is cancelled, expires or is deleted: ``"cancel"`` this
      job too (the default), ``"run"`` it anyway once all are finished, or ``"halt"``: wait
      while one is failed, until it is retried (and done) or skipped. Unknown ids are
      refused.

    Inside a :func:`~django_pqjobs.batch` block the job joins the batch.

    Raises :class:`~django_pqjobs.PayloadError` for a payload that is not JSON (saying
    where, and what to pass instead of a model instance or a set) or too large, and
    :class:`~django_pqjobs.InvalidJobOption` for a bad option.
    """
    job = prepare(job_type, payload, **options)
    try:
        return insert(job, using)
    except DatabaseNotReady as exc:
        # Its message says what to do (run migrate): raised from here, the caller's line
        # is not buried under the frames of insert() that met it.
        raise exc.with_traceback(None) from None


def enqueue_on_commit(
    job_type: str,
    payload: Any = None,
    *,
    using: str | None = None,
    **options: Unpack[EnqueueOptions],
) -> None:
    """Enqueue when the current transaction commits; nothing happens if it rolls back.

    The payload and options are validated now, so a bad payload raises here, in the caller.
    Outside a transaction the job is enqueued at once. Takes the options of
    :func:`enqueue_job`.
    """
    alias = using or conf.DATABASE
    if composition.current_batch() is not None:
        raise InvalidJobOption(
            "enqueue_on_commit inside batch(): the job would be enqueued after the batch's "
            "transaction commits, outside the batch; use enqueue_job"
        )
    job = prepare(job_type, payload, **options)
    schema.require_postgresql(alias)
    transaction.on_commit(lambda: insert(job, alias), using=alias)


def enqueue_many(
    job_type: str,
    payloads: Iterable[Any],
    *,
    dedupe_keys: Sequence[str | None] | None = None,
    using: str | None = None,
    **given: Unpack[ManyOptions],
) -> list[int]:
    """Enqueue many jobs of one type in a single statement; return their ids in order.

    ``dedupe_keys``, if given, has one key (or ``None``) per payload. A duplicate (a key
    with an active job) is handled by ``dedupe``, else the job type's strategy, else
    ``PQJOBS["DEDUPE"]``, as by :func:`enqueue_job`:

    - ``"skip"``: the active job's id takes the duplicate's place (a key given twice gets
      the id of the job its first payload created);
    - ``"replace"``: ready duplicates are cancelled and replaced; a running one is kept and
      its id takes the duplicate's place;
    - ``"error"``: :class:`~django_pqjobs.DuplicateJob` naming every duplicate key, and
      nothing is enqueued.

    With ``"replace"`` and ``"error"`` a key may appear only once per call. Unique jobs
    (``unique_for``, ``unique_states``, ``unique_by`` here or on the job type, as for
    :func:`enqueue_job`) without a key get one from their payload. All or nothing:
    the jobs are inserted in one transaction (a savepoint inside yours). Inside a
    :func:`~django_pqjobs.batch` block they join the batch (without dedupe keys).
    ``fair_key`` gives every job that key (else each gets the key its type's ``fair_key``,
    or its queue's in ``PQJOBS['FAIR_QUEUES']``, derives from its payload), and so does
    ``concurrency_key``. The options (:class:`~django_pqjobs.specification.ManyOptions`) are
    :func:`enqueue_job`'s but those it cannot apply job by job (``debounce``, ``sequence``,
    ``depends_on``).
    """
    specification.check_names("many", f"job type {job_type!r}", given)
    payload_list = list(payloads)
    if not payload_list:
        return []
    known = registry.get(job_type)
    if known is not None and known.arguments is not None:
        payload_list = [
            known.arguments.to_payload(p, job_type, known.encrypted) for p in payload_list
        ]
    keys: list[str | None] = list(dedupe_keys) if dedupe_keys is not None else []
    if dedupe_keys is not None and len(keys) != len(payload_list):
        raise InvalidJobOption(
            f"job type {job_type!r}: {len(keys)} dedupe_keys for {len(payload_list)} payloads"
        )
    template = prepare(job_type, payload_list[0], **given)
    texts = clear = [serialize_payload(job_type, p) for p in payload_list]
    if known is not None and known.encrypted:
        texts = [stored_payload(known, p, t) for p, t in zip(payload_list, clear, strict=True)]
    if not keys:
        keys = [None] * len(texts)
    keys = [
        options.dedupe_key(key, f"job type {job_type!r} dedupe_keys[{n}]")
        for n, key in enumerate(keys)
    ]
    if template.unique_by is not None:  # unique jobs: a payload given no key gets one
        where = f"job type {job_type!r}"
        keys = [
            payload_key(text, template.unique_by, where) if key is None else key
            for key, text in zip(keys, clear, strict=True)
        ]
    if template.dedupe != "skip":
        _refuse_repeated_keys(template, keys)
    given_key, fair_key = given.get("concurrency_key"), given.get("fair_key")
    flows = [template.flow] + [
        flow_of(job_type, known, template.queue, payload, given_key) for payload in payload_list[1:]
    ]
    fair = [template.fair_key] + [
        fair_key_of(fair_key, known, template.queue, payload, f"job type {job_type!r}")
        for payload in payload_list[1:]
    ]
    alias = using or conf.DATABASE
    open_batch = composition.batch_for(alias)
    specification.check_rules(
        {
            "dedupe_key": next((key for key in keys if key is not None), None),
            "concurrency": template.flow.concurrency_limit,
            "max_waiting": template.flow.max_waiting,
            "debounce": template.debounce,
            "sequence": template.sequence_key,
        },
        f"job type {job_type!r}",
        batch=open_batch is not None,
        many=True,
    )
    span = tracing.enqueue_span(job_type, template.queue, len(texts))
    trace_context = None if span is None else span.context_json

    def attempt() -> list[int]:
        with connections[alias].cursor() as cursor:
            ids, inserted = _insert_many(
                cursor, template, texts, keys, flows, fair, trace_context, open_batch
            )
            if inserted:
                notify_queues(cursor, [template.queue])
            if open_batch is not None:
                # The jobs inserted carry the batch's id; a duplicate's holder is no member.
                # Last, as it notes the members in open_batch too (see insert()).
                composition.count_members(cursor, open_batch, inserted)
        return ids

    with ready_database(alias), span if span is not None else nullcontext():
        ids = deadlock_retried(alias, attempt)
    signals.job_enqueued.send(sender=job_type, job_id=None, job_type=job_type, created=True)
    return ids


def _refuse_repeated_keys(job: PreparedJob, keys: list[str | None]) -> None:
    first_at: dict[str, int] = {}
    for n, key in enumerate(keys):
        if key is None:
            continue
        if key in first_at:
            raise InvalidJobOption(
                f"job type {job.job_type!r}: dedupe_keys[{first_at[key]}] and "
                f"dedupe_keys[{n}] are both {key!r:.120}; with dedupe={job.dedupe!r} a key "
                "may appear only once per enqueue_many call"
            )
        first_at[key] = n


def _insert_many(
    cursor: Any,
    job: PreparedJob,
    texts: list[str],
    keys: list[str | None],
    flows: list[Flow],
    fair: list[str | None],
    trace_context: str | None,
    open_batch: composition.OpenBatch | None = None,
) -> tuple[list[int], list[int]]:
    """Insert the jobs, applying ``job.dedupe`` to duplicates; return (ids, the new ones).

    Each round inserts what is left in one statement; duplicates whose active job finished
    meanwhile, and (``replace``) ready ones that appeared meanwhile, go into the next round.
    """
    ids: list[int | None] = [None] * len(texts)
    todo = list(range(len(texts)))
    replacing = job.dedupe == "replace" and any(key is not None for key in keys)
    if replacing:
        cursor.execute(_REPLACE_MANY_LOCK, [job.job_type])
    inserted: list[int] = []
    for _ in range(_DEDUPE_RETRIES):
        if replacing:
            todo_keys = [key for key in (keys[n] for n in todo) if key is not None]
            replaced = transitions.cancel_duplicates(
                cursor, job.job_type, todo_keys, job.unique_for
            )
            announce_replaced(cursor.db.alias, replaced)
        flowing = job.flow is not NO_FLOW
        fair_keys = [fair[n] for n in todo]
        cursor.execute(
            _INSERT_MANY,
            {
                "type": job.job_type,
                "queue": job.queue,
                "priority": job.priority,
                "max_attempts": job.max_attempts,
                "run_at": job.run_at,
                "delay": job.delay,
                "timeout": job.timeout,
                "trace": trace_context,
                "batch": None if open_batch is None else open_batch.id,
                "unique_for": job.unique_for,
                "unique_states": job.unique_states,
                "deadline": job.deadline,
                "expires_in": job.expires_in,
                "version": job.payload_version,
                "concurrency_limit": job.flow.concurrency_limit,
                "rate_limit": job.flow.rate_limit,
                "rate_period": job.flow.rate_period,
                "payloads": [texts[n] for n in todo],
                "keys": [keys[n] for n in todo],
                # a NULL array unnests as NULLs beside the others (and asks for no key)
                "fair": fair_keys if any(key is not None for key in fair_keys) else None,
                "concurrency_keys": [flows[n].concurrency_key for n in todo] if flowing else None,
                "rate_keys": [flows[n].rate_key for n in todo] if flowing else None,
            },
        )
        rows = cursor.fetchall()
        inserted += [int(job_id) for job_id, _ in rows]
        new_by_key = {key: int(job_id) for job_id, key in rows if key is not None}
        unkeyed = iter(int(job_id) for job_id, key in rows if key is None)
        duplicates: list[tuple[int, str]] = []  # (position, key)
        for n in todo:
            key = keys[n]
            if key is None:
                ids[n] = next(unkeyed)
            elif key in new_by_key:
                ids[n] = new_by_key[key]
            else:
                duplicates.append((n, key))
        if not duplicates:
            return _resolved(ids), inserted
        kept = _answer_duplicates(cursor, job, [key for _, key in duplicates])
        todo = []
        for n, key in duplicates:
            if key in kept:
                ids[n] = kept[key]
            else:
                todo.append(n)
        if not todo:
            return _resolved(ids), inserted
    raise RuntimeError(
        f"could not enqueue {len(todo)} jobs of type {job.job_type!r}: their active "
        f"duplicates kept changing ({_DEDUPE_RETRIES} tries)"
    )


def _answer_duplicates(cursor: Any, job: PreparedJob, keys: list[str]) -> dict[str, int]:
    """What ``job.dedupe`` makes of keys whose insert met a job holding them: the id that
    takes each key's place (its holder's), or :class:`DuplicateJob` under ``"error"``. A
    key left out is inserted again: its holder let it go meanwhile (finished, or its window
    ended), or (``"replace"``) another enqueuer's ready one appeared, to be replaced too."""
    cursor.execute(
        _FIND_HOLDERS,
        {"type": job.job_type, "keys": sorted(set(keys)), "period": job.unique_for},
    )
    active = {key: (int(job_id), status) for key, job_id, status in cursor.fetchall()}
    if job.debounce is not None:
        return _debounced(cursor, job, active)
    if job.dedupe == "error" and active:
        found = {key: active[key][0] for key in keys if key in active}
        key, existing_id = next(iter(found.items()))
        raise DuplicateJob(job.job_type, key, existing_id, duplicates=found)
    replacing = job.dedupe == "replace"
    return {
        key: job_id
        for key, (job_id, status) in active.items()
        if not (replacing and status in ("ready", "blocked"))
    }


def _debounced(
    cursor: Any, job: PreparedJob, holders: dict[str, tuple[int, str]]
) -> dict[str, int]:
    """A debounced duplicate: a pending holder (ready, blocked) takes the new payload and is
    pushed back by ``debounce`` (never past ``debounce_max`` after it was enqueued); a
    running one lets go of its key, so the new job is inserted to run after it; a finished
    one that still holds the key (``unique_states``) answers as under ``skip``."""
    kept: dict[str, int] = {}
    debounce = job.debounce
    assert debounce is not None
    for key, (job_id, status) in holders.items():
        if status in ("ready", "blocked"):
            if transitions.push_back(
                cursor, job_id, job.payload_json, job.payload_version, debounce, job.debounce_max
            ):
                kept[key] = job_id
        elif status == "running":
            transitions.let_go_of_key(cursor, job_id)
        else:
            kept[key] = job_id
    return kept


def _resolved(ids: list[int | None]) -> list[int]:
    resolved = [job_id for job_id in ids if job_id is not None]
    assert len(resolved) == len(ids), "every position has an id once no duplicate is left"
    return resolved
