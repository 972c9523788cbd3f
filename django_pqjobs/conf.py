"""The one settings object. Every value is read when accessed, so ``override_settings`` works.

Precedence for each value: the ``PQJOBS`` dict in Django settings, then the matching
``WORKER_*`` environment variable (where one exists), then the documented default.
Command-line flags of ``run_jobs`` override all of these.

Each setting is declared once, as a :class:`Setting` attribute of :class:`Settings`: its
default, validator, system-check id, environment variable and meaning. The system checks,
the unknown-key warning and the reference docs all work from these declarations.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from django.conf import settings

from . import options
from .durations import in_words, to_seconds
from .keys import KeyTemplate, key_template
from .policies import make_backoff, make_delays
from .recurrence import specs_from_setting

T = TypeVar("T")

DAY = 86400

Validator = Callable[[Any, str], T]
"""``(raw value, where it came from) -> normalised value``; raises ValueError naming ``where``."""


# --- environment variables: text -> the value a PQJOBS key would hold ---------------------

ENV_TRUE = ("true", "1", "yes", "on")
ENV_FALSE = ("false", "0", "no", "off")


def env_bool(text: str, where: str) -> bool:
    """``true/false/1/0/yes/no/on/off`` in any case; anything else is a clear error.

    A variable that is set but empty counts as false (``WORKER_ENABLED=`` in a compose file).
    """
    word = text.strip().lower()
    if word in ENV_TRUE:
        return True
    if word in ENV_FALSE or not word:
        return False
    accepted = "/".join(v for pair in zip(ENV_TRUE, ENV_FALSE, strict=True) for v in pair)
    raise ValueError(f"{where} must be one of {accepted} (any case), got {text!r}")


def env_number(text: str, where: str) -> Any:
    """A number (int when whole); other text is returned for the validator to refuse."""
    try:
        number = float(text.strip())
    except ValueError:
        return text
    return int(number) if number.is_integer() else number


# --- the declaration ------------------------------------------------------------------------


class Setting(Generic[T]):
    """One ``PQJOBS`` key. As a class attribute of :class:`Settings` it reads as its value.

    - ``default``: the value when neither ``PQJOBS`` nor the environment sets one;
    - ``validate``: turns the raw value into the typed one, or raises ValueError;
    - ``check``: the stable system-check id reported when ``validate`` refuses the value;
    - ``meaning``: one line for humans (the reference docs say more);
    - ``env`` / ``from_env``: the environment variable, and how its text becomes a value;
    - ``fallback``: the setting whose value a ``None`` value stands for.

    The key is the attribute name the declaration is assigned to.
    """

    name: str

    @overload
    def __init__(
        self,
        default: Any,
        validate: Validator[T],
        *,
        check: str,
        meaning: str,
        env: str | None = None,
        from_env: Callable[[str, str], Any] = env_number,
    ) -> None: ...

    @overload
    def __init__(
        self,
        default: Any,
        validate: Validator[T | None],
        *,
        check: str,
        meaning: str,
        env: str | None = None,
        from_env: Callable[[str, str], Any] = env_number,
        fallback: Setting[T],
    ) -> None: ...

    def __init__(
        self,
        default: Any,
        validate: Validator[Any],
        *,
        check: str,
        meaning: str,
        env: str | None = None,
        from_env: Callable[[str, str], Any] = env_number,
        fallback: Setting[Any] | None = None,
    ) -> None:
        self.default = default
        self.validate = validate
        self.check_id = check
        self.meaning = meaning
        self.env = env
        self.from_env = from_env
        self.fallback = fallback

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<Setting PQJOBS[{self.name!r}]>"

    @overload
    def __get__(self, instance: None, owner: type) -> Setting[T]: ...

    @overload
    def __get__(self, instance: Settings, owner: type) -> T: ...

    def __get__(self, instance: Settings | None, owner: type) -> Setting[T] | T:
        if instance is None:
            return self
        value: T = instance.value_of(self)
        if value is None and self.fallback is not None:
            return self.fallback.__get__(instance, owner)
        return value


# --- validators: (raw value, source name) -> normalised value, or ValueError ---------------


def positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where} must be a whole number of at least 1, got {value!r}")
    return value


def non_negative_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where} must be a whole number of 0 or more, got {value!r}")
    return value


def positive_seconds(value: Any, where: str) -> float:
    return to_seconds(value, where, allow_zero=False)


def optional_positive_seconds(value: Any, where: str) -> float | None:
    return None if value is None else positive_seconds(value, where)


def non_empty_string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} must be a non-empty string, got {value!r}")
    return value


def optional_non_empty_string(value: Any, where: str) -> str | None:
    return None if value is None else non_empty_string(value, where)


def boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{where} must be True or False, got {value!r}")
    return value


def queue_names(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
        raise ValueError(f"{where} must be None (every queue) or a non-empty list of names")
    return [options.queue_name(q, f"{where} item") for q in value]


def queue_rates(value: Any, where: str) -> dict[str, options.Rate]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a dict of queue name -> rate such as '100/m'")
    return {
        options.queue_name(queue, f"{where} key"): options.rate(spec, f"{where}[{queue!r}]")
        for queue, spec in value.items()
    }


def fair_queues(value: Any, where: str) -> dict[str, KeyTemplate]:
    """``{queue: fair key}``: each queue a valid name, each key a template filled from the
    payload (``"tenant:{tenant_id}"``) or a callable, as ``@job(fair_key=...)`` takes."""
    if not isinstance(value, dict):
        raise ValueError(
            f"{where} must be a dict of queue name -> fair key template such as "
            f"'tenant:{{tenant_id}}', got {value!r:.120}"
        )
    return {
        options.queue_name(queue, f"{where} key"): key_template(template, f"{where}[{queue!r}]")
        for queue, template in value.items()
    }


@dataclass(frozen=True)
class Aging:
    """Priority aging of one queue: a due ``ready`` job's priority rises by 1 for each
    ``every`` seconds it waits, up to ``up_to`` (``PQJOBS["PRIORITY_AGING"]``)."""

    every: float
    up_to: int

    def __str__(self) -> str:
        return f"+1 every {in_words(self.every, short=True)}, up to {self.up_to}"


AGING_KEYS = ("every", "up_to")


def priority_aging(value: Any, where: str) -> dict[str, Aging]:
    """``{queue: {"every": duration, "up_to": priority}}``: each queue a valid name, each
    ``every`` a duration of more than zero (seconds, a ``timedelta`` or ``"5m"``), each
    ``up_to`` a priority (a whole number or a ``Priority``)."""
    if not isinstance(value, dict):
        raise ValueError(
            f"{where} must be a dict of queue name -> {{'every': '1m', 'up_to': 10}}, got "
            f"{value!r:.120}"
        )
    found: dict[str, Aging] = {}
    for queue, spec in value.items():
        options.queue_name(queue, f"{where} key")
        here = f"{where}[{queue!r}]"
        if not isinstance(spec, dict):
            raise ValueError(
                f"{here} must be a dict such as {{'every': '1m', 'up_to': 10}}, got {spec!r:.120}"
            )
        unknown = sorted(set(spec) - set(AGING_KEYS), key=str)
        missing = [key for key in AGING_KEYS if key not in spec]
        if unknown or missing:
            problems = [f"unknown keys {unknown}"] if unknown else []
            problems += [f"no {key!r}" for key in missing]
            raise ValueError(f"{here} has {' and '.join(problems)}; it takes 'every' and 'up_to'")
        found[queue] = Aging(
            every=options.period(spec["every"], f"{here}['every']"),
            up_to=options.priority(spec["up_to"], f"{here}['up_to']"),
        )
    return found


def optional_timeout(value: Any, where: str) -> float | None:
    return None if value is None else options.timeout(value, where)


def optional_permission(value: Any, where: str) -> str | None:
    """None, or a permission as ``user.has_perm()`` takes it: ``"app_label.codename"``."""
    if value is None:
        return None
    app_label, dot, codename = value.partition(".") if isinstance(value, str) else ("", "", "")
    if not dot or not app_label.strip() or not codename.strip() or "." in codename:
        raise ValueError(
            f"{where} must be None or a permission such as 'django_pqjobs.change_job' "
            f"(app_label.codename), got {value!r}"
        )
    return value


def redacted_fields(value: Any, where: str) -> tuple[str, ...]:
    """The names of secret fields: ``"default"`` (``redaction.DEFAULT_FIELDS``) or a list of
    names (``[]``: redact nothing)."""
    if value == "default":
        return options.DEFAULT_REDACTED_FIELDS
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(
            f"{where} must be 'default' or a list of field names such as ['password', "
            f"'token'], got {value!r:.120}"
        )
    for n, name in enumerate(value):
        if not isinstance(name, str) or not options.field_words(name):
            raise ValueError(
                f"{where}[{n}] must be a field name with at least one letter or digit, got "
                f"{name!r:.120}"
            )
    return tuple(value)


# RFC 6750's b64token: what an ``Authorization: Bearer`` header can carry as it is.
_BEARER_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")
BEARER_TOKEN_MIN_LENGTH = 32


def optional_bearer_token(value: Any, where: str) -> str | None:
    """None, or a token long enough not to be guessed that a header can carry.

    The messages describe the value without repeating it: it is a secret, and check
    messages end up in logs.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{where} must be None or a string, got a {type(value).__name__}")
    hint = "e.g. the output of python -c 'import secrets; print(secrets.token_urlsafe(32))'"
    if len(value) < BEARER_TOKEN_MIN_LENGTH:
        raise ValueError(
            f"{where} must be at least {BEARER_TOKEN_MIN_LENGTH} characters long, got "
            f"{len(value)} ({hint})"
        )
    if not _BEARER_TOKEN.fullmatch(value):
        raise ValueError(
            f"{where} may hold only letters, digits and - . _ ~ + / (then = padding), "
            f"the characters a bearer token is sent with; it has others, such as "
            f"whitespace ({hint})"
        )
    return value


