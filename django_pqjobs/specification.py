"""A job's options, each declared once: how its value is read, where it may be given, what
it falls back to, and the rules between options.

An option may be given in up to four places: ``@job(...)`` (a default for the type's
jobs: :class:`TypeOptions`), ``enqueue_job(...)`` and its siblings (this job:
:class:`EnqueueOptions`), ``enqueue_many(...)`` and ``enqueue_batch(...)`` (each job of the
call: :class:`ManyOptions`), and a task's options (``@task_options``, ``@task(...)``, a
backend's ``OPTIONS``: :class:`TaskOptionValues`). Those TypedDicts are the one declaration
of which option each place takes and of its type: every public signature takes them as
``**options: Unpack[...]``, and :func:`names_at` reads them. Each place reads its values
with :func:`declare`, so a value is judged by one reader (``OPTIONS``) wherever it is given,
and then checks the rules between options with :func:`check_rules`, written once here. A job
that gives no value gets its type's, else the ``PQJOBS`` setting's (:func:`default`). The
database holds jobs enqueued from SQL to the same rules (``sql/schema/enqueue.sql``; the
field of ``pqjobs_job_spec``, the row ``pqjobs_enqueue`` takes, each option is stored
through is its ``Option.sql``).

To add a job option: give it its type in the TypedDict of each place that takes it, its
reader in ``OPTIONS`` (and its rules in :func:`check_rules`), and read it where it acts.
tests/integration/test_option_set.py proves every entry point takes and stores every option
its place declares.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypedDict

from . import options
from .conf import conf
from .durations import Duration
from .errors import InvalidJobOption, UnknownJobOption
from .keys import KeyTemplate, flow_key, key_template
from .options import Dedupe, Isolation, Rate, WaitingFull
from .policies import make_backoff
from .statuses import DependencyPolicy

Place = Literal["type", "call", "many", "task"]
Reader = Callable[[Any, str], Any]

PLACE_NAMES: dict[Place, str] = {
    "type": "@job",
    "call": "enqueue_job",
    "many": "enqueue_many",
    "task": "a task",
}

# A key given to a task: a string, or a function of the task's arguments returning one.
TaskKey = str | Callable[..., str | None]


# The options each place takes, and their types: one TypedDict per place, built from parts
# so that each option's type is written once per form it takes (a key is a literal on a job,
# a template on a type, a function of the arguments on a task). ``None`` is "not given".


class RunOptions(TypedDict, total=False):
    """Options every place takes: attempts, time limits, uniqueness, expiry."""

    max_attempts: int | None
    timeout: Duration | None
    dedupe: Dedupe | None
    unique_for: Duration | None
    unique_states: Iterable[str] | str | None
    unique_by: str | Sequence[str] | None
    expires_in: Duration | None


class _Routed(TypedDict, total=False):
    """Where a job waits and its rank (a task has the framework's queue_name and priority)."""

    queue: str | None
    priority: int | str | None  # a whole number, a Priority or its name ("high")


class _Timed(TypedDict, total=False):
    """When this job may run, and until when."""

    run_after: datetime | None
    delay: Duration | None
    deadline: datetime | None


class _Debounced(TypedDict, total=False):
    debounce: Duration | None
    debounce_max: Duration | None


class _InWorker(TypedDict, total=False):
    """How the worker runs the jobs of a type (or a task)."""

    backoff: Any  # see policies.make_backoff
    isolation: Isolation | None
    memory_limit: int | str | None


class ManyOptions(RunOptions, _Routed, _Timed, total=False):
    """The options of :func:`~django_pqjobs.enqueue_many` and
    :func:`~django_pqjobs.enqueue_batch`, for every job of the call (their dedupe keys are
    ``dedupe_keys=``, one per payload)."""

    concurrency_key: str | None
    fair_key: str | None


class JobOptions(ManyOptions, _Debounced, total=False):
    """The options of one job, but its dependencies (``JobGraph.add`` takes these)."""

    dedupe_key: str | None
    sequence: str | None
    on_dependency_failure: DependencyPolicy | None


class EnqueueOptions(JobOptions, total=False):
    """The options of :func:`~django_pqjobs.enqueue_job` (and ``enqueue_on_commit``,
    ``ctx.enqueue``, ``ctx.run_child``, a typed job's ``enqueue``)."""

    depends_on: Sequence[int] | None


class TypeOptions(RunOptions, _Routed, _Debounced, _InWorker, total=False):
    """The options of ``@job(...)``: the defaults of the type's jobs, and what only a type
    declares. A key here is a template over the payload (``"account:{account_id}"``) or a
    function of it."""

    sequence: KeyTemplate | None
    sequence_on_failure: str | None
    fair_key: KeyTemplate | None
    atomic: bool | None
    encrypted: bool | Sequence[str] | None
    version: int | None
    upgrade: Callable[[Any, int], Any] | None
    concurrency: int | None
    concurrency_key: KeyTemplate | None
    max_waiting: int | None
    when_waiting_full: WaitingFull | None
    rate: str | Rate | None
    rate_key: KeyTemplate | None


class TaskOptionValues(RunOptions, _Debounced, _InWorker, total=False):
    """The options of a task (``@task_options(...)``, ``@task(...)``; a backend's
    ``OPTIONS`` sets defaults for those but the keys). A key here is a string or a function
    of the task's arguments."""

    dedupe_key: TaskKey | None
    fair_key: TaskKey | None


PLACES: dict[Place, type] = {
    "type": TypeOptions,
    "call": EnqueueOptions,
    "many": ManyOptions,
    "task": TaskOptionValues,
}


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
    a place that takes another form (a key template on the type, a literal key per job).
    Where it may be given is :data:`PLACES`' to say."""

    name: str
    read: Reader
    setting: str | None = None  # the PQJOBS key that applies when no place gives a value
    read_at: tuple[tuple[Place, Reader], ...] = ()
    # The field of pqjobs_job_spec (the job pqjobs_enqueue() takes, sql/schema/enqueue.sql)
    # a job's read value goes in through; None: Python applies it (a type's declaration read by the
    # worker, a key derived, a duplicate answered, rows beside the job's).
    sql: str | None = None

    def reader(self, place: Place) -> Reader:
        return dict(self.read_at).get(place, self.read)


def _option(
    name: str,
    read: Reader,
    *,
    setting: str | None = None,
    read_at: tuple[tuple[Place, Reader], ...] = (),
    sql: str | None = None,
) -> Option:
    return Option(name, read, setting, read_at, sql)


OPTIONS: dict[str, Option] = {
    option.name: option
    for option in (
        _option("queue", options.queue_name, setting="DEFAULT_QUEUE", sql="queue"),
        _option("priority", options.priority, setting="DEFAULT_PRIORITY", sql="priority"),
        _option("max_attempts", options.max_attempts, setting="MAX_ATTEMPTS", sql="max_attempts"),
        _option("timeout", options.timeout, setting="DEFAULT_TIMEOUT", sql="timeout_seconds"),
        # the worker applies PQJOBS["BACKOFF"] when an attempt fails, not at enqueue
        _option("backoff", _backoff),
        # a duplicate's answer: pqjobs_enqueue returns NULL for one, Python answers it
        _option("dedupe", options.dedupe, setting="DEDUPE"),
        _option(
            "dedupe_key",
            options.dedupe_key,
            read_at=(("task", _task_dedupe_key),),
            sql="dedupe_key",
        ),
        _option("unique_for", options.period, sql="unique_for"),
        _option("unique_states", options.unique_states, sql="unique_states"),
        _option("unique_by", options.unique_by),  # derives the dedupe_key
        _option("debounce", options.period),  # sets the delay; a duplicate pushes back
        _option("debounce_max", options.period),
        _option("expires_in", options.period, sql="expires_in"),
        _option("deadline", options.run_after, sql="expires_at"),
        # a sequence is rows beside the job's (composition.py), written after its insert
        _option("sequence", flow_key, read_at=(("type", key_template),)),
        _option("sequence_on_failure", options.sequence_on_failure, setting="SEQUENCE_ON_FAILURE"),
        _option(
            "fair_key",
            flow_key,
            read_at=(("type", key_template), ("task", _task_fair_key)),
            sql="fair_key",
        ),
        _option("atomic", _flag),
        _option("encrypted", _encrypted),
        _option("version", _version),  # goes in as the job's payload_version
        _option("upgrade", _upgrade),
        # the worker applies PQJOBS["ISOLATION"] when the type sets none
        _option("isolation", options.isolation),
        _option("memory_limit", options.memory_limit),
        # a type's flow control goes in as the job's concurrency_limit, rate_limit, ...
        _option("concurrency", options.concurrency_limit),
        _option(
            "concurrency_key", flow_key, read_at=(("type", key_template),), sql="concurrency_key"
        ),
        _option("max_waiting", options.concurrency_limit),
        _option("when_waiting_full", options.waiting_full),
        _option("rate", options.rate),
        _option("rate_key", key_template),
        _option("run_after", options.run_after, sql="run_at"),
        _option("delay", options.delay, sql="delay_seconds"),
        # dependencies are rows beside the job's (composition.py), written after its insert
        _option("depends_on", options.depends_on),
        _option("on_dependency_failure", options.dependency_policy),
    )
}

# The fields of pqjobs_job_spec (what pqjobs_enqueue() takes) no option gives: the job
# itself, and what Python derives for it (its type's flow control and payload version, its
# parent, its schedule, tracing), or a finished batch's callback (the batch it belongs to).
SQL_DERIVED = frozenset(
    {
        "job_type",
        "payload",
        "parent_id",
        "schedule_id",
        "notify_channel",
        "trace_context",
        "concurrency_limit",
        "rate_key",
        "rate_limit",
        "rate_period",
        "payload_version",
        "callback_of_id",
    }
)


def _place_names(place: Place) -> tuple[str, ...]:
    declared: Any = PLACES[place]  # a TypedDict class
    taken = declared.__optional_keys__ | declared.__required_keys__
    unread = sorted(taken - set(OPTIONS))
    if unread:  # a declaration error, met at import
        raise AssertionError(f"{PLACE_NAMES[place]} declares options with no reader: {unread}")
    return tuple(name for name in OPTIONS if name in taken)


@functools.cache
def names_at(place: Place) -> tuple[str, ...]:
    """The options that may be given at ``place`` (its TypedDict's keys), in the order of
    ``OPTIONS``."""
    return _place_names(place)


def check_names(place: Place, where: str, given: Mapping[str, Any]) -> None:
    """Refuse, by name, an option ``place`` does not take (a misspelt keyword): an
    :class:`~django_pqjobs.errors.UnknownJobOption`, a ``TypeError`` as Python's own for an
    unexpected keyword, and an :class:`~django_pqjobs.InvalidJobOption`."""
    known = names_at(place)
    if not given.keys() <= set(known):
        unknown = sorted(set(given) - set(known))
        raise UnknownJobOption(
            f"{where}: unknown option(s) {', '.join(unknown)}; {PLACE_NAMES[place]} takes: "
            f"{', '.join(known)}"
        )


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
    check_names(place, where, given)
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
