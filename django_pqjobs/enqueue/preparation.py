"""Preparing a job: its options read (``specification.py``) and filled from its type, then
``PQJOBS``; its payload validated, serialised (and sealed, for an encrypted type); the keys it
derives from its payload. Nothing here touches the database: a bad job is refused before
anything is sent, with an error that names its type. ``insertion.py`` puts it in the table.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Unpack

from django.utils import timezone

from .. import options, protection, specification
from ..conf import conf
from ..errors import InvalidJobOption, UnknownJobType
from ..keys import KeyTemplate, derive_key, payload_key
from ..options import UNIQUE_STATE_BITS, Dedupe, WaitingFull
from ..registry import JobType, registry
from ..serialization import to_json
from ..specification import EnqueueOptions
from ..statuses import DependencyPolicy

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
