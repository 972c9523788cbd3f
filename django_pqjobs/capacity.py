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

from dataclasses import dataclass

from django.db import connections, transaction
from django.db.models.functions import Now

from . import audit, monitoring, options
from .conf import conf
from .models import ConcurrencySetting
from .sql import queries
from .statuses import AuditAction

QUERIES = queries("capacity")

EVERY_WORKER = "*"
READ_INTERVAL = 2.0  # seconds between a worker's reads of its setting
CONCURRENCY_MAX = 1024  # executor threads a worker may be started with (--max-concurrency)

_READ = QUERIES["read"]


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


def bounded(wanted: int | None, started: int, most: int | None) -> int:
    """What a worker started at ``started`` with ``--max-concurrency`` ``most`` (None: no
    bound known) runs when ``wanted`` is set (None: nothing is): at least 1, at most ``most``."""
    value = started if wanted is None else wanted
    return max(1, value if most is None else min(value, most))


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
) -> bool:
    """Make the running workers of ``name`` (a worker group, a worker id, or ``"*"``: every
    worker) run ``concurrency`` jobs at once, within the bounds each was started with;
    ``None`` takes the setting away (they go back to their own). Workers follow within
    ``READ_INTERVAL`` seconds. ``by`` (who) is shown with the setting and, when given,
    recorded in the audit trail. Returns False when ``None`` found no setting of ``name`` to
    take away (nothing changed, nothing recorded), else True. :func:`effective` says what
    each live worker then runs."""
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
            deleted, _ = settings.filter(name=name).delete()
            if not deleted:
                return False
            detail = "cleared: workers run at their own concurrency"
        else:
            settings.update_or_create(
                name=name, defaults={"concurrency": concurrency, "set_by": actor, "set_at": Now()}
            )
            detail = f"{concurrency} at once"
        if actor:
            target = "every worker" if name == EVERY_WORKER else f"workers {name}"
            audit.record(alias, AuditAction.CONCURRENCY, actor, target=target, detail=detail)
    return True


def settings(using: str | None = None) -> list[ConcurrencySetting]:
    """Every concurrency set, by name."""
    return list(ConcurrencySetting.objects.using(using or conf.DATABASE).order_by("name"))


@dataclass(frozen=True)
class WorkerConcurrency:
    """What a live worker runs at once under the settings, and where that comes from."""

    worker_id: str
    reported: int  # what it ran at its last heartbeat
    runs: int  # what it runs once it has read the settings (within READ_INTERVAL)
    setting: str | None  # the name of the setting that applies to it; None: no setting does
    asked: int | None  # that setting's concurrency
    started: int | None  # what it was started with (None: an older worker did not say)
    most: int | None  # its --max-concurrency (None: an older worker did not say)

    @property
    def source(self) -> str:
        """Where ``runs`` comes from, in words."""
        if self.setting is None:
            return "started with it"
        what = {EVERY_WORKER: "every worker's setting (*)"}.get(
            self.setting,
            f"its own setting {self.setting!r}"
            if self.setting == self.worker_id
            else f"its group's setting {self.setting!r}",
        )
        if self.asked is not None and self.asked != self.runs:
            what += f", which asks {self.asked}: bounded by its --max-concurrency {self.most}"
        return what

    def covered_by(self, name: str) -> bool:
        """Whether a setting named ``name`` names this worker (its id, its group, or *)."""
        return name in names_of(self.worker_id)


def effective(using: str | None = None) -> list[WorkerConcurrency]:
    """Each live worker's concurrency under the settings as they stand: the most specific
    setting naming it (its id, its group, then ``*``) within 1 and its --max-concurrency,
    else what it was started with."""
    alias = using or conf.DATABASE
    found = {s.name: s.concurrency for s in settings(alias)}
    result = []
    for worker in monitoring.workers(alias):
        if not monitoring.is_live(worker):
            continue
        setting = next((n for n in names_of(worker.worker_id) if n in found), None)
        asked = None if setting is None else int(found[setting])
        started = worker.started_concurrency
        most = worker.max_concurrency
        runs = bounded(asked, worker.concurrency if started is None else started, most)
        result.append(
            WorkerConcurrency(
                worker.worker_id, worker.concurrency, runs, setting, asked, started, most
            )
        )
    return result
