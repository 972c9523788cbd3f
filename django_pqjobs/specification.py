"""A job's options, each declared once: how its value is read, where it may be given, what
it falls back to, and the rules between options.

An option may be given in up to three places: ``@job(...)`` (a default for the type's
jobs), ``enqueue_job(...)`` and its siblings (this job), and a task's options
(``@task_options``, ``@task(...)``, a backend's ``OPTIONS``). Each place reads its values
with :func:`declare`, so a value is judged by one reader wherever it is given, and then
checks the rules between options with :func:`check_rules`, written once here. A job that
gives no value gets its type's, else the ``PQJOBS`` setting's (:func:`default`). The
database holds jobs enqueued from SQL to the same rules (``sql/schema/enqueue.sql``).

To add a job option: declare it in ``OPTIONS`` (and its rules in :func:`check_rules`), give
it its keyword where it may be given (``decorator.job``, ``enqueue.enqueue_job``, which keep
typed signatures), and read it where it acts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from . import options
from .conf import conf
from .errors import InvalidJobOption
from .keys import flow_key, key_template
from .policies import make_backoff

Place = Literal["type", "call", "task"]
Reader = Callable[[Any, str], Any]

PLACE_NAMES: dict[Place, str] = {"type": "@job", "call": "enqueue_job", "task": "a task"}


def _backoff(value: object, what: str) -> Any:
    try:
        return make_backoff(value, what)
    except ValueError as exc:
        raise InvalidJobOption(str(exc)) from None


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidJobOption(f"{what} must be True or False, got {value!r:.120}")
    return value


def _encrypted(value: object, what: str) -> bool | tuple[str, ...]:
    """True or False, or the names of the top-level payload fields sealed one by one."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple)) and value:
        names = tuple(value)
        for name in names:
            if not isinstance(name, str) or not name or len(name) > options.NAME_MAX_LENGTH:
                raise InvalidJobOption(
                    f"{what}: each field name must be non-empty text, got {name!r:.120}"
                )
        if len(set(names)) != len(names):
            raise InvalidJobOption(f"{what} names a field twice: {names!r:.200}")
        return names
    raise InvalidJobOption(
        f"{what} must be True, False or a list of payload field names, got {value!r:.120}"
    )


