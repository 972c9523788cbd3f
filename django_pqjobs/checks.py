"""System checks with stable ids. See docs/reference/settings.md for the list.

Registered by ``PQJobsConfig.ready()``; importing this module registers nothing.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.db import DatabaseError

from . import declarations
from .conf import Settings, conf
from .flow import known_queues
from .registry import Handler, registry
from .schema import open_schema_advice, writable_by_everyone


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every ``PQJOBS`` key (and ``WORKER_*`` variable) is valid; no unknown keys."""
    user = getattr(settings, "PQJOBS", None)
    if user is not None and not isinstance(user, dict):
        return [Error("PQJOBS must be a dict", id="pqjobs.E002", obj="settings.PQJOBS")]
    errors: list[CheckMessage] = [unknown_key_warning(key) for key in unknown_keys(user or {})]
    for setting in Settings.declarations():
        try:
            conf.value_of(setting)
        except (ValueError, TypeError) as exc:
            errors.append(Error(str(exc), id=setting.check_id, obj="settings.PQJOBS"))
    errors.extend(_check_databases())
    errors.extend(_check_per_queue_settings())
    return errors


def check_handlers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every registered handler can be called with the job's context as its one argument
    (and its typed arguments, if it declares them), so a wrong signature stops ``check``
    (and a worker's start), not each job."""
    errors: list[CheckMessage] = []
    for job_type in registry.all():
        handler = job_type.handler
        if job_type.encrypted:
            errors += _cannot_encrypt(job_type.name)
        problem = _refuses_the_context(handler, typed=job_type.arguments is not None)
        if problem is None:
            continue
        # a callable instance has no __qualname__ of its own
        name = getattr(handler, "__qualname__", type(handler).__qualname__)
        errors.append(
            Error(
                f"the handler of job type {job_type.name!r}, {name}{problem}",
                hint="A handler takes one positional argument, the JobContext: "
                "def handler(ctx): ...; it reads the job's data from ctx.job.payload. With "
                "typed arguments, a second: def handler(ctx, args: Receipt): ...",
                id="pqjobs.E091",
                obj=f"{handler.__module__}.{name}",
            )
        )
    return errors


def _cannot_encrypt(name: str) -> list[CheckMessage]:
    """An encrypted type's jobs cannot be enqueued without keys and cryptography."""
    problem = None
    try:
        keys = conf.ENCRYPTION_KEYS
    except ValueError:
        return []  # a bad value: check_settings reports it (pqjobs.E076)
    if not keys:
        problem = "PQJOBS['ENCRYPTION_KEYS'] is empty"
    else:
        try:
            import cryptography.fernet  # noqa: F401
        except ImportError:
            problem = "the cryptography package is not installed"
    if problem is None:
        return []
    return [
        Error(
            f"job type {name!r} is declared encrypted=True, but {problem}",
            hint='Install "django-pqjobs[encryption]" and set PQJOBS["ENCRYPTION_KEYS"] to '
            "a list of Fernet keys (cryptography.fernet.Fernet.generate_key()), the newest "
            "first.",
            id="pqjobs.E092",
            obj=name,
        )
    ]


def _refuses_the_context(handler: Handler, typed: bool = False) -> str | None:
    """Why ``handler(ctx)`` (``handler(ctx, args)`` when ``typed``) would raise TypeError
    before running (its signature first), or None."""
    try:
        # The signature of what the worker calls: a decorator's wrapper may take other
        # arguments than the function it wraps.
        signature = inspect.signature(handler, follow_wrapped=False)
    except (TypeError, ValueError):
        return None  # no signature to read (some builtins): nothing to say in advance
    try:
        signature.bind(*([object()] * (2 if typed else 1)))
    except TypeError as exc:
        taken = "and its typed arguments" if typed else "as its one argument"
        return f"{signature}, cannot take the job's context {taken}: {exc}"
    return None


def check_database(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """The job tables' schema is not writable by every role, and the database knows every
    encrypted job type (run with ``--database``, and by ``migrate``)."""
    alias = conf.raw("DATABASE")
    if not databases or alias not in databases or alias not in settings.DATABASES:
        return []
    try:
        schema = writable_by_everyone(alias)
        stale = declarations.unpublished(alias)
    except DatabaseError:  # unreachable, or not PostgreSQL: said by other checks and errors
        return []
    found: list[CheckMessage] = []
    if schema is not None:
        found.append(
            Warning(
                open_schema_advice(schema),
                hint="See docs/guides/reliability.md, the trust boundary.",
                id="pqjobs.W090",
                obj=f"settings.DATABASES[{alias!r}]",
            )
        )
    found += [
        Warning(
            f"job type {name!r} is declared encrypted, but the database does not know it as "
            "declared (pqjobs_protected_type): pqjobs_enqueue() would store a payload of it "
            "from SQL in clear until manage.py migrate publishes it",
            hint="Run manage.py migrate (it publishes the encrypted job types even when no "
            "migration is new).",
            id="pqjobs.W093",
            obj=name,
        )
        for name in stale
    ]
    return found


# Settings per queue: a queue no job goes to is most likely a typo.
_PER_QUEUE = (
    ("QUEUE_RATES", "limits", "pqjobs.W050"),
    ("FAIR_QUEUES", "gives a fair key to", "pqjobs.W051"),
)


def _check_per_queue_settings() -> list[CheckMessage]:
    """A rate or a fair key for a queue no job goes to is most likely a typo."""
    try:
        known = known_queues()
    except ValueError:
        return []  # reported by the settings' own checks
    found: list[CheckMessage] = []
    for name, verb, check in _PER_QUEUE:
        try:
            per_queue = getattr(conf, name)
        except ValueError:
            continue  # reported by the setting's own check
        found += [
            Warning(
                f"PQJOBS[{name!r}] {verb} the queue {queue!r}, which no job type, schedule, "
                "DEFAULT_QUEUE, QUEUES or TASKS backend names",
                hint=f"Known queues: {', '.join(sorted(known))}. Jobs enqueued with "
                f"queue={queue!r} would still follow it.",
                id=check,
                obj="settings.PQJOBS",
            )
            for queue in sorted(set(per_queue) - known)
        ]
    return found


def unknown_keys(user: dict[Any, Any]) -> list[Any]:
    known = {setting.name for setting in Settings.declarations()}
    return sorted((key for key in user if key not in known), key=str)


def unknown_key_warning(key: Any) -> Warning:
    known = sorted(setting.name for setting in Settings.declarations())
    message = f"PQJOBS has an unknown key {key!r}"
    if isinstance(key, str):
        close = difflib.get_close_matches(key.upper(), known, n=1)
        if close:
            message += f"; did you mean {close[0]!r}?"
    return Warning(
        message, hint=f"Known keys: {', '.join(known)}", id="pqjobs.W001", obj="settings.PQJOBS"
    )


def _check_databases() -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    aliases = {("DATABASE", conf.raw("DATABASE"))}
    for key in ("LISTEN_DATABASE", "READ_DATABASE"):
        if conf.raw(key) is not None:
            aliases.add((key, conf.raw(key)))
    for key, alias in sorted(aliases, key=str):
        if not isinstance(alias, str):
            continue
        if alias not in settings.DATABASES:
            errors.append(
                Error(
                    f"PQJOBS[{key!r}] names the database alias {alias!r}, which is not in "
                    "DATABASES",
                    id="pqjobs.E003",
                    obj="settings.PQJOBS",
                )
            )
            continue
        engine = settings.DATABASES[alias].get("ENGINE", "")
        if engine != "django.db.backends.postgresql" and "postgresql" not in engine.lower():
            errors.append(
                Error(
                    f"django-pqjobs needs PostgreSQL, but database {alias!r} uses {engine!r}",
                    hint=f"Make DATABASES[{alias!r}] a PostgreSQL database (13 or newer, ENGINE "
                    f"'django.db.backends.postgresql'), or point PQJOBS[{key!r}] at one.",
                    id="pqjobs.E001",
                    obj=f"settings.DATABASES[{alias!r}]",
                )
            )
    return errors
