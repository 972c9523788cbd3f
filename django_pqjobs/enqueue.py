"""Putting jobs in the table: ``enqueue_job``, ``enqueue_on_commit``, ``enqueue_many``.

Payloads are validated and serialised here, before anything touches the database, so a bad
payload is refused at enqueue time with an error that names the job type, never at run time.
So is a job type no handler is registered for (unless ``ALLOW_UNKNOWN_JOB_TYPES``), a
database that is not PostgreSQL, and job tables that ``migrate`` has not created.
"""

from __future__ import annotations

import difflib
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple, TypeVar, Unpack

from django.db import DatabaseError, OperationalError, connections, transaction
from django.utils import timezone

from . import (
    composition,
    endings,
    options,
    protection,
    schema,
    signals,
    specification,
    tracing,
    transitions,
)
from .conf import conf
from .errors import DatabaseNotReady, DuplicateJob, InvalidJobOption, QueueFull, UnknownJobType
from .keys import KeyTemplate, derive_key, payload_key
from .notify import channel, notify_queues
from .options import UNIQUE_STATE_BITS, Dedupe, WaitingFull
from .registry import JobType, registry
from .serialization import to_json

# The options' TypedDicts are declared with their readers; their names here are kept for the
# code that imported them from this module.
from .specification import EnqueueOptions as EnqueueOptions
from .specification import JobOptions as JobOptions
from .specification import ManyOptions as ManyOptions
from .sql import held_by_key
from .statuses import DependencyPolicy

_DEDUPE_RETRIES = 20
# A deadlock's victim tries again this many times in all, after a pause of up to
# _DEADLOCK_PAUSE seconds times its tries so far (see deadlock_retried).
_DEADLOCK_TRIES = 5
_DEADLOCK_PAUSE = 0.05
_DEADLOCK_DETECTED = "40P01"
DEBOUNCE_KEY = "debounce"  # the key of a debounced job given none and no unique_by
ALL_FINISHED = sum(UNIQUE_STATE_BITS.values())


@dataclass(frozen=True)
class Flow:
    """The flow-control columns of one job (see flow control in ``@job``)."""

    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    rate_key: str | None = None
    rate_limit: int | None = None
    rate_period: float | None = None
    max_waiting: int | None = None
    when_waiting_full: WaitingFull = "refuse"


NO_FLOW = Flow()


@dataclass(frozen=True)
class PreparedJob:
    """A validated job, ready to insert. Built by :func:`prepare`."""

    job_type: str
    payload_json: str
    queue: str
    priority: int
    max_attempts: int
    timeout: float | None
    run_at: datetime | None
    delay: float
    dedupe_key: str | None
    dedupe: Dedupe
    unique_for: float | None = None  # seconds: the key is held for that window
    unique_states: int = 0  # the finished statuses that hold the key (options.UNIQUE_STATE_BITS)
    unique_by: str | tuple[str, ...] | None = None  # a unique job's key comes from this
    debounce: float | None = None  # seconds a duplicate pushes the pending job back
    debounce_max: float | None = None  # ... but never past this long after it was enqueued
    expires_in: float | None = None  # seconds after it is due: no attempt starts later
    deadline: datetime | None = None  # ... or this moment
    sequence_key: str | None = None  # runs after the job enqueued before it with this key
    sequence_on_failure: str = "halt"  # ... and on a failure of that one: halt or continue
    payload_version: int | None = None  # the type's payload shape, when past 1
    fair_key: str | None = None  # workers share out jobs by this key (sql/schema/fairness.sql)
    parent_id: int | None = None
    schedule_id: int | None = None
    flow: Flow = NO_FLOW
    depends_on: tuple[int, ...] = ()
    on_dependency_failure: DependencyPolicy = "cancel"


def key_of(
    given: str | None, template: KeyTemplate | None, payload: Any, where: str, option: str
) -> str | None:
    """A job's ``option`` key (``sequence``, ``fair_key``): the one ``given`` for it, else
    the one its type's ``template`` derives from its payload, else None."""
    if given is not None or template is None:
        return given
    return derive_key(template, payload, f"{where} {option}")