def fernet_keys(value: Any, where: str) -> tuple[str, ...]:
    """Fernet keys, the newest first: each 32 bytes in URL-safe base64 (what
    ``Fernet.generate_key()`` gives). Checked without importing ``cryptography``."""
    import base64
    import binascii

    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(f"{where} must be a list of Fernet keys (the newest first)")
    keys = []
    for n, key in enumerate(value):
        try:
            raw = base64.urlsafe_b64decode(key.encode("ascii")) if isinstance(key, str) else b""
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raw = b""
        if len(raw) != 32:
            raise ValueError(
                f"{where}[{n}] is not a Fernet key (32 bytes in URL-safe base64, as "
                "cryptography.fernet.Fernet.generate_key() makes)"
            )
        keys.append(key)
    return tuple(keys)


DEFAULT_RETENTION = {"done": 7 * DAY, "failed": 30 * DAY, "cancelled": 7 * DAY, "expired": 7 * DAY}


def retention_periods(value: Any, where: str) -> dict[str, float | None]:
    if not isinstance(value, dict):
        raise ValueError(
            f"{where} must be a dict with keys 'done', 'failed', 'cancelled', 'expired'"
        )
    unknown = set(value) - set(DEFAULT_RETENTION)
    if unknown:
        raise ValueError(
            f"{where} has unknown keys {sorted(unknown)}; use done/failed/cancelled/expired"
        )
    merged = {**DEFAULT_RETENTION, **value}
    return {k: optional_positive_seconds(v, f"{where}[{k!r}]") for k, v in merged.items()}


