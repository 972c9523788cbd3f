"""Recording how attempts ended: the one path every outcome takes.

The executors, the child processes of isolated jobs and the watchdog decide an
:class:`~django_pqjobs.outcomes.Outcome`; the completer thread hands outcomes here in
batches. For each one the recorder writes the transition (fenced: an attempt that is no
longer ours is reported ``lost``), then logs it, sends ``job_finished`` and tells the
worker, which counts it and frees the slot. Atomic jobs write their completion inside the
handler's transaction and only :meth:`Recorder.report` here.

One bad value must not cost the others: successes are written in one statement, and if
the database refuses it for a reason other than a lost connection, each is written alone so
the one it refused fails by itself, with the database's reason. A lost connection is
retried until the database is back (the jobs keep their heartbeat meanwhile), unless the
worker is shutting down past its grace period.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db import DatabaseError

from .. import endings, transitions
from ..conf import conf
from ..durations import to_seconds
from ..outcomes import Outcome
from ..policies import DelaySequence, make_backoff
from ..printable import printable
from ..registry import registry
from ..statuses import AttemptOutcome, Recorded
from ..transitions import Completion
from .db import CONNECTION_ERRORS, reset_connection
from .slots import Slot

logger = logging.getLogger("django_pqjobs")

# What the recorder reports for an outcome it could not write before the worker gave up
# (shutdown during a database outage): the job stays running and is rescued later.
UNRECORDED: Recorded = "unrecorded"
DEFAULT_BACKOFF = make_backoff("default")  # what a failing policy falls back to


class Unrecorded(Exception):
    """The database stayed unreachable until the worker stopped trying."""


def retry_delay(job_type: str, attempt: int) -> float:
    """The backoff before retrying attempt ``attempt`` of ``job_type``.

    A policy that raises, or gives anything but a duration of 0 to 100 years, is a bug in
    the policy, not the job's: it is logged and the default policy decides (a delay past
    the calendar could not be written, and the job would stay running until rescued).
    """
    known = registry.resolve(job_type)
    policy = known.backoff if known is not None and known.backoff is not None else conf.BACKOFF
    try:
        return to_seconds(policy.delay(attempt), f"the backoff of job type {job_type!r}")
    except Exception:
        logger.exception(
            "the backoff policy of job type %r failed for attempt %s; using the default one",
            printable(job_type),
            attempt,
        )
        return DEFAULT_BACKOFF.delay(attempt)


def completion_of(slot: Slot, outcome: Outcome) -> Completion:
    """The completion that records ``outcome``, a success, as the end of ``slot``'s attempt."""
    return Completion(slot.fence, outcome.result_json, slot.elapsed_ms, outcome.progress_json)


def log_fields(slot: Slot, outcome: str, **more: Any) -> dict[str, Any]:
    """Structured fields of a log record about one attempt (for JSON log handlers)."""
    job = slot.job
    return {
        "job_id": job.id,
        "job_type": printable(job.job_type),
        "queue": printable(job.queue),
        "attempt": job.attempts,
        "outcome": outcome,
        **more,
    }