def fair_key_of(
    given: str | None, known: JobType | None, queue: str, payload: Any, where: str
) -> str | None:
    """A job's fair key: the one given for it, else the one its type's ``fair_key`` derives
    from its payload, else the one its queue's (``PQJOBS['FAIR_QUEUES']``) does, else None."""
    declared = known.fair_key if known is not None else None
    if given is not None or declared is not None:
        return key_of(given, declared, payload, where, "fair_key")
    template = conf.FAIR_QUEUES.get(queue)
    if template is None:
        return None
    return derive_key(template, payload, f"{where}: PQJOBS['FAIR_QUEUES'][{queue!r}]")


def flow_of(
    job_type: str, known: JobType | None, queue: str, payload: Any, key: str | None
) -> Flow:
    """The job's concurrency key and limit and its rate bucket, from its type's declaration
    (``@job(concurrency=..., rate=...)``), ``PQJOBS['QUEUE_RATES']`` and ``key``."""
    where = f"job type {job_type!r}"
    concurrency = known.concurrency if known else None
    if concurrency is not None and key is None:
        template = known.concurrency_key if known else None
        key = (
            job_type
            if template is None
            else derive_key(template, payload, f"{where} concurrency_key")
        )
    rate = known.rate if known else None
    rate_key = None
    if rate is not None:
        template = known.rate_key if known else None
        rate_key = (
            f"type:{job_type}"
            if template is None
            else derive_key(template, payload, f"{where} rate_key")
        )
    else:
        rate = conf.QUEUE_RATES.get(queue)
        rate_key = None if rate is None else f"queue:{queue}"
    if key is None and rate is None:
        return NO_FLOW
    return Flow(
        concurrency_key=key,
        concurrency_limit=concurrency if key is not None else None,
        rate_key=rate_key,
        rate_limit=None if rate is None else rate.allowance,
        rate_period=None if rate is None else rate.period,
        max_waiting=known.max_waiting if known and key is not None else None,
        when_waiting_full=known.when_waiting_full if known else "refuse",
    )


def serialize_payload(job_type: str, payload: Any) -> str:
    """Return the payload as JSON text, or raise :class:`PayloadError` naming the job type."""
    return to_json(
        {} if payload is None else payload,
        f"payload for job type {job_type!r}",
        conf.PAYLOAD_MAX_BYTES,
        "PQJOBS['PAYLOAD_MAX_BYTES']",
    )


