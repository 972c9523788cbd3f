"""Putting jobs in the table: ``enqueue_job``, ``enqueue_on_commit``, ``enqueue_many``.

Payloads are validated and serialised here, before anything touches the database, so a bad
payload is refused at enqueue time with an error that names the job type, never at run time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections, transaction
from django.utils import timezone

from . import signals
from .conf import conf
from .durations import Duration, to_seconds
from .errors import DuplicateJob, InvalidJobOption, PayloadError
from .registry import (
    registry,
    validate_dedupe,
    validate_max_attempts,
    validate_name,
    validate_priority,
    validate_timeout,
)

# A JSON "\u0000" escape that is not itself an escaped backslash: jsonb cannot store it.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_DEDUPE_RETRIES = 20
NOTIFY_CHANNEL = "pqjobs"


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
    dedupe: str
    parent_id: int | None = None
    schedule_id: int | None = None


def serialize_payload(job_type: str, payload: Any) -> str:
    """Return the payload as JSON text, or raise :class:`PayloadError` naming the job type."""
    if payload is None:
        payload = {}
    try:
        text = json.dumps(payload, cls=DjangoJSONEncoder, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise PayloadError(
            f"payload for job type {job_type!r} is not JSON-serialisable: {exc}"
        ) from exc
    except RecursionError:
        raise PayloadError(
            f"payload for job type {job_type!r} is nested too deeply (or refers to itself)"
        ) from None
    if _JSON_NUL.search(text):
        raise PayloadError(
            f"payload for job type {job_type!r} contains a NUL character (\\u0000), "
            "which PostgreSQL jsonb cannot store"
        )
    size = len(text.encode("utf-8"))
    limit = conf.PAYLOAD_MAX_BYTES
    if size > limit:
        raise PayloadError(
            f"payload for job type {job_type!r} is {size} bytes of JSON, over the limit of "
            f"{limit} bytes (PQJOBS['PAYLOAD_MAX_BYTES'])"
        )
    return text


def _check_dedupe_key(job_type: str, key: object) -> None:
    if key is not None and (not isinstance(key, str) or not key or len(key) > 255):
        raise InvalidJobOption(
            f"job type {job_type!r}: dedupe_key must be None or a string of 1-255 "
            f"characters, got {key!r}"
        )


def prepare(
    job_type: str,
    payload: Any = None,
    *,
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | None = None,
    delay: Duration | None = None,
    max_attempts: int | None = None,
    timeout: Duration | None = None,
    dedupe_key: str | None = None,
    dedupe: str | None = None,
    parent_id: int | None = None,
    schedule_id: int | None = None,
) -> PreparedJob:
    """Validate arguments and fill defaults (per job type, then ``PQJOBS``)."""
    validate_name(job_type, "job_type")
    known = registry.get(job_type)
    if run_after is not None and delay is not None:
        raise InvalidJobOption(f"job type {job_type!r}: give run_after or delay, not both")
    if run_after is not None:
        if not isinstance(run_after, datetime):
            raise InvalidJobOption(
                f"job type {job_type!r}: run_after must be a datetime, got {run_after!r}"
            )
        if timezone.is_naive(run_after):
            raise InvalidJobOption(
                f"job type {job_type!r}: run_after must be timezone-aware, got {run_after!r}"
            )
    try:
        delay_seconds = 0.0 if delay is None else to_seconds(delay, f"{job_type!r} delay")
    except ValueError as exc:
        raise InvalidJobOption(str(exc)) from None
    _check_dedupe_key(job_type, dedupe_key)
    where = f"job type {job_type!r}"
    if queue is None:
        queue = (known and known.queue) or conf.DEFAULT_QUEUE
    if priority is None:
        priority = known.priority if known and known.priority is not None else conf.DEFAULT_PRIORITY
    if max_attempts is None:
        max_attempts = (
            known.max_attempts if known and known.max_attempts is not None else conf.MAX_ATTEMPTS
        )
    if timeout is None:
        timeout_seconds = known.timeout if known and known.timeout is not None else None
        if timeout_seconds is None:
            timeout_seconds = conf.DEFAULT_TIMEOUT
    else:
        timeout_seconds = validate_timeout(timeout, f"{where} timeout")
    if dedupe is None:
        dedupe = (known and known.dedupe) or conf.DEDUPE
    return PreparedJob(
        job_type=job_type,
        payload_json=serialize_payload(job_type, payload),
        queue=validate_name(queue, f"{where} queue"),
        priority=validate_priority(priority, f"{where} priority"),
        max_attempts=validate_max_attempts(max_attempts, f"{where} max_attempts"),
        timeout=timeout_seconds,
        run_at=run_after,
        delay=delay_seconds,
        dedupe_key=dedupe_key,
        dedupe=validate_dedupe(dedupe, f"{where} dedupe"),
        parent_id=parent_id,
        schedule_id=schedule_id,
    )


_COLUMNS = (
    "job_type, queue, payload, status, priority, attempts, max_attempts, run_after, "
    "timeout_seconds, dedupe_key, parent_id, schedule_id, last_error, error_type, created_at, "
    "updated_at"
)
_ON_CONFLICT = (
    "ON CONFLICT (job_type, dedupe_key) "
    "WHERE dedupe_key IS NOT NULL AND status IN ('ready', 'running') DO NOTHING"
)
# One job goes in through pqjobs_enqueue() (migration 0007): PL/pgSQL keeps the INSERT's
# plan for the life of the server session, which spares the server planning it on every
# call without client-side prepared statements (those break behind PgBouncer in
# transaction mode). The casts state each argument's type whichever way the cursor binds
# (literals merged client-side by default, typed parameters with server_side_binding).
_ENQUEUE_ONE = (
    "SELECT pqjobs_enqueue(%s, %s, %s::jsonb, %s::integer, %s::integer, %s::timestamptz, "
    "%s::double precision, %s::double precision, %s::text, %s::bigint, %s::bigint, %s::text)"
)
_FIND_ACTIVE = """
    SELECT id, status FROM pqjobs_job
    WHERE job_type = %s AND dedupe_key = %s AND status IN ('ready', 'running')