class Recorder:
    def __init__(
        self,
        alias: str,
        on_recorded: Callable[[Slot, Recorded], None],
        retry_delays: DelaySequence,
        keep_trying: Callable[[], bool],
        *,
        log_successes: bool = False,
        on_recorded_all: Callable[[list[tuple[Slot, Recorded]]], None] | None = None,
    ) -> None:
        self.alias = alias
        self.on_recorded = on_recorded
        # the same for many slots at once (default: on_recorded for each)
        self.on_recorded_all = on_recorded_all or self._each_recorded
        self.retry_delays = retry_delays
        self.keep_trying = keep_trying
        self.log_successes = log_successes

    def _each_recorded(self, recorded: list[tuple[Slot, Recorded]]) -> None:
        for slot, status in recorded:
            self.on_recorded(slot, status)

    # --- writing ---------------------------------------------------------------------

    def finish(self, slot: Slot, outcome: Outcome, recorded: Recorded | None) -> None:
        """The end of one attempt, as the executor returned it: written here, or (an atomic
        job's, written with its work) only reported."""
        if recorded is None:
            self.write([(slot, outcome)])
        else:
            self.report(slot, outcome, recorded)

    def write(self, batch: Sequence[tuple[Slot, Outcome]]) -> None:
        """Write every outcome of ``batch``, then report each one."""
        successes = [(slot, outcome) for slot, outcome in batch if outcome.succeeded]
        if successes:
            self._write_successes(successes)
        for slot, outcome in batch:
            if not outcome.succeeded:
                self._write_failure(slot, outcome)

    def _write_successes(self, items: Sequence[tuple[Slot, Outcome]]) -> None:
        completions = [completion_of(slot, o) for slot, o in items]
        try:
            done = self._persist(lambda: transitions.complete_many(self.alias, completions))
        except Unrecorded:
            for slot, outcome in items:
                self.report(slot, outcome, UNRECORDED)
            return
        except DatabaseError as exc:
            if len(items) > 1:
                logger.warning(
                    "the database refused a batch of %s finished jobs (%s); recording them "
                    "one at a time",
                    len(items),
                    first_line(exc),
                )
                for item in items:
                    self._write_successes([item])
                return
            slot, outcome = items[0]
            self._write_failure(slot, _refused(outcome, exc))
            return
        self.report_successes(items, done)

    def report_successes(self, items: Sequence[tuple[Slot, Outcome]], done: set[int]) -> None:
        """Report successes a statement wrote: ``done`` holds the ids of the attempts it
        recorded; the others were no longer this worker's (fenced off)."""
        recorded: list[tuple[Slot, Recorded]] = []
        for slot, outcome in items:
            status: Recorded = "done" if slot.fence.job_id in done else "lost"
            self._announce(slot, outcome, status)
            recorded.append((slot, status))
        self.on_recorded_all(recorded)

    def _write_failure(self, slot: Slot, outcome: Outcome) -> None:
        if outcome.final == "release":
            if self._release_after_connection_loss(slot, outcome):
                return
            outcome = charged(outcome)
        delay = 0.0
        if outcome.final == "auto":
            delay = (
                outcome.delay
                if outcome.delay is not None
                else retry_delay(slot.job.job_type, slot.fence.attempt - slot.job.retried_from)
            )
        duration = slot.elapsed_ms
        for attempt_outcome in (outcome, _plain(outcome)):

            def end(o: Outcome = attempt_outcome) -> str | None:
                assert o.attempt_outcome is not None
                return transitions.end_attempt(
                    self.alias,
                    slot.fence,
                    outcome=o.attempt_outcome,
                    error_type=o.error_type,
                    error=o.error,
                    duration_ms=duration,
                    delay=delay,
                    final=o.final,
                )

            try:
                status = self._persist(end)
            except Unrecorded:
                self.report(slot, outcome, UNRECORDED)
                return
            except DatabaseError:
                logger.exception(
                    "the database refused the outcome of job %s; trying a plain error text",
                    slot.job.id,
                )
                continue
            if status == "ready":
                self.report(slot, outcome, "retry", delay=delay)
            elif status in ("failed", "cancelled"):
                self.report(slot, outcome, "failed" if status == "failed" else "cancelled")
            else:
                self.report(slot, outcome, "lost")
            return
        self.report(slot, outcome, UNRECORDED)

    def _release_after_connection_loss(self, slot: Slot, outcome: Outcome) -> bool:
        """Give the attempt back uncharged (its database connection died under the
        handler), due again after the first loop-error wait, unless this attempt met that
        ``CONNECTION_LOSS_LIMIT - 1`` times in a row already. False when the caller must
        charge it (or it was no longer ours: charging is then fenced off too)."""
        delay = self.retry_delays.delay(0)

        def release() -> list[int]:
            return transitions.release(
                self.alias,
                [slot.fence],
                error_type=outcome.error_type,
                error=outcome.error,
                delay=delay,
                limit=conf.CONNECTION_LOSS_LIMIT - 1,
            )

        try:
            released = self._persist(release)
        except Unrecorded:
            self.report(slot, outcome, UNRECORDED)
            return True
        except DatabaseError:
            logger.exception("the database refused to give back job %s", slot.job.id)
            return False
        if slot.fence.job_id not in released:
            return False
        self.report(slot, outcome, "released", delay=delay)
        return True

    def _persist(self, operation: Callable[[], Any]) -> Any:
        """Run a write, reconnecting through database restarts for as long as it takes
        (or until the worker stops trying). Other database errors are raised."""
        failures = 0
        while True:
            try:
                return operation()
            except CONNECTION_ERRORS:
                reset_connection(self.alias)
                if not self.keep_trying():
                    raise Unrecorded() from None
                wait = self.retry_delays.delay(failures)
                failures += 1
                if failures == 1 or failures % 20 == 0:
                    logger.warning(
                        "database unavailable while recording job outcomes (try %s); "
                        "retrying in %.1f s",
                        failures,
                        wait,
                        exc_info=failures == 1,
                    )
                time.sleep(wait)
            except DatabaseError:
                reset_connection(self.alias)
                raise

    # --- reporting -------------------------------------------------------------------

    def report(self, slot: Slot, outcome: Outcome, status: Recorded, delay: float = 0.0) -> None:
        """Log the recorded outcome, send ``job_finished``, and hand the slot back.

        Successes are logged only with ``log_successes`` (``run_jobs -v 2`` or
        ``PQJOBS['LOG_SUCCESSES']``): a line per job costs a fast worker a third of its
        throughput, and the periodic summary counts them. Everything else is logged.
        """
        self._announce(slot, outcome, status, delay)
        self.on_recorded(slot, status)

    def _announce(self, slot: Slot, outcome: Outcome, status: Recorded, delay: float = 0.0) -> None:
        """Log the outcome (successes only if asked to) and announce it (``endings``)."""
        if status == "done":
            if self.log_successes:
                self._log(slot, outcome, status, delay)
        else:
            self._log(slot, outcome, status, delay)
        if status != UNRECORDED:
            endings.announce(slot.job, status, outcome.error or None)
        if status in ("failed", "cancelled") and slot.job.has_dependents:
            # the database cancelled the dependents that wait for it, at that commit
            try:
                endings.announce_stored(self.alias, {}, dependents_of=[slot.job.id])
            except DatabaseError:
                logger.exception("could not read the dependents job %s cancelled", slot.job.id)

    def _log(self, slot: Slot, outcome: Outcome, status: Recorded, delay: float) -> None:
        job = slot.job
        name = printable(job.job_type)
        duration = slot.elapsed_ms
        fields = log_fields(slot, status, duration_ms=duration)
        summary = outcome.summary
        if status != "done":
            fields["error"] = summary
        if status == "retry":
            fields["retry_in_s"] = delay
        if status == "done":
            logger.info(
                "job %s %s attempt %s/%s done in %s ms",
                job.id,
                name,
                job.attempts,
                job.max_attempts,
                duration,
                extra=fields,
            )
        elif status == "retry":
            logger.warning(
                "job %s %s attempt %s/%s failed (%s), retry in %.0f s: %s",
                job.id,
                name,
                job.attempts,
                job.max_attempts,
                outcome.attempt_outcome,
                delay,
                summary,
                extra=fields,
            )
        elif status in ("failed", "cancelled"):
            log = logger.info if status == "cancelled" else logger.error
            log(
                "job %s %s attempt %s/%s %s (%s) after %s ms: %s",
                job.id,
                name,
                job.attempts,
                job.max_attempts,
                status,
                outcome.attempt_outcome,
                duration,
                summary,
                extra=fields,
            )
        elif status == "released":
            logger.warning(
                "job %s %s attempt %s/%s: %s; given back uncharged, due again in %.1f s",
                job.id,
                name,
                job.attempts,
                job.max_attempts,
                summary,
                delay,
                extra=fields,
            )
        elif status == "lost":
            logger.warning(
                "job %s %s attempt %s was lost (rescued elsewhere); its outcome was discarded",
                job.id,
                name,
                job.attempts,
                extra=fields,
            )
        else:
            logger.error(
                "could not record the outcome of job %s %s attempt %s; it stays running "
                "until rescued",
                job.id,
                name,
                job.attempts,
                extra=fields,
            )