def prepare(
    job_type: str,
    payload: Any = None,
    *,
    parent_id: int | None = None,
    schedule_id: int | None = None,
    **given: Unpack[EnqueueOptions],
) -> PreparedJob:
    """Read the job's options (see ``specification.py``) and fill the rest from its type,
    then ``PQJOBS``.

    Everything a database would refuse is refused here, so an enqueue that passes cannot
    fail at INSERT for its data.
    """
    options.job_type_name(job_type, "job_type")
    where = f"job type {job_type!r}"
    known = registry.resolve(job_type)
    if known is None and not conf.ALLOW_UNKNOWN_JOB_TYPES:
        registered = registry.names()
        close = difflib.get_close_matches(job_type, registered, n=1)
        raise UnknownJobType(job_type, registered, close[0] if close else None)
    chosen = specification.declare("call", where, given)
    specification.check_rules({**known.declared, **chosen} if known else chosen, where)
    if known is not None and known.arguments is not None:
        # typed arguments: an instance (or a dict of its shape), checked, as JSON
        payload = known.arguments.to_payload(payload, job_type, known.encrypted)

    def value(name: str) -> Any:
        return chosen[name] if name in chosen else specification.default(name, known)

    queue = value("queue")
    # keys derived from the payload read it in clear, whatever is stored
    clear_json = payload_json = serialize_payload(job_type, payload)
    if known is not None and known.encrypted:
        payload_json = stored_payload(known, payload, clear_json)
    deadline = chosen.get("deadline")
    if deadline is not None:
        due = chosen.get("run_after") or timezone.now() + timedelta(seconds=chosen.get("delay", 0))
        if deadline <= due:
            raise InvalidJobOption(
                f"{where}: deadline {deadline.isoformat()} is not after the job is due "
                f"({due.isoformat()}): it could never start"
            )
    sequence = key_of(
        chosen.get("sequence"), known.sequence if known else None, payload, where, "sequence"
    )
    fair_key = fair_key_of(chosen.get("fair_key"), known, queue, payload, where)
    key = chosen.get("dedupe_key")
    unique = [value(name) for name in specification.UNIQUENESS]
    unique_for, unique_states, unique_by = unique
    debounce, debounce_max = value("debounce"), value("debounce_max")
    if any(v is not None for v in unique) or debounce is not None:
        if unique_by is None and debounce is None:
            unique_by = "payload"
        if unique_for is not None and unique_states is None:
            unique_states = ALL_FINISHED  # one job per window, whatever its status
        if key is None:
            # a debounced type keeps one pending job (the payload changes: it is the latest)
            key = DEBOUNCE_KEY if unique_by is None else payload_key(clear_json, unique_by, where)
    return PreparedJob(
        job_type=job_type,
        payload_json=payload_json,
        queue=queue,
        priority=value("priority"),
        max_attempts=value("max_attempts"),
        timeout=value("timeout"),
        run_at=chosen.get("run_after"),
        delay=chosen.get("delay", debounce or 0.0),
        dedupe_key=key,
        dedupe=value("dedupe"),
        unique_for=unique_for,
        unique_states=unique_states or 0,
        unique_by=unique_by,
        debounce=debounce,
        debounce_max=debounce_max,
        expires_in=value("expires_in"),
        deadline=deadline,
        sequence_key=sequence,
        sequence_on_failure=value("sequence_on_failure"),
        payload_version=_version(known),
        fair_key=fair_key,
        parent_id=parent_id,
        schedule_id=schedule_id,
        flow=flow_of(job_type, known, queue, payload, chosen.get("concurrency_key")),
        depends_on=chosen.get("depends_on", ()),
        on_dependency_failure=chosen.get("on_dependency_failure", "cancel"),
    )


def stored_payload(known: JobType, payload: Any, payload_json: str) -> str:
    """The JSON text stored for a payload of an encrypted type: sealed whole, or its named
    fields sealed (``protection.py``)."""
    return protection.seal_value(
        {} if payload is None else payload,
        known.encrypted,
        payload_json,
        f"the payload of job type {known.name!r}",
        known.name,
    )


def _version(known: JobType | None) -> int | None:
    """The payload version a job of this type is stored with: None for 1, as the column's
    NULL reads (so a type that never declared one writes nothing)."""
    version = None if known is None else known.version
    return None if version is None or version == 1 else version


