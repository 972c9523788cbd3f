"""Sending the framework's signals, and skipping those nothing would receive.

Building a TaskResult and dispatching a signal cost more than running a no-op job. A
signal with no receiver but the framework's own (which only logs) to a logger that is off
for that level would do nothing, so it is not sent.
"""

from __future__ import annotations

import logging
from typing import Any

from . import identity
from .families import Family

logger = logging.getLogger("django_pqjobs")


def observed(family: Family, signal: Any, level: int) -> bool:
    """Whether sending ``signal`` now would reach anything: a receiver other than the
    framework's logging one, or that one with its logger on for ``level``."""
    try:
        entries = signal.receivers
        known = _who.get(id(signal))
        if (
            known is None
            or known[0] is not entries
            or known[1] != len(entries)
            or (entries and known[2] is not entries[-1])
            or signal._dead_receivers
        ):
            known = _survey(family, signal)
    except (AttributeError, TypeError, ValueError, IndexError):  # another dispatcher
        return True
    who = known[3]
    return who == "others" or (who == "log" and family.logger.isEnabledFor(level))


# Who receives a signal: "others", "log" (only the framework's) or "none", kept with the
# state of its receiver list. Django appends on connect, deletes on disconnect and rebuilds
# the list after a receiver died, so the list's identity, its length and its last entry
# change whenever its content does.
_who: dict[int, tuple[Any, int, Any, str]] = {}


def _survey(family: Family, signal: Any) -> tuple[Any, int, Any, str]:
    sync_receivers, async_receivers = signal._live_receivers(sender())
    live = [*sync_receivers, *async_receivers]
    if any(receiver not in family.log_receivers for receiver in live):
        who = "others"
    else:
        who = "log" if live else "none"
    entries = signal.receivers  # _live_receivers may have rebuilt it without dead ones
    known = (entries, len(entries), entries[-1] if entries else None, who)
    _who[id(signal)] = known
    return known


def sender() -> type:
    """The ``sender`` of every signal about a task: the backend class."""
    return identity.backend_class()


def send(family: Family, signal: Any, task_result: Any, task_path: str) -> None:
    """Send to every receiver; one that raises is logged, never stops the caller."""
    for receiver, response in signal.send_robust(sender=sender(), task_result=task_result):
        if isinstance(response, Exception):
            logger.error(
                "a receiver of %s's task signal failed for task %s (result %s): %r",
                family.name,
                task_path,
                task_result.id,
                receiver,
                exc_info=response,
            )