def charged(outcome: Outcome) -> Outcome:
    """A lost connection met too many times in a row: an error like any other."""
    return Outcome.failure(
        AttemptOutcome.ERROR,
        outcome.error_type,
        f"{outcome.error}\n(the database connection was lost {conf.CONNECTION_LOSS_LIMIT} "
        "times in a row in this attempt: it counts)",
        progress_json=outcome.progress_json,
        summary=outcome.summary,
    )


def _refused(outcome: Outcome, exc: DatabaseError) -> Outcome:
    """A success whose result or progress the database refused becomes a permanent failure."""
    reason = first_line(exc)
    return Outcome.failure(
        AttemptOutcome.PERMANENT,
        "ResultNotStorable",
        f"the database refused to store this job's result or progress: {reason}",
        final="failed",
        summary=f"the database refused the result: {reason}",
    )


def first_line(exc: BaseException) -> str:
    """The first line of a database error: the rest (DETAIL, CONTEXT) can quote the data."""
    return (str(exc).strip().splitlines() or ["(no message)"])[0][:300]


def _plain(outcome: Outcome) -> Outcome:
    """The same failure with an error text the database cannot refuse."""
    assert outcome.attempt_outcome is not None
    return Outcome.failure(
        outcome.attempt_outcome,
        outcome.error_type.encode("ascii", "replace").decode("ascii"),
        outcome.error.encode("ascii", "backslashreplace").decode("ascii"),
        final=outcome.final,
        delay=outcome.delay,
        summary=outcome.summary.encode("ascii", "backslashreplace").decode("ascii"),
    )