"""
_CANCEL_READY_DUPLICATE = """
    UPDATE pqjobs_job
    SET status = 'cancelled', finished_at = now(), updated_at = now(),
        last_error = 'replaced by a newer job with the same dedupe_key'
    WHERE job_type = %s AND dedupe_key = %s AND status = 'ready'
"""


_REPLACE_LOCK = "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))"


def _notify(cursor: Any, queues: Iterable[str]) -> None:
    if conf.LISTEN_NOTIFY:
        for queue in sorted(set(queues)):
            cursor.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, queue])


def insert(job: PreparedJob, using: str | None = None) -> int:
    """Insert a prepared job, applying its dedupe strategy; return the job id."""
    alias = using or conf.DATABASE
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
        NOTIFY_CHANNEL if conf.LISTEN_NOTIFY else None,
    ]
    if job.dedupe_key is not None and job.dedupe == "replace":
        # Replacing enqueuers of one key take turns; without the lock, many of them at once
        # keep cancelling each other's new job and none gets through.
        with transaction.atomic(using=alias, savepoint=False):
            with connections[alias].cursor() as cursor:
                cursor.execute(_REPLACE_LOCK, [job.job_type, job.dedupe_key])
            return _insert(job, alias, params)
    return _insert(job, alias, params)


def _insert(job: PreparedJob, alias: str, params: list[Any]) -> int:
    with connections[alias].cursor() as cursor:
        for _ in range(_DEDUPE_RETRIES):
            if job.dedupe_key is not None and job.dedupe == "replace":
                cursor.execute(_CANCEL_READY_DUPLICATE, [job.job_type, job.dedupe_key])
            cursor.execute(_ENQUEUE_ONE, params)
            (new_id,) = cursor.fetchone()
            if new_id is not None:
                signals.job_enqueued.send(
                    sender=job.job_type, job_id=new_id, job_type=job.job_type, created=True
                )
                return int(new_id)
            assert job.dedupe_key is not None  # only a dedupe conflict returns NULL
            cursor.execute(_FIND_ACTIVE, [job.job_type, job.dedupe_key])
            existing = cursor.fetchone()
            if existing is None:
                continue  # the active duplicate finished meanwhile: insert again
            existing_id, existing_status = int(existing[0]), existing[1]
            if job.dedupe == "error":
                raise DuplicateJob(job.job_type, job.dedupe_key, existing_id)
            if job.dedupe == "replace" and existing_status == "ready":
                continue  # another enqueuer's ready job appeared: replace it too
            signals.job_enqueued.send(
                sender=job.job_type, job_id=existing_id, job_type=job.job_type, created=False
            )
            return existing_id
    raise RuntimeError(
        f"could not enqueue job type {job.job_type!r} with dedupe_key {job.dedupe_key!r}: "
        f"the active duplicate kept changing ({_DEDUPE_RETRIES} tries)"
    )


def enqueue_job(
    job_type: str,
    payload: Any = None,
    *,
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | None = None,
    delay: Duration | None = None,
    max_attempts: int | None = None,
    timeout: Duration | None = None,
    dedupe_key: str | None = None,
    dedupe: str | None = None,
    using: str | None = None,
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

    Raises :class:`~django_pqjobs.PayloadError` for a payload that is not JSON or too large,
    and :class:`~django_pqjobs.InvalidJobOption` for a bad option.
    """
    job = prepare(
        job_type,
        payload,
        queue=queue,
        priority=priority,
        run_after=run_after,
        delay=delay,
        max_attempts=max_attempts,
        timeout=timeout,
        dedupe_key=dedupe_key,
        dedupe=dedupe,
    )
    return insert(job, using)


