"""System checks with stable ids. See docs/reference/settings.md for the list."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from .conf import CHECK_IDS, DEFAULTS, VALIDATORS, conf
from .schedules import checks as _schedule_checks  # noqa: F401 - registers them


# Not tagged 'database': these checks read settings only, and Django 6 runs database-tagged
# checks only with `check --database`, which would hide a non-PostgreSQL engine.
@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    user = getattr(settings, "PQJOBS", None)
    if user is not None and not isinstance(user, dict):
        return [Error("PQJOBS must be a dict", id="pqjobs.E002", obj="settings.PQJOBS")]
    for key in sorted(set(user or {}) - set(DEFAULTS)):
        errors.append(
            Warning(
                f"PQJOBS has an unknown key {key!r}",
                hint=f"Known keys: {', '.join(sorted(DEFAULTS))}",
                id="pqjobs.W001",
                obj="settings.PQJOBS",
            )
        )
    for key, validator in VALIDATORS.items():
        try:
            validator(conf.raw(key), conf.source(key))
        except (ValueError, TypeError) as exc:
            errors.append(Error(str(exc), id=CHECK_IDS[key], obj="settings.PQJOBS"))
    errors.extend(_check_databases())
    return errors


def _check_databases() -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    aliases = {("DATABASE", conf.raw("DATABASE"))}
    if conf.raw("LISTEN_DATABASE") is not None:
        aliases.add(("LISTEN_DATABASE", conf.raw("LISTEN_DATABASE")))
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
                    hint="Point PQJOBS['DATABASE'] at a PostgreSQL database (13 or newer).",
                    id="pqjobs.E001",
                    obj=f"settings.DATABASES[{alias!r}]",
                )
            )
    return errors
