"""The one settings object. Every value is read when accessed, so ``override_settings`` works.

Precedence for each value: the ``PQJOBS`` dict in Django settings, then the matching
``WORKER_*`` environment variable (where one exists), then the documented default.
Command-line flags of ``run_jobs`` override all of these.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

from django.conf import settings

from .durations import to_seconds
from .policies import BackoffPolicy, DelaySequence, make_backoff, make_delays
from .schedules.timing import ScheduleSpec, specs_from_setting

DAY = 86400

DEFAULTS: dict[str, Any] = {
    "DATABASE": "default",
    "LISTEN_DATABASE": None,
    "QUEUES": None,
    "CONCURRENCY": 1,
    "ENABLED": True,
    "MAX_ATTEMPTS": 5,
    "DEFAULT_TIMEOUT": None,
    "DEFAULT_PRIORITY": 0,
    "DEFAULT_QUEUE": "default",
    "DEDUPE": "skip",
    "BACKOFF": "default",
    "POLL_INTERVALS": [1, 2, 5, 10],
    "LOOP_ERROR_DELAYS": [0.5, 1, 2, 5, 10],
    "LISTEN_NOTIFY": True,
    "SCHEDULES": [],
    "SCHEDULER_INTERVAL": 1,
    "SCHEDULE_MISFIRE_GRACE": 10,
    "HEARTBEAT_INTERVAL": 10,
    "STALE_TIMEOUT": 1200,
    "REAP_INTERVAL": 60,
    "SHUTDOWN_TIMEOUT": 30,
    "TIMEOUT_GRACE": 5,
    "PRUNE_INTERVAL": 3600,
    "RETENTION": {"done": 7 * DAY, "failed": 30 * DAY, "cancelled": 7 * DAY},
    "PAYLOAD_MAX_BYTES": 256 * 1024,
    "ISOLATION": "thread",
    "PREFETCH_MAX": 500,
    "HOOKS": {},
}

ENVIRONMENT = {
    "ENABLED": "WORKER_ENABLED",
    "CONCURRENCY": "WORKER_CONCURRENCY",
    "REAP_INTERVAL": "WORKER_REAP_INTERVAL",
    "STALE_TIMEOUT": "WORKER_STALE_TIMEOUT",
}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _env_value(key: str, raw: str) -> Any:
    text = raw.strip().lower()
    if key == "ENABLED":
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        return raw
    try:
        number = float(text)
    except ValueError:
        return raw
    return int(number) if number.is_integer() else number


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


class Settings:
    """Typed access to the ``PQJOBS`` settings dict. Use the module-level ``conf``.

    Every read looks at the current setting and environment; the validated value is reused
    while the raw value is unchanged, because the worker and ``enqueue_job`` read settings
    on every job and some validators (hook imports, schedules) are not cheap.
    """

    def __init__(self) -> None:
        self._validated: dict[str, tuple[Any, str, Any]] = {}

    def _lookup(self, key: str) -> tuple[Any, str]:
        user = getattr(settings, "PQJOBS", None) or {}
        if key in user:
            return user[key], f"PQJOBS[{key!r}]"
        env_name = ENVIRONMENT.get(key)
        if env_name and env_name in os.environ:
            return _env_value(key, os.environ[env_name]), f"environment variable {env_name}"
        return DEFAULTS[key], f"PQJOBS[{key!r}]"

    def raw(self, key: str) -> Any:
        """The configured value of ``key`` before validation (setting, env var, default)."""
        return self._lookup(key)[0]

    def source(self, key: str) -> str:
        """Where ``key`` came from, for error messages: ``PQJOBS['X']`` or the env var."""
        return self._lookup(key)[1]

    def _get(self, key: str) -> Any:
        raw, source = self._lookup(key)
        cached = self._validated.get(key)
        if cached is not None and cached[1] == source and _same(cached[0], raw):
            return cached[2]
        value = VALIDATORS[key](raw, source)
        self._validated[key] = (_snapshot(raw), source, value)
        return value

    @property
    def DATABASE(self) -> str:
        return str(self._get("DATABASE"))

    @property
    def LISTEN_DATABASE(self) -> str:
        value = self._get("LISTEN_DATABASE")
        return self.DATABASE if value is None else str(value)

    @property
    def QUEUES(self) -> list[str] | None:
        return self._get("QUEUES")

    @property
    def CONCURRENCY(self) -> int:
        return int(self._get("CONCURRENCY"))

    @property
    def ENABLED(self) -> bool:
        return bool(self._get("ENABLED"))

    @property
    def MAX_ATTEMPTS(self) -> int:
        return int(self._get("MAX_ATTEMPTS"))

    @property
    def DEFAULT_TIMEOUT(self) -> float | None:
        return self._get("DEFAULT_TIMEOUT")

    @property
    def DEFAULT_PRIORITY(self) -> int:
        return int(self._get("DEFAULT_PRIORITY"))

    @property
    def DEFAULT_QUEUE(self) -> str:
        return str(self._get("DEFAULT_QUEUE"))

    @property
    def DEDUPE(self) -> str:
        return str(self._get("DEDUPE"))

    @property
    def BACKOFF(self) -> BackoffPolicy:
        return self._get("BACKOFF")

    @property
    def POLL_INTERVALS(self) -> DelaySequence:
        return self._get("POLL_INTERVALS")

    @property
    def LOOP_ERROR_DELAYS(self) -> DelaySequence:
        return self._get("LOOP_ERROR_DELAYS")

    @property
    def LISTEN_NOTIFY(self) -> bool:
        return bool(self._get("LISTEN_NOTIFY"))

    @property
    def HEARTBEAT_INTERVAL(self) -> float:
        return float(self._get("HEARTBEAT_INTERVAL"))

    @property
    def STALE_TIMEOUT(self) -> float:
        return float(self._get("STALE_TIMEOUT"))

    @property
    def REAP_INTERVAL(self) -> float:
        return float(self._get("REAP_INTERVAL"))

    @property
    def SCHEDULES(self) -> list[ScheduleSpec]:
        return self._get("SCHEDULES")

    @property
    def SCHEDULER_INTERVAL(self) -> float | None:
        return self._get("SCHEDULER_INTERVAL")

    @property
    def SCHEDULE_MISFIRE_GRACE(self) -> float:
        return float(self._get("SCHEDULE_MISFIRE_GRACE"))

    @property
    def SHUTDOWN_TIMEOUT(self) -> float:
        return float(self._get("SHUTDOWN_TIMEOUT"))

    @property
    def TIMEOUT_GRACE(self) -> float:
        return float(self._get("TIMEOUT_GRACE"))

    @property
    def PRUNE_INTERVAL(self) -> float | None:
        return self._get("PRUNE_INTERVAL")

    @property
    def RETENTION(self) -> dict[str, float | None]:
        return self._get("RETENTION")

    @property
    def PAYLOAD_MAX_BYTES(self) -> int:
        return int(self._get("PAYLOAD_MAX_BYTES"))

    @property
    def PREFETCH_MAX(self) -> int:
        return int(self._get("PREFETCH_MAX"))

    @property
    def ISOLATION(self) -> str:
        return str(self._get("ISOLATION"))

    @property
    def HOOKS(self) -> dict[str, Callable[..., Any]]:
        return self._get("HOOKS")


# --- validators: (raw value, source name) -> normalised value, or ValueError ---------------


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where} must be a whole number of at least 1, got {value!r}")
    return value


def _non_negative_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where} must be a whole number of 0 or more, got {value!r}")
    return value


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where} must be a whole number, got {value!r}")
    return value


def _seconds(value: Any, where: str) -> float:
    return to_seconds(value, where, allow_zero=False)


def _optional_seconds(value: Any, where: str) -> float | None:
    return None if value is None else _seconds(value, where)


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} must be a non-empty string, got {value!r}")
    return value


def _optional_name(value: Any, where: str) -> str | None:
    return None if value is None else _name(value, where)


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{where} must be True or False, got {value!r}")
    return value


def _queues(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
        raise ValueError(f"{where} must be None (every queue) or a non-empty list of names")
    return [_name(q, f"{where} item") for q in value]


def _dedupe(value: Any, where: str) -> str:
    if value not in ("skip", "replace", "error"):
        raise ValueError(f"{where} must be 'skip', 'replace' or 'error', got {value!r}")
    return str(value)


def _schedules(value: Any, where: str) -> list[ScheduleSpec]:
    return specs_from_setting(value, where)  # ScheduleError is a ValueError


def _retention(value: Any, where: str) -> dict[str, float | None]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a dict with keys 'done', 'failed', 'cancelled'")
    unknown = set(value) - {"done", "failed", "cancelled"}
    if unknown:
        raise ValueError(f"{where} has unknown keys {sorted(unknown)}; use done/failed/cancelled")
    merged = {**DEFAULTS["RETENTION"], **value}
    return {k: _optional_seconds(v, f"{where}[{k!r}]") for k, v in merged.items()}


def _isolation(value: Any, where: str) -> str:
    if value not in ("thread", "process"):
        raise ValueError(f"{where} must be 'thread' or 'process', got {value!r}")
    return str(value)


HOOK_NAMES = ("pre_execute", "post_execute")


def _hooks(value: Any, where: str) -> dict[str, Callable[..., Any]]:
    from django.utils.module_loading import import_string

    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a dict with keys {HOOK_NAMES}")
    unknown = set(value) - set(HOOK_NAMES)
    if unknown:
        raise ValueError(f"{where} has unknown keys {sorted(unknown)}; use {HOOK_NAMES}")
    hooks: dict[str, Callable[..., Any]] = {}
    for name, target in value.items():
        if isinstance(target, str):
            try:
                target = import_string(target)
            except ImportError as exc:
                raise ValueError(f"{where}[{name!r}] cannot be imported: {exc}") from None
        if not callable(target):
            raise ValueError(f"{where}[{name!r}] must be a callable or its dotted path")
        hooks[name] = target
    return hooks


VALIDATORS: dict[str, Callable[[Any, str], Any]] = {
    "DATABASE": _name,
    "LISTEN_DATABASE": _optional_name,
    "QUEUES": _queues,
    "CONCURRENCY": _positive_int,
    "ENABLED": _bool,
    "MAX_ATTEMPTS": _positive_int,
    "DEFAULT_TIMEOUT": _optional_seconds,
    "DEFAULT_PRIORITY": _int,
    "DEFAULT_QUEUE": _name,
    "DEDUPE": _dedupe,
    "BACKOFF": lambda v, where: make_backoff(v, where),
    "POLL_INTERVALS": lambda v, where: make_delays(v, where),
    "LOOP_ERROR_DELAYS": lambda v, where: make_delays(v, where),
    "LISTEN_NOTIFY": _bool,
    "HEARTBEAT_INTERVAL": _seconds,
    "STALE_TIMEOUT": _seconds,
    "REAP_INTERVAL": _seconds,
    "SCHEDULES": _schedules,
    "SCHEDULER_INTERVAL": _optional_seconds,
    "SCHEDULE_MISFIRE_GRACE": lambda v, where: to_seconds(v, where),
    "SHUTDOWN_TIMEOUT": lambda v, where: to_seconds(v, where),
    "TIMEOUT_GRACE": _seconds,
    "PRUNE_INTERVAL": _optional_seconds,
    "RETENTION": _retention,
    "PAYLOAD_MAX_BYTES": _positive_int,
    "ISOLATION": _isolation,
    "PREFETCH_MAX": _non_negative_int,
    "HOOKS": _hooks,
}

# Stable system-check ids, one per setting (documented in docs/reference/settings.md).
CHECK_IDS: dict[str, str] = {
    "DATABASE": "pqjobs.E010",
    "LISTEN_DATABASE": "pqjobs.E011",
    "QUEUES": "pqjobs.E012",
    "CONCURRENCY": "pqjobs.E013",
    "ENABLED": "pqjobs.E014",
    "MAX_ATTEMPTS": "pqjobs.E015",
    "DEFAULT_TIMEOUT": "pqjobs.E016",
    "DEFAULT_PRIORITY": "pqjobs.E017",
    "DEFAULT_QUEUE": "pqjobs.E018",
    "DEDUPE": "pqjobs.E019",
    "BACKOFF": "pqjobs.E020",
    "POLL_INTERVALS": "pqjobs.E021",
    "LOOP_ERROR_DELAYS": "pqjobs.E022",
    "LISTEN_NOTIFY": "pqjobs.E023",
    "HEARTBEAT_INTERVAL": "pqjobs.E024",
    "STALE_TIMEOUT": "pqjobs.E025",
    "REAP_INTERVAL": "pqjobs.E026",
    "SCHEDULES": "pqjobs.E040",
    "SCHEDULER_INTERVAL": "pqjobs.E041",
    "SCHEDULE_MISFIRE_GRACE": "pqjobs.E042",
    "SHUTDOWN_TIMEOUT": "pqjobs.E027",
    "TIMEOUT_GRACE": "pqjobs.E028",
    "PRUNE_INTERVAL": "pqjobs.E029",
    "RETENTION": "pqjobs.E030",
    "PAYLOAD_MAX_BYTES": "pqjobs.E031",
    "ISOLATION": "pqjobs.E032",
    "PREFETCH_MAX": "pqjobs.E034",
    "HOOKS": "pqjobs.E033",
}

conf = Settings()
