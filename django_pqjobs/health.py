"""Health checks for probes: is a worker alive and claiming, is the queue's lag acceptable.

Used by ``manage.py jobs_health`` (exit status and one line, for exec probes and systemd)
and by :func:`health_view` (HTTP 200 or 503, for HTTP probes: the state alone for anyone,
the line for staff users and the metrics token). Each check is one or two small reads of
the worker table and the indexes of the waiting jobs.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse

from . import access, fairness, monitoring, schema
from .conf import conf
from .printable import counted

# Exit statuses of ``jobs_health`` (2 is argparse's, for a bad command line).
OK = 0
NO_WORKER = 1  # no worker, or none alive and claiming
LAGGING = 3
UNREACHABLE = 4

DEFAULT_MAX_LOOP_AGE = 60.0


@dataclass(frozen=True)
class Health:
    """The verdict of a check: an exit status (0 healthy) and one line saying why."""

    status: int
    line: str

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def state(self) -> str:
        """The line's first words: ``ok``, ``no worker``, ``stale``, ``stuck``, ``lagging``
        or ``unreachable``. What an anonymous probe is told: no ids, hosts or addresses."""
        return self.line.partition(":")[0]


def _age(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.0f} s ago"


def _judge(
    worker: monitoring.WorkerState, max_heartbeat_age: float | None, max_loop_age: float
) -> str | None:
    """Why ``worker`` is unhealthy, or None."""
    if not monitoring.is_live(worker, max_heartbeat_age):
        return f"stale: worker {worker.worker_id} last heartbeat {_age(worker.heartbeat_age)}"
    if worker.loop_age is not None and worker.loop_age > max_loop_age:
        return (
            f"stuck: worker {worker.worker_id} heartbeats but its claim loop last ran "
            f"{_age(worker.loop_age)}"
        )
    return None


def check_worker(
    *,
    worker_id: str | None = None,
    hostname: str | None = None,
    max_heartbeat_age: float | None = None,
    max_loop_age: float = DEFAULT_MAX_LOOP_AGE,
    using: str | None = None,
) -> Health:
    """Is this worker alive and claiming?

    The worker is ``worker_id``, else the newest worker started on ``hostname`` (default:
    this machine's), so the record a restarted worker left behind does not count. Alive:
    its heartbeat is younger than ``max_heartbeat_age`` (default three heartbeat
    intervals); claiming: its claim loop ran within ``max_loop_age`` seconds.

    A ``worker_id`` no worker has, whose processes are ``<worker_id>-1``, ``-2``... (``run_jobs
    --processes N --worker-id <worker_id>``), is checked as one group: every one of them
    must be alive and claiming.
    """
    host = hostname or socket.gethostname()
    try:
        rows = monitoring.workers(using)
    except DatabaseError as exc:
        return _unreachable(exc, using)
    if worker_id is not None:
        found = [w for w in rows if w.worker_id == worker_id]
        where = f"worker {worker_id}"
        group = [w for w in rows if monitoring.group_of(w.worker_id) == worker_id]
        if not found and group:
            return _check_group(worker_id, group, max_heartbeat_age, max_loop_age)
    else:
        found = sorted((w for w in rows if w.hostname == host), key=lambda w: w.started_at)
        where = f"a worker on host {host}"
    if not found and worker_id is not None:
        close = monitoring.closest_worker_name(worker_id, (w.worker_id for w in rows))
        where += f" (did you mean {close}?)" if close else ""
    if not found:
        return Health(NO_WORKER, f"no worker: found no record of {where}")
    worker = found[-1]
    problem = _judge(worker, max_heartbeat_age, max_loop_age)
    if problem:
        return Health(NO_WORKER, problem)
    return Health(
        OK,
        f"ok: worker {worker.worker_id} alive (heartbeat {_age(worker.heartbeat_age)}, "
        f"claim loop {_age(worker.loop_age)})",
    )


def _check_group(
    group: str,
    members: list[monitoring.WorkerState],
    max_heartbeat_age: float | None,
    max_loop_age: float,
) -> Health:
    for worker in sorted(members, key=lambda w: w.worker_id):
        problem = _judge(worker, max_heartbeat_age, max_loop_age)
        if problem:
            return Health(NO_WORKER, f"{problem} (worker group {group})")
    return Health(
        OK,
        f"ok: worker group {group} alive: {counted(len(members), 'process', 'processes')} claiming",
    )


def check_workers(
    *,
    min_workers: int = 1,
    max_heartbeat_age: float | None = None,
    max_loop_age: float = DEFAULT_MAX_LOOP_AGE,
    using: str | None = None,
) -> Health:
    """Are at least ``min_workers`` workers, on any host, alive and claiming?"""
    try:
        rows = monitoring.workers(using)
    except DatabaseError as exc:
        return _unreachable(exc, using)
    problems = [(w, _judge(w, max_heartbeat_age, max_loop_age)) for w in rows]
    healthy = [w for w, problem in problems if problem is None]
    if len(healthy) < min_workers:
        worst = next((p for _, p in problems if p), "no worker record")
        return Health(
            NO_WORKER,
            f"no worker: {len(healthy)} of the required {min_workers} alive and claiming ({worst})",
        )
    return Health(OK, f"ok: {counted(len(healthy), 'worker')} alive and claiming")


def check_lag(
    max_lag: float, *, queues: Sequence[str] | None = None, using: str | None = None
) -> Health:
    """Has the oldest due job (of ``queues``, default all) waited less than ``max_lag``?

    Jobs held back by a concurrency or rate limit count: they wait for room. Jobs a paused
    queue or job type holds do not fail the check (pausing is an operator's decision), but
    the line says how many there are; so it does of the jobs that expired in the last hour
    (their deadline passed before a worker got to them: a sign of lag gone by). Lagging, it
    names the (up to three) fair keys whose oldest due job has waited longer than
    ``max_lag``, the longest first (``@job(fair_key=...)``: which tenants wait).
    """
    names = list(queues) if queues else None
    try:
        lag = monitoring.oldest_due_seconds(using, names)
        paused = monitoring.held_by_pause(using, names)
        expired = monitoring.expired_lately(using, names)
    except DatabaseError as exc:
        return _unreachable(exc, using)
    where = f" in {', '.join(queues)}" if queues else ""
    held = f"; {counted(paused, 'job')} held by a pause" if paused else ""
    if expired:
        held += f"; {counted(expired, 'job')} expired in the last hour"
    if lag > max_lag:
        waited = f"the oldest due job{where} has waited {lag:.0f} s (max {max_lag:g} s)"
        try:
            keys = fairness.waiting_longest(max_lag, queues=names, using=using)
        except DatabaseError as exc:
            return _unreachable(exc, using)
        if keys:
            named = ", ".join(f"{key} {seconds:.0f} s" for key, seconds in keys)
            held += f"; fair keys waiting longest: {named}"
        return Health(LAGGING, f"lagging: {waited}{held}")
    return Health(OK, f"ok: lag {lag:.1f} s{where} (max {max_lag:g} s){held}")


def _unreachable(exc: DatabaseError, using: str | None) -> Health:
    missing = schema.not_migrated(exc, using or conf.DATABASE)
    if missing is not None:  # the tables are not there (yet): say what to run
        return Health(UNREACHABLE, f"unreachable: {missing}")
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return Health(UNREACHABLE, f"unreachable: could not read the job tables: {first}")


def combine(checks: Sequence[Health]) -> Health:
    """The first failing check, else every check's line joined."""
    for health in checks:
        if not health.ok:
            return health
    lines = [h.line.removeprefix("ok: ") for h in checks]
    return Health(OK, "ok: " + "; ".join(lines))


def health_view(
    request: HttpRequest,
    *,
    max_lag: float | None = None,
    queues: Sequence[str] | None = None,
    min_workers: int = 1,
    max_heartbeat_age: float | None = None,
    max_loop_age: float = DEFAULT_MAX_LOOP_AGE,
) -> HttpResponse:
    """200 when healthy, else 503, as plain text: for load balancers and uptime monitors.

    Anyone gets the state alone (``ok``, ``no worker``, ``stale``, ``stuck``, ``lagging``
    or ``unreachable``); active staff users and requests with ``Authorization: Bearer
    <METRICS_TOKEN>`` get the whole line (``ok: 2 workers alive and claiming``), which
    names workers, hosts, queues and database errors.

    Checks that ``min_workers`` workers (any host) are alive and claiming (``min_workers=0``
    skips it) and, with ``max_lag`` (seconds), that the oldest due job of ``queues`` has not
    waited longer. Options come from the URL pattern::

        path("health/jobs", health_view, {"max_lag": 300, "queues": ["emails"]})
    """
    checks = []
    if min_workers:
        checks.append(
            check_workers(
                min_workers=min_workers,
                max_heartbeat_age=max_heartbeat_age,
                max_loop_age=max_loop_age,
            )
        )
    if max_lag is not None:
        checks.append(check_lag(max_lag, queues=queues))
    verdict = combine(checks) if checks else Health(OK, "ok: nothing to check")
    body = verdict.line if access.is_observer(request) else verdict.state
    response = HttpResponse(
        body + "\n",
        status=200 if verdict.ok else 503,
        content_type="text/plain; charset=utf-8",
    )
    return access.vary_on_credentials(response)
