"""Recording how attempts ended: the one path every verdict takes.

The executors, the child processes of isolated jobs and the watchdog decide a
:class:`~django_pqjobs.verdicts.Verdict`; the completer thread hands verdicts here in
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
from ..durations import FOREVER, in_words, to_seconds
from ..policies import DelaySequence, make_backoff
from ..printable import printable
from ..registry import registry
from ..statuses import FailureKind, Outcome
from ..transitions import Completion
from ..verdicts import Verdict
from .db import CONNECTION_ERRORS, reset_connection
from .slots import Slot

logger = logging.getLogger("django_pqjobs")

# What the recorder reports for a verdict it could not write before the worker gave up
# (shutdown during a database outage): the job stays running and is rescued later.
UNRECORDED: Outcome = "unrecorded"
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


def completion_of(slot: Slot, verdict: Verdict) -> Completion:
    """The completion that records ``verdict``, a success, as the end of ``slot``'s attempt."""
    return Completion(slot.fence, verdict.result_json, slot.elapsed_ms, verdict.progress_json)


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
        on_recorded: Callable[[Slot, Outcome], None],
        retry_delays: DelaySequence,
        keep_trying: Callable[[], bool],
        *,
        log_successes: bool = False,
        on_recorded_all: Callable[[list[tuple[Slot, Outcome]]], None] | None = None,
    ) -> None:
        self.alias = alias
        self.on_recorded = on_recorded
        # the same for many slots at once (default: on_recorded for each)
        self.on_recorded_all = on_recorded_all or self._each_recorded
        self.retry_delays = retry_delays
        self.keep_trying = keep_trying
        self.log_successes = log_successes

    def _each_recorded(self, recorded: list[tuple[Slot, Outcome]]) -> None:
        for slot, status in recorded:
            self.on_recorded(slot, status)

    # --- writing ---------------------------------------------------------------------

    def finish(self, slot: Slot, verdict: Verdict, recorded: Outcome | None) -> None:
        """The end of one attempt, as the executor returned it: written here, or (an atomic
        job's, written with its work) only reported."""
        if recorded is None:
            self.write([(slot, verdict)])
        else:
            self.report(slot, verdict, recorded)

    def write(self, batch: Sequence[tuple[Slot, Verdict]]) -> None:
        """Write every verdict of ``batch``, then report each one."""
        successes = [(slot, verdict) for slot, verdict in batch if verdict.succeeded]
        if successes:
            self._write_successes(successes)
        for slot, verdict in batch:
            if not verdict.succeeded:
                self._write_failure(slot, verdict)

    def _write_successes(self, items: Sequence[tuple[Slot, Verdict]]) -> None:
        completions = [completion_of(slot, o) for slot, o in items]
        try:
            done = self._persist(lambda: transitions.complete_many(self.alias, completions))
        except Unrecorded:
            for slot, verdict in items:
                self.report(slot, verdict, UNRECORDED)
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
            slot, verdict = items[0]
            self._write_failure(slot, _refused(verdict, exc))
            return
        self.report_successes(items, done)

    def report_successes(self, items: Sequence[tuple[Slot, Verdict]], done: set[int]) -> None:
        """Report successes a statement wrote: ``done`` holds the ids of the attempts it
        recorded; the others were no longer this worker's (fenced off)."""
        recorded: list[tuple[Slot, Outcome]] = []
        for slot, verdict in items:
            status: Outcome = "done" if slot.fence.job_id in done else "lost"
            self._announce(slot, verdict, status)
            recorded.append((slot, status))
        self.on_recorded_all(recorded)

    def _write_failure(self, slot: Slot, verdict: Verdict) -> None:
        if verdict.then == "park":
            self._park(slot, verdict)
            return
        if verdict.then == "release":
            if self._give_back(slot, verdict):
                return
            verdict = charged(verdict)
        delay = 0.0
        if verdict.then == "auto":
            delay = (
                verdict.delay
                if verdict.delay is not None
                else retry_delay(slot.job.job_type, slot.fence.attempt - slot.job.retried_from)
            )
        duration = slot.elapsed_ms
        for candidate in (verdict, _plain(verdict)):

            def end(o: Verdict = candidate) -> str | None:
                assert o.failure is not None
                return transitions.end_attempt(
                    self.alias,
                    slot.fence,
                    failure=o.failure,
                    error_type=o.error_type,
                    error=o.error,
                    duration_ms=duration,
                    delay=delay,
                    then=o.then,
                )

            try:
                status = self._persist(end)
            except Unrecorded:
                self.report(slot, verdict, UNRECORDED)
                return
            except DatabaseError:
                logger.exception(
                    "the database refused the outcome of job %s; trying a plain error text",
                    slot.job.id,
                )
                continue
            if status == "ready":
                self.report(slot, verdict, "retry", delay=delay)
            elif status in ("failed", "cancelled"):
                self.report(slot, verdict, "failed" if status == "failed" else "cancelled")
            else:
                self.report(slot, verdict, "lost")
            return
        self.report(slot, verdict, UNRECORDED)

    def _give_back(self, slot: Slot, verdict: Verdict) -> bool:
        """Give the attempt back uncharged: the handler snoozed (due again after its
        delay, at most ``SNOOZE_LIMIT`` times in a row), or its database connection died
        under it (due again after the first loop-error wait, ``CONNECTION_LOSS_LIMIT - 1``
        times in a row). False when the caller must charge it (or it was no longer ours:
        charging is then fenced off too)."""
        snoozed = verdict.failure == FailureKind.SNOOZED
        if snoozed:
            delay = verdict.delay or 0.0
            limit = conf.SNOOZE_LIMIT
        else:
            delay = self.retry_delays.delay(0)
            limit = conf.CONNECTION_LOSS_LIMIT - 1

        def release() -> list[int]:
            assert verdict.failure is not None
            return transitions.release(
                self.alias,
                [slot.fence],
                failure=verdict.failure,
                error_type=verdict.error_type,
                error=verdict.error,
                delay=delay,
                limit=limit,
            )

        try:
            released = self._persist(release)
        except Unrecorded:
            self.report(slot, verdict, UNRECORDED)
            return True
        except DatabaseError:
            logger.exception("the database refused to give back job %s", slot.job.id)
            return False
        if slot.fence.job_id not in released:
            return False
        self.report(slot, verdict, "snoozed" if snoozed else "released", delay=delay)
        return True

    def _park(self, slot: Slot, verdict: Verdict) -> None:
        """Park the job durably (a sleep, a wait for a signal): waiting, the attempt
        uncharged, until its time or its signal (transitions/workflows.py)."""
        delay = verdict.delay or 0.0

        def park() -> str | None:
            return transitions.park(self.alias, slot.fence, delay, verdict.error, verdict.signal)

        try:
            status = self._persist(park)
        except Unrecorded:
            self.report(slot, verdict, UNRECORDED)
            return
        except DatabaseError:
            logger.exception("the database refused to park job %s", slot.job.id)
            self.report(slot, verdict, UNRECORDED)
            return
        if status is None:
            self.report(slot, verdict, "lost")
        else:
            self.report(slot, verdict, "parked", delay=0.0 if status == "ready" else delay)

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

    def report(self, slot: Slot, verdict: Verdict, status: Outcome, delay: float = 0.0) -> None:
        """Log the recorded outcome, send ``job_finished``, and hand the slot back.

        Successes are logged only with ``log_successes`` (``run_jobs -v 2`` or
        ``PQJOBS['LOG_SUCCESSES']``): a line per job costs a fast worker a third of its
        throughput, and the periodic summary counts them. Everything else is logged.
        """
        self._announce(slot, verdict, status, delay)
        self.on_recorded(slot, status)

    def _announce(self, slot: Slot, verdict: Verdict, status: Outcome, delay: float = 0.0) -> None:
        """Log the outcome (successes only if asked to) and announce it (``endings``)."""
        if status == "done":
            if self.log_successes:
                self._log(slot, verdict, status, delay)
        else:
            self._log(slot, verdict, status, delay)
        if status != UNRECORDED:
            endings.announce(slot.job, status, verdict.error or None)
        if status in ("failed", "cancelled") and slot.job.has_dependents:
            # the database cancelled the dependents that wait for it, at that commit
            try:
                endings.announce_stored(self.alias, {}, dependents_of=[slot.job.id])
            except DatabaseError:
                logger.exception("could not read the dependents job %s cancelled", slot.job.id)

    def _log(self, slot: Slot, verdict: Verdict, status: Outcome, delay: float) -> None:
        job = slot.job
        name = printable(job.job_type)
        duration = slot.elapsed_ms
        fields = log_fields(slot, status, duration_ms=duration)
        summary = verdict.summary
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
                verdict.failure,
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
                verdict.failure,
                duration,
                summary,
                extra=fields,
            )
        elif status == "parked":
            logger.info(
                "job %s %s parked (%s), %s",
                job.id,
                name,
                summary,
                waking(verdict.signal, delay),
                extra=fields,
            )
        elif status == "snoozed":
            logger.info(
                "job %s %s attempt %s/%s snoozed (%s), due again in %.1f s",
                job.id,
                name,
                job.attempts,
                job.max_attempts,
                summary,
                delay,
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


def charged(verdict: Verdict) -> Verdict:
    """An attempt given back too many times in a row: a lost connection becomes an error
    like any other; a snooze past ``SNOOZE_LIMIT`` fails the job for good."""
    if verdict.failure == FailureKind.SNOOZED:
        return Verdict.of_failure(
            FailureKind.PERMANENT,
            "SnoozeLimit",
            f"{verdict.error}\n(snoozed {conf.SNOOZE_LIMIT + 1} times in a row: past "
            "PQJOBS['SNOOZE_LIMIT'], the job fails)",
            then="failed",
            progress_json=verdict.progress_json,
            summary=f"snoozed past PQJOBS['SNOOZE_LIMIT'] ({conf.SNOOZE_LIMIT})",
        )
    return Verdict.of_failure(
        FailureKind.ERROR,
        verdict.error_type,
        f"{verdict.error}\n(the database connection was lost {conf.CONNECTION_LOSS_LIMIT} "
        "times in a row in this attempt: it counts)",
        progress_json=verdict.progress_json,
        summary=verdict.summary,
    )


def _refused(verdict: Verdict, exc: DatabaseError) -> Verdict:
    """A success whose result or progress the database refused becomes a permanent failure."""
    reason = first_line(exc)
    return Verdict.of_failure(
        FailureKind.PERMANENT,
        "ResultNotStorable",
        f"the database refused to store this job's result or progress: {reason}",
        then="failed",
        summary=f"the database refused the result: {reason}",
    )


def first_line(exc: BaseException) -> str:
    """The first line of a database error: the rest (DETAIL, CONTEXT) can quote the data."""
    return (str(exc).strip().splitlines() or ["(no message)"])[0][:300]


def _plain(verdict: Verdict) -> Verdict:
    """The same failure with an error text the database cannot refuse."""
    assert verdict.failure is not None
    return Verdict.of_failure(
        verdict.failure,
        verdict.error_type.encode("ascii", "replace").decode("ascii"),
        verdict.error.encode("ascii", "backslashreplace").decode("ascii"),
        then=verdict.then,
        delay=verdict.delay,
        summary=verdict.summary.encode("ascii", "backslashreplace").decode("ascii"),
    )


def waking(signal: str | None, delay: float) -> str:
    """What wakes a parked job, as its log line says it: its signal (when it waits for one)
    and its time (unless it waits for ever)."""
    timed = delay < FOREVER
    if signal is None:
        return f"woken in {in_words(delay)}" if timed else "woken when its child job ends"
    named = f"woken by the signal {printable(signal)!r}"
    return f"{named} or in {in_words(delay)}" if timed else f"{named} (no timeout)"
