"""The classifier shared by executor threads and child processes (no database)."""

from __future__ import annotations

import math

import psycopg
import pytest

from django_pqjobs import verdicts
from django_pqjobs.errors import JobCancelled, JobTimeout, PermanentError, Retry
from django_pqjobs.printable import one_line
from django_pqjobs.statuses import FailureKind


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


@pytest.mark.parametrize(
    ("exc", "failure", "error_type", "then", "delay"),
    [
        (Retry("busy", delay=7), FailureKind.ERROR, "Retry", "auto", 7.0),
        (Retry(), FailureKind.ERROR, "Retry", "auto", None),
        (PermanentError("no"), FailureKind.PERMANENT, "PermanentError", "failed", None),
        (JobCancelled("stop"), FailureKind.CANCELLED, "JobCancelled", "cancelled", None),
        (JobTimeout(), FailureKind.TIMEOUT, "JobTimeout", "auto", None),
        (ValueError("bad"), FailureKind.ERROR, "ValueError", "auto", None),
        (SystemExit(3), FailureKind.ERROR, "SystemExit", "auto", None),
    ],
)
def test_classify_maps_each_exception_to_one_verdict(exc, failure, error_type, then, delay):
    verdict = verdicts.classify(raised(exc), timeout=5)
    assert not verdict.succeeded
    assert (verdict.failure, verdict.error_type, verdict.then, verdict.delay) == (
        failure,
        error_type,
        then,
        delay,
    )


def test_retry_keeps_its_reason_and_a_timeout_says_its_limit():
    assert verdicts.classify(raised(Retry("mailer busy"))).error.startswith("mailer busy\n")
    assert verdicts.classify(raised(Retry("mailer busy"))).summary == "mailer busy"
    assert "timeout of 2.5 s" in verdicts.classify(raised(JobTimeout()), timeout=2.5).error


def test_user_exceptions_are_named_by_their_dotted_path():
    class Boom(Exception):
        pass

    assert verdicts.classify(raised(Boom("x"))).error_type == f"{__name__}.{Boom.__qualname__}"


def test_summary_is_one_printable_line_of_the_message():
    verdict = verdicts.classify(raised(ValueError("first line\nsecond \x1b[31mred")))
    assert verdict.summary == "ValueError: first line"
    assert "\x1b" not in one_line("\x1b[31mred")
    assert len(one_line("x" * 1000)) == 200


def test_an_exception_whose_str_raises_is_still_recorded():
    class Nasty(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    verdict = verdicts.classify(raised(Nasty()))
    assert verdict.error_type.endswith("Nasty")
    assert "str() failed" in verdict.summary


def test_success_stores_json_results_and_refuses_what_the_database_cannot_hold():
    assert verdicts.success("t", None) == verdicts.Verdict()
    assert verdicts.success("t", {"a": 1}).result_json == '{"a":1}'
    for bad in ({"text": "pdf\x00text"}, {"lone": "\udc80"}, {"n": math.nan}, {1, 2}):
        verdict = verdicts.success("t", bad)
        assert (verdict.failure, verdict.then) == (FailureKind.PERMANENT, "failed")
        assert verdict.error_type == "ResultNotSerializable"
        assert "job type 't'" in verdict.error


def test_describe_starts_at_the_handler_not_the_worker():
    def handler() -> None:
        raise ValueError("from the handler")

    exc = raised_from_worker_frames(handler)
    text = verdicts.describe(exc)
    assert "in handler" in text and "ValueError: from the handler" in text
    assert "in run_like_the_worker" not in text


def raised_from_worker_frames(handler) -> BaseException:
    """Run ``handler`` from a function whose module is named like the worker's executor,
    catching there as the executor does: the traceback starts in 'worker' frames."""
    namespace = {"__name__": "django_pqjobs.worker.executor"}
    code = (
        "def run_like_the_worker(handler):\n"
        "    try:\n"
        "        handler()\n"
        "    except BaseException as exc:\n"
        "        return exc\n"
    )
    exec(code, namespace)
    return namespace["run_like_the_worker"](handler)


def test_unknown_type_fails_for_good_naming_the_type():
    verdict = verdicts.unknown_type("nope")
    assert verdict.then == "failed" and "no handler registered for 'nope'" in verdict.error


# --- a database connection that died is not the handler's failure --------------------------


def _wrapped(cause: BaseException, django_class: type[Exception]) -> Exception:
    """As Django raises psycopg's errors: its own class, psycopg's error as the cause."""
    try:
        raise django_class(str(cause)) from cause
    except Exception as exc:
        return exc


@pytest.mark.parametrize(
    "cause",
    [
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.errors.CrashShutdown("crash"),
        psycopg.errors.CannotConnectNow("the database system is starting up"),
        psycopg.errors.ConnectionFailure("connection failure"),
        psycopg.errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"),
        psycopg.OperationalError("consuming input failed: server closed the connection"),
        psycopg.InterfaceError("the connection is closed"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_lost_connection_gives_the_attempt_back(cause):
    from django.db import utils

    for error in (cause, _wrapped(cause, utils.OperationalError)):
        verdict = verdicts.classify(error)
        assert verdict.then == "release" and verdict.error_type == "DatabaseConnectionLost"
        assert verdict.failure == "released"
    try:  # raised while handling it, or from it, in the handler's own code
        try:
            raise cause
        except psycopg.Error as exc:
            raise RuntimeError("could not save the invoice") from exc
    except RuntimeError as chained:
        assert verdicts.classify(chained).then == "release"


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
        psycopg.errors.DeadlockDetected("deadlock detected"),
        psycopg.errors.UniqueViolation("duplicate key"),
        psycopg.errors.UndefinedTable("relation does not exist"),
        ValueError("bad input"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_of_the_handlers_own_queries_are_charged(error):
    assert verdicts.classify(error).then == "auto"


def test_retry_and_permanent_error_win_over_a_lost_connection():
    lost = psycopg.errors.AdminShutdown("terminating connection")
    for explicit, then in ((Retry("later"), "auto"), (PermanentError("no"), "failed")):
        try:
            raise explicit from lost
        except Exception as exc:
            assert verdicts.classify(exc).then == then