def _version(value: object, what: str) -> int:
    """A payload shape's version: a whole number from 1 (the jobs table keeps a smallint)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 32767:
        raise InvalidJobOption(f"{what} must be a whole number from 1 to 32767, got {value!r:.120}")
    return value


def _upgrade(value: object, what: str) -> Any:
    if not callable(value):
        raise InvalidJobOption(
            f"{what} must be a function upgrade(payload, version) returning the payload in "
            f"the current shape, got {value!r:.120}"
        )
    return value


def _task_fair_key(value: object, what: str) -> Any:
    """A task's fair key: a key, or a function of the task's arguments returning one (or
    None: the queue's, ``PQJOBS['FAIR_QUEUES']``, if any)."""
    if callable(value):
        return value
    return flow_key(value, what)


def _task_dedupe_key(value: object, what: str) -> Any:
    """A task's key: a string, or a function of the task's arguments returning one (or None)."""
    if callable(value):
        return value
    if isinstance(value, str) and 0 < len(value) <= options.DEDUPE_KEY_MAX_LENGTH:
        return options.storable_text(value, what)
    raise InvalidJobOption(
        f"{what} must be a string of 1-{options.DEDUPE_KEY_MAX_LENGTH} characters, or a "
        f"function of the task's arguments that returns one (or None), got {value!r:.120}"
    )


@dataclass(frozen=True)
class Option:
    """One job option. ``read`` validates and normalises a value (raising
    :class:`~django_pqjobs.InvalidJobOption` that names it); ``read_at`` overrides it for
    a place that takes another form (a key template on the type, a literal key per job)."""

    name: str
    read: Reader
    places: frozenset[Place]
    setting: str | None = None  # the PQJOBS key that applies when no place gives a value
    read_at: tuple[tuple[Place, Reader], ...] = ()

    def reader(self, place: Place) -> Reader:
        return dict(self.read_at).get(place, self.read)


def _option(
    name: str,
    read: Reader,
    *places: Place,
    setting: str | None = None,
    read_at: tuple[tuple[Place, Reader], ...] = (),
) -> Option:
    return Option(name, read, frozenset(places), setting, read_at)


OPTIONS: dict[str, Option] = {
    option.name: option
    for option in (
        _option("queue", options.queue_name, "type", "call", setting="DEFAULT_QUEUE"),
        _option("priority", options.priority, "type", "call", setting="DEFAULT_PRIORITY"),
        _option(
            "max_attempts", options.max_attempts, "type", "call", "task", setting="MAX_ATTEMPTS"
        ),
        _option("timeout", options.timeout, "type", "call", "task", setting="DEFAULT_TIMEOUT"),
        # the worker applies PQJOBS["BACKOFF"] when an attempt fails, not at enqueue
        _option("backoff", _backoff, "type", "task"),
        _option("dedupe", options.dedupe, "type", "call", "task", setting="DEDUPE"),
        _option(
            "dedupe_key",
            options.dedupe_key,
            "call",
            "task",
            read_at=(("task", _task_dedupe_key),),
        ),
        _option("unique_for", options.period, "type", "call", "task"),
        _option("unique_states", options.unique_states, "type", "call", "task"),
        _option("unique_by", options.unique_by, "type", "call", "task"),
        _option("debounce", options.period, "type", "call", "task"),
        _option("debounce_max", options.period, "type", "call", "task"),
        _option("expires_in", options.period, "type", "call", "task"),
        _option("deadline", options.run_after, "call"),
        _option("sequence", flow_key, "type", "call", read_at=(("type", key_template),)),
        _option(
            "sequence_on_failure",
            options.sequence_on_failure,
            "type",
            setting="SEQUENCE_ON_FAILURE",
        ),
        _option(
            "fair_key",
            flow_key,
            "type",
            "call",
            "task",
            read_at=(("type", key_template), ("task", _task_fair_key)),
        ),
        _option("atomic", _flag, "type"),
        _option("encrypted", _encrypted, "type"),
        _option("version", _version, "type"),
        _option("upgrade", _upgrade, "type"),
        # the worker applies PQJOBS["ISOLATION"] when the type sets none
        _option("isolation", options.isolation, "type", "task"),
        _option("memory_limit", options.memory_limit, "type", "task"),
        _option("concurrency", options.concurrency_limit, "type"),
        _option(
            "concurrency_key",
            flow_key,
            "type",
            "call",
            read_at=(("type", key_template),),
        ),
        _option("max_waiting", options.concurrency_limit, "type"),
        _option("when_waiting_full", options.waiting_full, "type"),
        _option("rate", options.rate, "type"),
        _option("rate_key", key_template, "type"),
        _option("run_after", options.run_after, "call"),
        _option("delay", options.delay, "call"),
        _option("depends_on", options.depends_on, "call"),
        _option("on_dependency_failure", options.dependency_policy, "call"),
    )
}


@functools.cache
def names_at(place: Place) -> tuple[str, ...]:
    """The options that may be given at ``place``, in declaration order."""
    return tuple(name for name, option in OPTIONS.items() if place in option.places)


def declare(
    place: Place,
    where: str,
    given: Mapping[str, Any],
    label: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """Read the options ``given`` at ``place`` (``None``: not given).

    Returns the read values of those given. An error names the option as ``label(name)``
    (default ``"<where> <name>"``); an option ``place`` does not take is refused by name.
    The rules between options are the caller's to check (:func:`check_rules`), once every
    value that applies is known: a task's isolation may come from its backend, a job's
    concurrency from its type.
    """
    known = names_at(place)
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise InvalidJobOption(
            f"{where}: unknown option(s) {', '.join(unknown)}; {PLACE_NAMES[place]} takes: "
            f"{', '.join(known)}"
        )
    chosen: dict[str, Any] = {}
    for name, value in given.items():
        if value is not None:
            what = label(name) if label else f"{where} {name}"
            chosen[name] = OPTIONS[name].reader(place)(value, what)
    return chosen


def check_rules(
    values: Mapping[str, Any], where: str, *, batch: bool = False, many: bool = False
) -> None:
    """Refuse options that cannot go together. ``values``: the read values that are set
    (a job's own over its type's); ``batch``: the job joins a batch; ``many``: it is
    enqueued by ``enqueue_many``."""
    get = values.get
    if get("memory_limit") is not None and get("isolation") != "process":
        raise InvalidJobOption(f"{where}: memory_limit needs isolation='process'")
    if get("atomic") and get("isolation") == "process":
        raise InvalidJobOption(
            f"{where}: atomic=True and isolation='process' cannot be combined (the job's "
            "transaction lives in the worker, the handler in a child process)"
        )
    for needs_limit in ("concurrency_key", "max_waiting"):
        if get(needs_limit) is not None and get("concurrency") is None:
            raise InvalidJobOption(
                f"{where}: {needs_limit} needs a limit: declare @job(..., concurrency=N)"
            )
    if get("rate_key") is not None and get("rate") is None:
        raise InvalidJobOption(f"{where}: rate_key needs rate='N/period'")
    if get("upgrade") is not None and (get("version") or 1) < 2:
        raise InvalidJobOption(
            f"{where}: upgrade needs version=2 or more (it turns the payloads of older "
            "versions into the current shape)"
        )
    if get("run_after") is not None and get("delay") is not None:
        raise InvalidJobOption(f"{where}: give run_after or delay, not both")
    if get("expires_in") is not None and get("deadline") is not None:
        raise InvalidJobOption(f"{where}: give expires_in or deadline, not both")
    if get("sequence") is not None:
        _check_sequence(get, where, batch=batch, many=many)
    elif get("sequence_on_failure") is not None:
        raise InvalidJobOption(f"{where}: sequence_on_failure needs a sequence")
    keyed = [name for name in ("dedupe_key", *UNIQUENESS, "debounce") if get(name) is not None]
    if keyed:
        if get("depends_on"):
            raise InvalidJobOption(
                f"{where}: a job with depends_on cannot have a dedupe_key or be unique "
                f"({', '.join(keyed)}; a waiting job holds no key)"
            )
        if batch and get("debounce") is not None:
            raise InvalidJobOption(
                f"{where}: a batch member cannot be debounced (a duplicate would change a "
                "pending job that need not be a member)"
            )
    cap, debounce = get("debounce_max"), get("debounce")
    if cap is not None and (debounce is None or cap < debounce):
        raise InvalidJobOption(
            f"{where}: debounce_max needs a debounce no longer than it (the wait a duplicate "
            "adds; debounce_max caps the wait since the job was enqueued)"
        )
    if get("debounce") is not None:
        for clash in ("run_after", "delay"):
            if get(clash) is not None:
                raise InvalidJobOption(
                    f"{where}: give debounce or {clash}, not both (a debounced job is due "
                    "debounce seconds after its last duplicate)"
                )
        if get("dedupe") not in (None, "skip"):
            raise InvalidJobOption(
                f"{where}: debounce answers a duplicate itself; dedupe={get('dedupe')!r} "
                "cannot go with it"
            )
        if many:
            raise InvalidJobOption(
                f"{where} declares debounce, which enqueue_many cannot apply (each duplicate "
                "pushes one pending job back); use enqueue_job"
            )
    if get("max_waiting") is not None:
        # max_waiting may hand back an existing job instead of a new one
        if many:
            raise InvalidJobOption(
                f"{where} declares max_waiting, which enqueue_many cannot apply job by job; "
                "use enqueue_job"
            )
        if batch or get("depends_on"):
            raise InvalidJobOption(
                f"{where} declares max_waiting, which batches and depends_on cannot use"
            )


def _check_sequence(get: Callable[[str], Any], where: str, *, batch: bool, many: bool) -> None:
    """A sequenced job waits for the one before it: what cannot go with that."""
    if many:
        raise InvalidJobOption(
            f"{where} declares a sequence, which enqueue_many cannot apply (each job waits "
            "for the one enqueued before it); use enqueue_job"
        )
    if get("depends_on"):
        raise InvalidJobOption(
            f"{where}: a sequenced job waits for the job before it in its sequence; it "
            "cannot also have depends_on"
        )
    keyed = [name for name in ("dedupe_key", *UNIQUENESS, "debounce") if get(name) is not None]
    if keyed:
        raise InvalidJobOption(
            f"{where}: a sequenced job cannot have a dedupe_key or be unique "
            f"({', '.join(keyed)}; a job waiting for its turn holds no key)"
        )


# The options that make a job unique: given any, a job with no dedupe_key gets one derived
# from its payload (unique_by, "payload" by default); see keys.payload_key.
UNIQUENESS = ("unique_for", "unique_states", "unique_by")


def declared_by(job_type: Any) -> dict[str, Any]:
    """The options a job type (a ``registry.JobType``) declared, those set, as ``@job``
    read them (``JobType.declared`` keeps them). (The registry imports this module, so the
    type is not named.)"""
    found = {name: getattr(job_type, name, None) for name in names_at("type")}
    return {
        name: value for name, value in found.items() if value is not None and value is not False
    }


def default(name: str, job_type: Any) -> Any:
    """The value of option ``name`` for a job that does not give it: its type's, else the
    setting's (``None`` where neither says)."""
    declared = getattr(job_type, name, None) if job_type is not None else None
    if declared is not None:
        return declared
    setting = OPTIONS[name].setting
    return getattr(conf, setting) if setting is not None else None