_COLUMNS = (
    "job_type, queue, payload, status, priority, attempts, max_attempts, run_after, "
    "timeout_seconds, dedupe_key, parent_id, schedule_id, last_error, error_type, created_at, "
    "updated_at"
)
# The unique index of dedupe keys (sql/schema/uniqueness.sql): its columns (with the shelf, a
# partitioned table's key) and predicate, and the end of the window a unique_for job is
# enqueued in (as pqjobs_enqueue() has it).
_HELD = held_by_key()
_ON_CONFLICT = (
    "ON CONFLICT (job_type, dedupe_key, (COALESCE(unique_until, 'infinity'::timestamptz)), shelf) "
    f"WHERE {_HELD} DO NOTHING"
)
_WINDOW_END = "to_timestamp((floor(extract(epoch FROM now())::double precision / {p}) + 1) * {p})"
# One job goes in through pqjobs_enqueue() (migration 0007): PL/pgSQL keeps the INSERT's
# plan for the life of the server session, which spares the server planning it on every
# call without client-side prepared statements (those break behind PgBouncer in
# transaction mode). The casts state each argument's type whichever way the cursor binds
# (literals merged client-side by default, typed parameters with server_side_binding).
_ENQUEUE_ONE = (
    "SELECT pqjobs_enqueue(%s, %s, %s::jsonb, %s::integer, %s::integer, %s::timestamptz, "
    "%s::double precision, %s::double precision, %s::text, %s::bigint, %s::bigint, %s::text, "
    "%s::jsonb)"
)
# The same with the flow-control columns, only for jobs that have them (migration 0009).
_ENQUEUE_ONE_FLOW = _ENQUEUE_ONE.replace(
    "%s::jsonb)",
    "%s::jsonb, %s::text, %s::integer, %s::text, %s::integer, %s::double precision)",
)
# And with the uniqueness columns, only for unique jobs (migration 0020).
_ENQUEUE_ONE_UNIQUE = _ENQUEUE_ONE_FLOW.replace(
    "%s::double precision)", "%s::double precision, %s::double precision, %s::smallint)"
)
# A deadline (migration 0022) and a payload version (0023), in named notation after
# whichever arguments come before them.
_WITH_DEADLINE = ", p_expires_at => %s::timestamptz, p_expires_in => %s::double precision"
_WITH_VERSION = ", p_payload_version => %s::smallint"
_WITH_FAIR_KEY = ", p_fair_key => %s::text"  # migration 0025
_KEY_LOCK = "SELECT pg_advisory_xact_lock(hashtext('pqjobs.key'), hashtext(%s))"
_WAITING = """
    SELECT count(*), max(id) FROM pqjobs_job
    WHERE shelf = 'hot' AND concurrency_key = %s AND status IN ('ready', 'blocked')
"""
# Replacing enqueuers take turns: without it, many of them at once keep cancelling each
# other's new job and none gets through. A single replace locks its key (and its job type in
# shared mode, so single replaces of different keys never wait for each other); a bulk
# replace locks its job type, because one lock per key could fill the server's shared lock
# table (a few thousand locks) and make unrelated transactions fail.
_REPLACE_LOCK = (
    "SELECT pg_advisory_xact_lock_shared(hashtext(%s)), "
    "pg_advisory_xact_lock(hashtext(%s), hashtext(%s))"
)
_REPLACE_MANY_LOCK = "SELECT pg_advisory_xact_lock(hashtext(%s))"


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


def _insert_job(job: PreparedJob, alias: str, trace_context: str | None) -> Inserted:
    params: list[Any] = [
        job.job_type,
        job.queue,
        job.payload_json,
        job.priority,
        job.max_attempts,
        job.run_at,
        job.delay,
        job.timeout,
        job.dedupe_key,
        job.parent_id,
        job.schedule_id,
        channel(),
        trace_context,
    ]
    flow = job.flow
    if flow is not NO_FLOW or _unique(job):
        params += [
            flow.concurrency_key,
            flow.concurrency_limit,
            flow.rate_key,
            flow.rate_limit,
            flow.rate_period,
        ]
    if _unique(job):
        params += [job.unique_for, job.unique_states]
    if _expires(job):
        params += [job.deadline, job.expires_in]
    if job.payload_version is not None:
        params.append(job.payload_version)
    if job.fair_key is not None:
        params.append(job.fair_key)
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


def _unique(job: PreparedJob) -> bool:
    """Whether the job holds its key beyond the active statuses, or for a window."""
    return job.unique_for is not None or job.unique_states != 0


def _expires(job: PreparedJob) -> bool:
    return job.deadline is not None or job.expires_in is not None


def _statement(job: PreparedJob) -> str:
    if _unique(job):
        statement = _ENQUEUE_ONE_UNIQUE
    else:
        statement = _ENQUEUE_ONE if job.flow is NO_FLOW else _ENQUEUE_ONE_FLOW
    named = (
        (_WITH_DEADLINE if _expires(job) else "")
        + ("" if job.payload_version is None else _WITH_VERSION)
        + ("" if job.fair_key is None else _WITH_FAIR_KEY)
    )
    return f"{statement[:-1]}{named})" if named else statement


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
            cursor.execute(_statement(job), params)
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