HOOK_NAMES = ("pre_execute", "post_execute")


def hook_callables(value: Any, where: str) -> dict[str, Callable[..., Any]]:
    from django.utils.module_loading import import_string

    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a dict with keys {HOOK_NAMES}")
    unknown = set(value) - set(HOOK_NAMES)
    if unknown:
        raise ValueError(f"{where} has unknown keys {sorted(unknown)}; use {HOOK_NAMES}")
    found: dict[str, Callable[..., Any]] = {}
    for hook, target in value.items():
        if isinstance(target, str):
            try:
                target = import_string(target)
            except ImportError as exc:
                raise ValueError(f"{where}[{hook!r}] cannot be imported: {exc}") from None
        if not callable(target):
            raise ValueError(f"{where}[{hook!r}] must be a callable or its dotted path")
        found[hook] = target
    return found


# --- the validated-value cache -------------------------------------------------------------

_UNCACHEABLE = object()


def _snapshot(value: Any) -> Any:
    """A copy to compare later reads against (a dict edited in place must not hit)."""
    try:
        return copy.deepcopy(value)
    except Exception:
        return _UNCACHEABLE


def _same(snapshot: Any, value: Any) -> bool:
    if snapshot is _UNCACHEABLE or type(snapshot) is not type(value):
        return False
    try:
        return bool(snapshot == value)
    except Exception:
        return False


# --- the settings ----------------------------------------------------------------------------


