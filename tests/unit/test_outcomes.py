"""The classifier shared by executor threads and child processes (no database)."""

from __future__ import annotations

import math

import pytest

from django_pqjobs import outcomes
from django_pqjobs.errors import JobCancelled, JobTimeout, PermanentError, Retry
from django_pqjobs.printable import one_line
from django_pqjobs.statuses import AttemptOutcome


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


@pytest.mark.parametrize(
    ("exc", "attempt_outcome", "error_type", "final", "delay"),
    [
        (Retry("busy", delay=7), AttemptOutcome.ERROR, "Retry", "auto", 7.0),
        (Retry(), AttemptOutcome.ERROR, "Retry", "auto", None),
        (PermanentError("no"), AttemptOutcome.PERMANENT, "PermanentError", "failed", None),
        (JobCancelled("stop"), AttemptOutcome.CANCELLED, "JobCancelled", "cancelled", None),
        (JobTimeout(), AttemptOutcome.TIMEOUT, "JobTimeout", "auto", None),
        (ValueError("bad"), AttemptOutcome.ERROR, "ValueError", "auto", None),
        (SystemExit(3), AttemptOutcome.ERROR, "SystemExit", "auto", None),
    ],
)
def test_classify_maps_each_exception_to_one_outcome(
    exc, attempt_outcome, error_type, final, delay
):
    outcome = outcomes.classify(raised(exc), timeout=5)
    assert not outcome.succeeded
    assert (outcome.attempt_outcome, outcome.error_type, outcome.final, outcome.delay) == (
        attempt_outcome,
        error_type,
        final,
        delay,
    )


def test_retry_keeps_its_reason_and_a_timeout_says_its_limit():
    assert outcomes.classify(raised(Retry("mailer busy"))).error.startswith("mailer busy\n")
    assert outcomes.classify(raised(Retry("mailer busy"))).summary == "mailer busy"
    assert "timeout of 2.5 s" in outcomes.classify(raised(JobTimeout()), timeout=2.5).error


def test_user_exceptions_are_named_by_their_dotted_path():
    class Boom(Exception):
        pass

    assert outcomes.classify(raised(Boom("x"))).error_type == f"{__name__}.{Boom.__qualname__}"


def test_summary_is_one_printable_line_of_the_message():
    outcome = outcomes.classify(raised(ValueError("first line\nsecond \x1b[31mred")))
    assert outcome.summary == "ValueError: first line"
    assert "\x1b" not in one_line("\x1b[31mred")
    assert len(one_line("x" * 1000)) == 200


def test_an_exception_whose_str_raises_is_still_recorded():
    class Nasty(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    outcome = outcomes.classify(raised(Nasty()))
    assert outcome.error_type.endswith("Nasty")
    assert "str() failed" in outcome.summary


def test_success_stores_json_results_and_refuses_what_the_database_cannot_hold():
    assert outcomes.success("t", None) == outcomes.Outcome()
    assert outcomes.success("t", {"a": 1}).result_json == '{"a":1}'
    for bad in ({"text": "pdf\x00text"}, {"lone": "\udc80"}, {"n": math.nan}, {1, 2}):
        outcome = outcomes.success("t", bad)
        assert (outcome.attempt_outcome, outcome.final) == (AttemptOutcome.PERMANENT, "failed")
        assert outcome.error_type == "ResultNotSerializable"
        assert "job type 't'" in outcome.error


def test_describe_starts_at_the_handler_not_the_worker():
    def handler() -> None:
        raise ValueError("from the handler")

    exc = raised_from_worker_frames(handler)
    text = outcomes.describe(exc)
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
    outcome = outcomes.unknown_type("nope")
    assert outcome.final == "failed" and "no handler registered for 'nope'" in outcome.error