# The jobs holding some keys of a type in the window a job enqueued now would be in (all in
# the hot partition: the history mover leaves a job that holds its key there).
_FIND_HOLDERS = f"""
    SELECT dedupe_key, id, status FROM pqjobs_job
    WHERE shelf = 'hot' AND job_type = %(type)s AND dedupe_key = ANY(%(keys)s)
      AND COALESCE(unique_until, 'infinity'::timestamptz)
          = COALESCE({_WINDOW_END.format(p="%(period)s::double precision")},
                     'infinity'::timestamptz)
      AND {_HELD}
"""
# The rows of one statement go in in the order of their keys (byte order: the same in every
# database, whatever its collation), those without one after them in the caller's order.
# An INSERT that meets a key another open transaction has just inserted waits for that one
# to end, holding the keys it has inserted so far: two statements that took the same keys in
# different orders would each wait for the other (a deadlock). Taken in one order, the one
# that gets a key first gets every key after it first too. The ids go back in the caller's
# order (_insert_many maps them by key).
_KEY_ORDER = 'ORDER BY t.dedupe_key COLLATE "C", t.n'
# A pause in force holds the jobs it pauses as they are inserted: blocked, 'paused', written
# once. The INSERT's statement trigger notes the pauses (pqjobs.paused, sql/schema/flow.sql)
# before the rows are computed, so the rows read the note for their type and queue once and
# go in held; the row trigger then has nothing to do (no call per row). Without a note, the
# rows go in ready and the row trigger reads the pauses itself.
_PAUSED_NOTE = (
    "(SELECT CASE WHEN COALESCE(current_setting('pqjobs.paused', true), '') NOT IN ('', '{}') "
    "AND current_setting('pqjobs.paused', true)::text[] "
    "&& ARRAY['q:' || %(queue)s::text, 't:' || %(type)s::text] THEN 'paused' END) AS h(hold)"
)
# The one bulk INSERT: every job of the call shares the type's columns, each row has its
# payload, key, fair key, concurrency key and rate key (NULL where it has none). A fair
# job due now takes its turn here, its key's start asked once per statement
# (pqjobs_fair_start, sql/schema/fairness.sql) and its rows numbered from it in their
# order, so the row trigger that gives turns one at a time passes over them.
_INSERT_MANY = f"""
    INSERT INTO pqjobs_job ({_COLUMNS}, trace_context, batch_id, unique_until, unique_states,
                            expires_at, payload_version, fair_key, fair_turn, concurrency_key,
                            concurrency_limit, rate_key, rate_limit, rate_period, blocked_by)
    SELECT %(type)s, %(queue)s, t.payload::jsonb,
           CASE WHEN h.hold IS NULL THEN 'ready' ELSE 'blocked' END,
           %(priority)s, 0, %(max_attempts)s, d.due, %(timeout)s, t.dedupe_key, NULL, NULL,
           '', '', now(), now(), %(trace)s::jsonb, %(batch)s::bigint,
           {_WINDOW_END.format(p="%(unique_for)s::double precision")}, %(unique_states)s,
           COALESCE(%(deadline)s::timestamptz,
                    d.due + make_interval(secs => %(expires_in)s::double precision)),
           %(version)s::smallint, t.fair_key,
           CASE WHEN d.due <= now() THEN f.after + f.step * row_number() OVER (
               PARTITION BY t.fair_key ORDER BY t.n) END,
           t.concurrency_key, %(concurrency_limit)s, t.rate_key, %(rate_limit)s,
           %(rate_period)s, h.hold
    FROM {_PAUSED_NOTE},
         (SELECT COALESCE(%(run_at)s, now()) + make_interval(secs => %(delay)s)) AS d(due),
         unnest(%(payloads)s::text[], %(keys)s::text[], %(fair)s::text[],
                %(concurrency_keys)s::text[], %(rate_keys)s::text[])
         WITH ORDINALITY AS t(payload, dedupe_key, fair_key, concurrency_key, rate_key, n)
    LEFT JOIN pqjobs_fair_start(%(fair)s::text[], %(priority)s) AS f ON f.key = t.fair_key
    {_KEY_ORDER}
    {_ON_CONFLICT}
    RETURNING id, dedupe_key
"""


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