class Settings:
    """Typed access to the ``PQJOBS`` settings dict. Use the module-level ``conf``.

    Every read looks at the current setting and environment; the validated value is reused
    while the raw value is unchanged, because the worker and ``enqueue_job`` read settings
    on every job and some validators (hook imports, schedules) are not cheap.
    """

    DATABASE = Setting(
        "default",
        non_empty_string,
        check="pqjobs.E010",
        meaning="Database alias of the job tables.",
    )
    LISTEN_DATABASE = Setting(
        None,
        optional_non_empty_string,
        fallback=DATABASE,
        check="pqjobs.E011",
        meaning="Database alias of the LISTEN connection (None: DATABASE).",
    )
    READ_DATABASE = Setting(
        None,
        optional_non_empty_string,
        fallback=DATABASE,
        check="pqjobs.E037",
        meaning="Database alias (a replica of DATABASE) that the admin's job, batch and audit "
        "lists, the dashboard and the metrics view read (None: DATABASE). Nothing that "
        "changes a job reads it.",
    )
    QUEUES = Setting(
        None,
        queue_names,
        check="pqjobs.E012",
        meaning="Queues a worker takes jobs from when run_jobs gets no --queue (None: all).",
    )
    CONCURRENCY = Setting(
        1,
        positive_int,
        env="WORKER_CONCURRENCY",
        check="pqjobs.E013",
        meaning="Executor threads per worker.",
    )
    ENABLED = Setting(
        True,
        boolean,
        env="WORKER_ENABLED",
        from_env=env_bool,
        check="pqjobs.E014",
        meaning="False: run_jobs exits at once and the embedded worker starts nothing.",
    )
    MAX_ATTEMPTS = Setting(
        5,
        options.max_attempts,
        check="pqjobs.E015",
        meaning="Attempts per job unless the job says.",
    )
    DEFAULT_TIMEOUT = Setting(
        None,
        optional_timeout,
        check="pqjobs.E016",
        meaning="Timeout of jobs that set none (None: no timeout).",
    )
    DEFAULT_PRIORITY = Setting(
        0, options.priority, check="pqjobs.E017", meaning="Priority of jobs that set none."
    )
    DEFAULT_QUEUE = Setting(
        "default",
        options.queue_name,
        check="pqjobs.E018",
        meaning="Queue of jobs that set none.",
    )
    DEDUPE = Setting(
        "skip",
        options.dedupe,
        check="pqjobs.E019",
        meaning="Strategy on a duplicate dedupe_key: skip, replace or error.",
    )
    ENCRYPTION_KEYS = Setting(
        (),
        fernet_keys,
        check="pqjobs.E076",
        meaning="Fernet keys for job types declared encrypted=True, the newest first (it "
        "encrypts; any opens).",
    )
    ACCEPT_UNBOUND_ENVELOPES = Setting(
        True,
        boolean,
        check="pqjobs.E094",
        meaning="Open envelopes sealed before they were bound to their job type (with a "
        "warning once per type); False refuses them (fail their jobs).",
    )
    SEQUENCE_ON_FAILURE = Setting(
        "halt",
        options.sequence_on_failure,
        check="pqjobs.E075",
        meaning="What a sequence does when one of its jobs fails for good: halt (the rest "
        "wait for an operator's Retry or Skip) or continue.",
    )
    BACKOFF = Setting(
        "default", make_backoff, check="pqjobs.E020", meaning="Delays between retries."
    )
    POLL_INTERVALS = Setting(
        [1, 2, 5, 10],
        make_delays,
        check="pqjobs.E021",
        meaning="Idle-poll delays after 1, 2, 3, 4+ empty claims.",
    )
    LOOP_ERROR_DELAYS = Setting(
        [0.5, 1, 2, 5, 10],
        make_delays,
        check="pqjobs.E022",
        meaning="Waits after consecutive infrastructure errors.",
    )
    CONNECTION_LOSS_LIMIT = Setting(
        3,
        positive_int,
        check="pqjobs.E035",
        meaning="The n-th time in a row an attempt's handler fails because its database "
        "connection died, the attempt is charged like any failure; the times before, it is "
        "given back uncharged (1: always charged).",
    )
    SNOOZE_LIMIT = Setting(
        100,
        positive_int,
        check="pqjobs.E036",
        meaning="How many times in a row a job may snooze (raise Snooze) without its attempt "
        "counting; the snooze after that fails it for good (error type SnoozeLimit).",
    )
    LISTEN_NOTIFY = Setting(
        True,
        boolean,
        check="pqjobs.E023",
        meaning="NOTIFY on enqueue and LISTEN in workers (False: polling only).",
    )
    HEARTBEAT_INTERVAL = Setting(
        10,
        positive_seconds,
        check="pqjobs.E024",
        meaning="How often a worker records that it and its jobs are alive.",
    )
    STALE_TIMEOUT = Setting(
        1200,
        positive_seconds,
        env="WORKER_STALE_TIMEOUT",
        check="pqjobs.E025",
        meaning="Heartbeat age after which a running job is rescued.",
    )
    REAP_INTERVAL = Setting(
        60,
        positive_seconds,
        env="WORKER_REAP_INTERVAL",
        check="pqjobs.E026",
        meaning="How often each worker looks for stale jobs.",
    )
    RECONCILE_INTERVAL = Setting(
        30,
        optional_positive_seconds,
        check="pqjobs.E077",
        meaning="How often a worker gives back the jobs marked running as its own that it is "
        "not running (lost after a failover); also within a second of a reconnect "
        "(None: only then).",
    )
    SHUTDOWN_TIMEOUT = Setting(
        30,
        to_seconds,
        check="pqjobs.E027",
        meaning="Grace period for running jobs after SIGTERM/SIGINT.",
    )
    TIMEOUT_GRACE = Setting(
        5,
        positive_seconds,
        check="pqjobs.E028",
        meaning="Wait after interrupting a timed-out thread job before abandoning its thread.",
    )
    PRUNE_INTERVAL = Setting(
        3600,
        optional_positive_seconds,
        check="pqjobs.E029",
        meaning="How often a worker prunes finished jobs (None: never).",
    )
    RETENTION = Setting(
        DEFAULT_RETENTION,
        retention_periods,
        check="pqjobs.E030",
        meaning="Age after which done / failed / cancelled jobs are deleted (None: never).",
    )
    HISTORY_AFTER = Setting(
        600,
        optional_positive_seconds,
        check="pqjobs.E038",
        meaning="Age after which a finished job leaves the hot table for its history "
        "partition (None: never).",
    )
    PAYLOAD_MAX_BYTES = Setting(
        256 * 1024,
        positive_int,
        check="pqjobs.E031",
        meaning="Largest serialised payload enqueue_job accepts.",
    )
    QUEUE_RATES = Setting(
        {},
        queue_rates,
        check="pqjobs.E051",
        meaning="Rate limits per queue, e.g. {'emails': '100/m'}.",
    )
    FLOW_SWEEP_INTERVAL = Setting(
        0.5,
        positive_seconds,
        check="pqjobs.E052",
        meaning="How often workers release jobs blocked by a rate limit into a new window, "
        "and jobs blocked by a concurrency limit whose key has room.",
    )
    FAIR_QUEUES = Setting(
        {},
        fair_queues,
        check="pqjobs.E054",
        meaning="Per queue, the fair key of the jobs enqueued to it whose call and job type "
        "give none: {'imports': 'tenant:{tenant_id}'} (fair claiming; {}: none).",
    )
    PRIORITY_AGING = Setting(
        {},
        priority_aging,
        check="pqjobs.E053",
        meaning="Per queue, the priority of a due ready job rises by 1 for each 'every' it "
        "waits, up to 'up_to': {'reports': {'every': '1m', 'up_to': 10}} ({}: no aging).",
    )
    RESULT_MAX_BYTES = Setting(
        1024 * 1024,
        positive_int,
        check="pqjobs.E050",
        meaning="Largest serialised result a job may store; a larger one fails the job.",
    )
    ISOLATION = Setting(
        "thread",
        options.isolation,
        check="pqjobs.E032",
        meaning="Default execution mode of a worker: thread or process.",
    )
    HOOKS = Setting(
        {},
        hook_callables,
        check="pqjobs.E033",
        meaning="pre_execute / post_execute callables (or dotted paths).",
    )
    PREFETCH_MAX = Setting(
        500,
        non_negative_int,
        check="pqjobs.E034",
        meaning="Most jobs a worker claims beyond its free executors.",
    )
    LOG_SUCCESSES = Setting(
        False,
        boolean,
        check="pqjobs.E070",
        meaning="Log a line for every job that succeeds (run_jobs -v 2 turns it on).",
    )
    LOG_SUMMARY_INTERVAL = Setting(
        60,
        optional_positive_seconds,
        check="pqjobs.E071",
        meaning="How often a worker logs what it did since its last summary (None: never).",
    )
    STATS_INTERVAL = Setting(
        10,
        optional_positive_seconds,
        check="pqjobs.E072",
        meaning="How often a worker adds its outcome counts to the stats tables (None: never).",
    )
    METRICS_TOKEN = Setting(
        None,
        optional_bearer_token,
        check="pqjobs.E073",
        meaning="Bearer token that opens the metrics view and the health view's details "
        "(None: staff users only).",
    )
    METRICS_PUBLIC = Setting(
        False,
        boolean,
        check="pqjobs.E074",
        meaning="True: the metrics view answers anyone, without a token or a staff login.",
    )
    SCHEDULES = Setting(
        [],
        specs_from_setting,
        check="pqjobs.E040",
        meaning="Recurring jobs declared in settings.",
    )
    SCHEDULER_INTERVAL = Setting(
        1,
        optional_positive_seconds,
        check="pqjobs.E041",
        meaning="How often each worker fires due schedules (None: never).",
    )
    SCHEDULE_MISFIRE_GRACE = Setting(
        10,
        to_seconds,
        check="pqjobs.E042",
        meaning="Lateness after which a tick counts as missed.",
    )
    ADMIN_DATA_PERMISSION = Setting(
        None,
        optional_permission,
        check="pqjobs.E060",
        meaning="Permission needed to see payloads, results, errors and tracebacks in the "
        "admin (None: whoever may view jobs).",
    )
    ADMIN_SECRETS_PERMISSION = Setting(
        "django_pqjobs.view_job_secrets",
        optional_permission,
        check="pqjobs.E063",
        meaning="Permission needed to see secret fields (REDACTED_FIELDS) and encrypted "
        "payloads and results in the clear in the admin (None: whoever sees job data).",
    )
    REDACTED_FIELDS = Setting(
        "default",
        redacted_fields,
        check="pqjobs.E064",
        meaning="Names of payload, result and progress fields holding secrets, masked for "
        "staff without ADMIN_SECRETS_PERMISSION ('default': common secrets; [] none).",
    )
    AUDIT_RETENTION = Setting(
        365 * DAY,
        optional_positive_seconds,
        check="pqjobs.E061",
        meaning="Age after which the audit trail of operator actions is deleted (None: never).",
    )
    ALLOW_UNKNOWN_JOB_TYPES = Setting(
        False,
        boolean,
        check="pqjobs.E062",
        meaning="True: enqueue job types no handler is registered for in this process "
        "(their handlers live in the workers' code only).",
    )

    def __init__(self) -> None:
        self._validated: dict[str, tuple[Any, str, Any]] = {}

    @classmethod
    def declarations(cls) -> Iterator[Setting[Any]]:
        """Every declared setting, in declaration order."""
        for value in vars(cls).values():
            if isinstance(value, Setting):
                yield value

    @classmethod
    def declaration(cls, key: str) -> Setting[Any]:
        """The declaration of ``key``; KeyError if there is no such setting."""
        found = vars(cls).get(key)
        if not isinstance(found, Setting):
            raise KeyError(key)
        return found

    def _lookup(self, setting: Setting[Any]) -> tuple[Any, str, bool]:
        """``(raw value, where it came from, whether it is environment text)``."""
        user = getattr(settings, "PQJOBS", None) or {}
        if setting.name in user:
            return user[setting.name], f"PQJOBS[{setting.name!r}]", False
        if setting.env and setting.env in os.environ:
            return os.environ[setting.env], f"environment variable {setting.env}", True
        return setting.default, f"PQJOBS[{setting.name!r}]", False

    def raw(self, key: str) -> Any:
        """The configured value of ``key`` before validation: the ``PQJOBS`` value, the
        environment variable's text, or the default."""
        return self._lookup(self.declaration(key))[0]

    def value_of(self, setting: Setting[T]) -> T:
        """The validated value of ``setting``; ValueError naming its source if invalid."""
        raw, source, from_env = self._lookup(setting)
        cached = self._validated.get(setting.name)
        if cached is not None and cached[1] == source and _same(cached[0], raw):
            return cached[2]
        parsed = setting.from_env(raw, source) if from_env else raw
        value = setting.validate(parsed, source)
        self._validated[setting.name] = (_snapshot(raw), source, value)
        return value


conf = Settings()
