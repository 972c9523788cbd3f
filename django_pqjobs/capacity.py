"""Live worker concurrency: how many jobs a running worker runs at once, changed without a
restart.

An operator sets a concurrency for a worker group (the processes ``NAME-1`` ... of
``run_jobs --processes N --worker-id NAME``), for one worker id, or for every worker
(``"*"``), with ``manage.py set_concurrency``, the admin, or :func:`set_concurrency`. It is a
row of ``pqjobs_concurrency``; each worker reads the rows that name it every
``READ_INTERVAL`` seconds and takes the most specific one (its id, then its group, then
``"*"``), within the bounds it was started with: at least 1, at most its
``--max-concurrency`` (its ``--concurrency`` when not given). With no row, a worker runs at
the concurrency it was started with.
"""

from __future__ import annotations

from django.db import connections, transaction
from django.db.models.functions import Now

from . import audit, monitoring, options
from .conf import conf
from .models import ConcurrencySetting
from .statuses import AuditAction

EVERY_WORKER = "*"
READ_INTERVAL = 2.0  # seconds between a worker's reads of its setting
CONCURRENCY_MAX = 1024  # executor threads a worker may be started with (--max-concurrency)

_READ = """
SELECT name, concurrency FROM pqjobs_concurrency WHERE name = ANY(%s)
"""


def max_concurrency(concurrency: int, most: int | None, what: str = "max_concurrency") -> int:
    """The most a worker started at ``concurrency`` may be raised to: ``most``, else
    ``concurrency``. ValueError (naming ``what``) below ``concurrency`` or above
    ``CONCURRENCY_MAX``."""
    value = concurrency if most is None else most
    if not concurrency <= value <= CONCURRENCY_MAX:
        raise ValueError(
            f"{what} must be from the concurrency it starts with ({concurrency}) to "
            f"{CONCURRENCY_MAX}, got {value}"
        )
    return value


def names_of(worker_id: str) -> list[str]:
    """The rows that may set a worker's concurrency, the most specific first."""
    group = monitoring.group_of(worker_id)
    return [worker_id, *([group] if group else []), EVERY_WORKER]


def concurrency_for(alias: str, worker_id: str) -> int | None:
    """The concurrency set for ``worker_id`` (its own row, its group's, or every worker's),
    or None when no row names it."""
    names = names_of(worker_id)
    with connections[alias].cursor() as cursor:
        cursor.execute(_READ, [names])
        found = dict(cursor.fetchall())
    return next((int(found[name]) for name in names if name in found), None)


def target_name(name: str) -> str:
    """A worker group, a worker id or ``"*"``: non-empty, no control characters."""
    if name == EVERY_WORKER:
        return name
    return options.worker_id(name)


def set_concurrency(
    concurrency: int | None, *, name: str = EVERY_WORKER, by: str = "", using: str | None = None
) -> None:
    """Make the running workers of ``name`` (a worker group, a worker id, or ``"*"``: every
    worker) run ``concurrency`` jobs at once, within the bounds each was started with;
    ``None`` takes the setting away (they go back to their own). Workers follow within
    ``READ_INTERVAL`` seconds. ``by`` (who) is shown with the setting and, when given,
    recorded in the audit trail."""
    name = target_name(name)
    if concurrency is not None and (
        isinstance(concurrency, bool)
        or not isinstance(concurrency, int)
        or not 1 <= concurrency <= CONCURRENCY_MAX
    ):
        raise ValueError(
            f"concurrency must be a whole number from 1 to {CONCURRENCY_MAX}, got "
            f"{concurrency!r:.60}"
        )
    actor = options.actor(by) if by else ""
    alias = using or conf.DATABASE
    settings = ConcurrencySetting.objects.using(alias)
    with transaction.atomic(using=alias):
        if concurrency is None:
            settings.filter(name=name).delete()
            detail = "cleared: workers run at their own concurrency"
        else:
            settings.update_or_create(
                name=name, defaults={"concurrency": concurrency, "set_by": actor, "set_at": Now()}
            )
            detail = f"{concurrency} at once"
        if actor:
            target = "every worker" if name == EVERY_WORKER else f"workers {name}"
            audit.record(alias, AuditAction.CONCURRENCY, actor, target=target, detail=detail)


def settings(using: str | None = None) -> list[ConcurrencySetting]:
    """Every concurrency set, by name."""
    return list(ConcurrencySetting.objects.using(using or conf.DATABASE).order_by("name"))
