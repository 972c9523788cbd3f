"""When recurring jobs run: schedule declarations, their validation, and run times.

Pure logic, used by ``@job(cron=...)``, the ``SCHEDULES`` setting, the scheduler and the
admin alike.

No database access here, so every rule (cron fields, intervals, time zones, DST) can be
unit-tested on its own. All instants going in and out are timezone-aware.

DST rules for cron schedules (their fields match the *wall-clock* time in ``timezone``):

- a wall-clock time that does not exist (spring forward, e.g. 02:30 in Europe/Berlin on
  the last Sunday of March) runs at the moment the clocks jump, i.e. 03:00 local time;
- a wall-clock time that exists twice (fall back) runs once, at its first occurrence.
  Expressions that fire every few minutes therefore pause during the repeated hour: use an
  interval schedule (or ``timezone="UTC"``) when real-time spacing matters.

Interval schedules ignore the time zone: each run is exactly ``interval`` seconds after the
previous *scheduled* run (no drift), however late the previous run was enqueued.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterError, croniter

from . import options
from .errors import PayloadError
from .serialization import from_json, to_json

OVERLAP_POLICIES = ("skip", "allow")
MISFIRE_POLICIES = ("run_once", "skip")
CRON_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# A wall-clock scan never needs more steps than this (a 1-second expression across a
# repeated hour takes 3600); it bounds the loop should an expression misbehave.
_MAX_STEPS = 20_000


class ScheduleError(ValueError):
    """A schedule definition is invalid; the message says what and how to fix it."""


def validate_cron(expression: object) -> str:
    """Return the normalised expression, or raise :class:`ScheduleError`.

    Five fields (minute hour day-of-month month day-of-week), or six where the sixth is the
    second (croniter's convention: ``"* * * * * */10"`` runs every 10 seconds), or one of
    the aliases ``@hourly``, ``@daily``, ``@weekly``, ``@monthly``, ``@yearly``.
    """
    if not isinstance(expression, str) or not expression.strip():
        raise ScheduleError(f"cron must be a non-empty string, got {expression!r}")
    text = " ".join(expression.split())
    if text.startswith("@"):
        if text.lower() not in CRON_ALIASES:
            raise ScheduleError(
                f"cron {expression!r} is not valid: known aliases are {', '.join(CRON_ALIASES)}"
            )
        return text.lower()
    fields = text.split(" ")
    if len(fields) not in (5, 6):
        raise ScheduleError(
            f"cron {expression!r} has {len(fields)} fields; use 5 (minute hour day month "
            "weekday) or 6 (the sixth is seconds)"
        )
    try:
        croniter(text, datetime(2000, 1, 1)).get_next(datetime)
    except CroniterBadDateError:
        raise ScheduleError(f"cron {expression!r} never matches a real date") from None
    except (CroniterBadCronError, CroniterError, ValueError, KeyError) as exc:
        raise ScheduleError(f"cron {expression!r} is not valid: {exc}") from None
    return text


def validate_timezone(name: object) -> str:
    """Return ``name`` if it is an IANA time zone name (``"Europe/Berlin"``, ``"UTC"``)."""
    if not isinstance(name, str) or not name.strip():
        raise ScheduleError(f"timezone must be an IANA time zone name, got {name!r}")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"timezone {name!r} is not a known IANA time zone name (e.g. 'UTC', "
            "'Europe/Berlin', 'America/New_York')"
        ) from None
    return name


def validate_interval(value: object) -> float:
    """Return the interval in seconds (from a ``timedelta`` or a number), more than zero."""
    try:
        return options.interval(value, "interval")
    except ValueError as exc:
        raise ScheduleError(str(exc)) from None


def normalise_payload(payload: object, where: str) -> Any:
    """The payload as it will be stored (JSON round trip), or :class:`ScheduleError`."""
    if payload is None:
        return {}
    try:
        return from_json(to_json(payload, f"{where} payload"))
    except PayloadError as exc:
        raise ScheduleError(str(exc)) from None


@dataclass(frozen=True)
class Timing:
    """When a schedule runs: exactly one of ``cron`` and ``interval`` (seconds)."""

    cron: str | None = None
    interval: float | None = None
    timezone: str = "UTC"

    @classmethod
    def build(
        cls, cron: object = None, interval: object = None, timezone: object = "UTC"
    ) -> Timing:
        """Validate and normalise; raise :class:`ScheduleError` with a clear message."""
        has_cron = cron not in (None, "")
        has_interval = interval is not None
        if has_cron and has_interval:
            raise ScheduleError("give either cron or interval, not both")
        if not has_cron and not has_interval:
            raise ScheduleError("give either cron (e.g. '0 3 * * *') or interval (seconds)")
        tz = validate_timezone(timezone)
        if has_cron:
            return cls(cron=validate_cron(cron), timezone=tz)
        return cls(interval=validate_interval(interval), timezone=tz)

    def describe(self) -> str:
        if self.cron is not None:
            return f"cron {self.cron}"
        assert self.interval is not None
        return f"every {timedelta(seconds=self.interval)}"

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime:
        """The first run strictly after ``after`` (aware, returned in UTC).

        For an interval schedule, runs lie on the grid ``anchor + k * interval`` (``anchor``
        is the previous scheduled run); without an anchor the next run is ``after +
        interval``.
        """
        _require_aware(after)
        if self.cron is not None:
            return cron_next(self.cron, self.timezone, after)
        assert self.interval is not None
        if anchor is None:
            return (after + timedelta(seconds=self.interval)).astimezone(UTC)
        _require_aware(anchor)
        elapsed = (after - anchor).total_seconds()
        steps = max(1, math.floor(elapsed / self.interval) + 1)
        candidate = anchor + timedelta(seconds=steps * self.interval)
        while candidate <= after:  # float rounding at the grid points
            steps += 1
            candidate = anchor + timedelta(seconds=steps * self.interval)
        return candidate.astimezone(UTC)

    def upcoming(
        self, after: datetime, count: int, anchor: datetime | None = None
    ) -> list[datetime]:
        """The next ``count`` runs after ``after`` (for previews)."""
        runs: list[datetime] = []
        current = after
        for _ in range(count):
            current = self.next_after(current, anchor)
            anchor = current
            runs.append(current)
        return runs


def _require_aware(value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"expected a timezone-aware datetime, got {value!r}")


def cron_next(expression: str, timezone: str, after: datetime) -> datetime:
    """First instant strictly after ``after`` whose wall-clock time in ``timezone`` matches
    ``expression`` (DST rules in the module docstring). Returned in UTC."""
    tz = ZoneInfo(timezone)
    after_utc = after.astimezone(UTC)
    wall = after_utc.astimezone(tz).replace(tzinfo=None, fold=0)
    wall_times = croniter(expression, wall)
    for _ in range(_MAX_STEPS):
        candidate = wall_times.get_next(datetime)
        instant = resolve_wall_time(candidate, tz)
        if instant > after_utc:
            return instant
    raise ScheduleError(f"cron {expression!r}: no run found after {after.isoformat()}")


def resolve_wall_time(wall: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant a naive wall-clock time in ``tz`` stands for.

    Existing once: that instant. Twice (fall back): the first occurrence. Not at all
    (spring forward): the moment the clocks jump past it.
    """
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if first.astimezone(tz).replace(tzinfo=None) == wall:
        return first  # exists (for an ambiguous time fold=0 is the first occurrence)
    # In a gap fold=0 applies the offset from before the jump, which lands after it, and
    # fold=1 the offset from after, which lands before it: the jump lies in between.
    before = int(wall.replace(tzinfo=tz, fold=1).astimezone(UTC).timestamp())
    after = int(first.timestamp())
    after_offset = first.astimezone(tz).utcoffset()
    while after - before > 1:
        middle = (before + after) // 2
        if datetime.fromtimestamp(middle, tz).utcoffset() == after_offset:
            after = middle
        else:
            before = middle
    return datetime.fromtimestamp(after, UTC)


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule declared in code (``@job(..., cron=...)`` or ``PQJOBS['SCHEDULES']``)."""

    name: str
    job_type: str
    timing: Timing
    payload: Any = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    overlap: str = "skip"
    misfire: str = "run_once"
    enabled: bool = True

    def declared(self) -> dict[str, Any]:
        """The values written to the table, keyed by model field name (stored as the
        ``declared`` snapshot so a later sync can tell code changes from admin edits)."""
        return {
            "job_type": self.job_type,
            "payload": self.payload,
            "queue": self.queue or "",
            "priority": self.priority,
            "cron": self.timing.cron or "",
            "interval_seconds": self.timing.interval,
            "timezone": self.timing.timezone,
            "overlap": self.overlap,
            "misfire": self.misfire,
            "enabled": self.enabled,
        }


SPEC_KEYS = (
    "name",
    "job_type",
    "cron",
    "interval",
    "timezone",
    "payload",
    "queue",
    "priority",
    "overlap",
    "misfire",
    "enabled",
)


def build_spec(
    name: object,
    job_type: object,
    *,
    cron: object = None,
    interval: object = None,
    timezone: object = "UTC",
    payload: object = None,
    queue: object = None,
    priority: object = None,
    overlap: object = "skip",
    misfire: object = "run_once",
    enabled: object = True,
    where: str = "schedule",
) -> ScheduleSpec:
    """Validate a declaration; every problem raises :class:`ScheduleError` naming ``where``."""
    try:
        name = options.schedule_name(name, f"{where}: name")
        job_type = options.job_type_name(job_type, f"{where}: job_type")
        queue = None if queue is None else options.queue_name(queue, f"{where}: queue")
        priority = None if priority is None else options.priority(priority, f"{where}: priority")
    except ValueError as exc:
        raise ScheduleError(str(exc)) from None
    try:
        timing = Timing.build(cron, interval, timezone)
    except ScheduleError as exc:
        raise ScheduleError(f"{where}: {exc}") from None
    if overlap not in OVERLAP_POLICIES:
        raise ScheduleError(f"{where}: overlap must be one of {OVERLAP_POLICIES}, got {overlap!r}")
    if misfire not in MISFIRE_POLICIES:
        raise ScheduleError(f"{where}: misfire must be one of {MISFIRE_POLICIES}, got {misfire!r}")
    if not isinstance(enabled, bool):
        raise ScheduleError(f"{where}: enabled must be True or False, got {enabled!r}")
    return ScheduleSpec(
        name=name,
        job_type=job_type,
        timing=timing,
        payload=normalise_payload(payload, where),
        queue=queue,
        priority=priority,
        overlap=str(overlap),
        misfire=str(misfire),
        enabled=enabled,
    )


def specs_from_setting(value: object, where: str) -> list[ScheduleSpec]:
    """Validate ``PQJOBS['SCHEDULES']``: a list of dicts with the keys of :data:`SPEC_KEYS`."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise ScheduleError(f"{where} must be a list of dicts, got {type(value).__name__}")
    specs: list[ScheduleSpec] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        item_where = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise ScheduleError(f"{item_where} must be a dict, got {type(item).__name__}")
        unknown = sorted(set(item) - set(SPEC_KEYS))
        if unknown:
            raise ScheduleError(
                f"{item_where} has unknown keys {unknown}; known: {', '.join(SPEC_KEYS)}"
            )
        if "name" not in item or "job_type" not in item:
            raise ScheduleError(f"{item_where} needs 'name' and 'job_type'")
        options = {k: v for k, v in item.items() if k not in ("name", "job_type")}
        spec = build_spec(
            item["name"], item["job_type"], where=f"{item_where} ({item['name']!r})", **options
        )
        if spec.name in seen:
            raise ScheduleError(f"{item_where}: schedule name {spec.name!r} is used twice")
        seen.add(spec.name)
        specs.append(spec)
    return specs