def enqueue_on_commit(
    job_type: str,
    payload: Any = None,
    *,
    using: str | None = None,
    **options: Any,
) -> None:
    """Enqueue when the current transaction commits; nothing happens if it rolls back.

    The payload and options are validated now, so a bad payload raises here, in the caller.
    Outside a transaction the job is enqueued at once. Takes the options of
    :func:`enqueue_job`.
    """
    alias = using or conf.DATABASE
    job = prepare(job_type, payload, **options)
    transaction.on_commit(lambda: insert(job, alias), using=alias)


_INSERT_MANY = f"""
    INSERT INTO pqjobs_job ({_COLUMNS})
    SELECT %s, %s, t.payload::jsonb, 'ready', %s, 0, %s,
           COALESCE(%s, now()) + make_interval(secs => %s),
           %s, t.dedupe_key, NULL, NULL, '', '', now(), now()
    FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS t(payload, dedupe_key, n)
    ORDER BY t.n
    {_ON_CONFLICT}
    RETURNING id, dedupe_key
"""


def enqueue_many(
    job_type: str,
    payloads: Iterable[Any],
    *,
    dedupe_keys: Sequence[str | None] | None = None,
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | None = None,
    delay: Duration | None = None,
    max_attempts: int | None = None,
    timeout: Duration | None = None,
    using: str | None = None,
) -> list[int]:
    """Enqueue many jobs of one type in a single statement; return their ids in order.

    ``dedupe_keys``, if given, has one key (or ``None``) per payload; duplicates are
    skipped (the existing active job's id is returned in their place).
    """
    payload_list = list(payloads)
    if not payload_list:
        return []
    keys: list[str | None] = list(dedupe_keys) if dedupe_keys is not None else []
    if dedupe_keys is not None and len(keys) != len(payload_list):
        raise InvalidJobOption(
            f"job type {job_type!r}: {len(keys)} dedupe_keys for {len(payload_list)} payloads"
        )
    template = prepare(
        job_type,
        None,
        queue=queue,
        priority=priority,
        run_after=run_after,
        delay=delay,
        max_attempts=max_attempts,
        timeout=timeout,
    )
    texts = [serialize_payload(job_type, p) for p in payload_list]
    if not keys:
        keys = [None] * len(texts)
    for key in keys:
        _check_dedupe_key(job_type, key)
    alias = using or conf.DATABASE
    with connections[alias].cursor() as cursor:
        cursor.execute(
            _INSERT_MANY,
            [
                template.job_type,
                template.queue,
                template.priority,
                template.max_attempts,
                template.run_at,
                template.delay,
                template.timeout,
                texts,
                keys,
            ],
        )
        rows = cursor.fetchall()
        ids = _align_ids(cursor, job_type, keys, rows)
        _notify(cursor, [template.queue])
    signals.job_enqueued.send(sender=job_type, job_id=None, job_type=job_type, created=True)
    return ids


def _align_ids(
    cursor: Any, job_type: str, keys: list[str | None], rows: list[tuple[int, str | None]]
) -> list[int]:
    """Map inserted rows back to input positions; look up the ids of skipped duplicates."""
    by_key = {key: int(job_id) for job_id, key in rows if key is not None}
    unkeyed = iter(int(job_id) for job_id, key in rows if key is None)
    missing = sorted({k for k in keys if k is not None and k not in by_key})
    if missing:
        cursor.execute(
            "SELECT dedupe_key, id FROM pqjobs_job WHERE job_type = %s "
            "AND dedupe_key = ANY(%s) AND status IN ('ready', 'running')",
            [job_type, missing],
        )
        by_key.update({key: int(job_id) for key, job_id in cursor.fetchall()})
    ids: list[int] = []
    for key in keys:
        if key is None:
            ids.append(next(unkeyed))
        elif key in by_key:
            ids.append(by_key[key])
        else:
            raise RuntimeError(
                f"job type {job_type!r}: the active job with dedupe_key {key!r} finished "
                "while enqueueing; enqueue it again"
            )
    return ids
