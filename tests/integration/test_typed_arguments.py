"""Typed arguments (issue 31): a handler's second parameter annotated with a dataclass or a
TypedDict; the payload is checked at enqueue (nothing written on a mismatch, the field
named), stored as plain JSON, rebuilt as the type in the handler, and a payload that no
longer fits fails that job alone."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import typing
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.core.checks import run_checks

from django_pqjobs import PayloadError, enqueue_job, enqueue_many, job
from django_pqjobs.arguments import Arguments
from django_pqjobs.models import Job
from django_pqjobs.registry import registry
from django_pqjobs.testing import drain
from tests.helpers import ROOT, bound, documented_block
from tests.testapp.jobs import Colour, Line, Receipt

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = uuid.UUID("12345678-1234-5678-1234-567812345678")


def receipt(**changes: object) -> Receipt:
    made = Receipt(
        order_id=7,
        email="a@example.com",
        placed_at=datetime(2026, 11, 27, 9, 30, tzinfo=UTC),
        ships_on=date(2026, 12, 1),
        token=TOKEN,
        lines=[Line("book", Decimal("12.50")), Line("pen", Decimal("0.99"), Colour.BLUE)],
        tags=frozenset({"gift"}),
    )
    return dataclasses.replace(made, **changes)


def test_an_instance_is_stored_as_plain_json_and_rebuilt_in_the_handler():
    job_id = enqueue_job("tests.typed_receipt", receipt())
    assert Job.objects.get(pk=job_id).payload == {
        "order_id": 7,
        "email": "a@example.com",
        "placed_at": "2026-11-27T09:30:00+00:00",
        "ships_on": "2026-12-01",
        "token": str(TOKEN),
        "lines": [
            {"sku": "book", "price": "12.50", "colour": "red"},
            {"sku": "pen", "price": "0.99", "colour": "blue"},
        ],
        "tags": ["gift"],
        "note": None,
    }
    (run,) = drain()
    assert run.outcome == "done"
    assert Job.objects.get(pk=job_id).result == {
        "order_id": 7,
        "placed_at": "2026-11-27T09:30:00+00:00",
        "ships_on": "2026-12-01",
        "token": str(TOKEN),
        "total": "13.49",
        "colours": ["red", "blue"],
        "tags": ["gift"],
        "types": ["datetime", "Decimal"],
    }


def test_a_dict_of_the_same_shape_is_checked_and_accepted():
    payload = {
        "order_id": 8,
        "email": "b@example.com",
        "placed_at": "2026-11-27T09:30:00+00:00",
        "ships_on": "2026-12-01",
        "token": str(TOKEN),
        "lines": [{"sku": "mug", "price": "4"}],
    }
    job_id = enqueue_job("tests.typed_receipt", payload)
    assert Job.objects.get(pk=job_id).payload["lines"] == [
        {"sku": "mug", "price": "4", "colour": "red"}
    ]
    assert [run.outcome for run in drain()] == ["done"]


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (lambda: receipt(order_id="7"), "order_id: expected int, got str '7'"),
        (lambda: receipt(lines=[Line("x", 1.5)]), "lines[0].price: expected Decimal"),
        (lambda: receipt(placed_at="today"), "placed_at: expected datetime"),
        (lambda: {"order_id": 1}, "Receipt needs 'email', 'lines'"),
        (lambda: {**_minimal(), "colour": "red"}, "Receipt has no field 'colour'"),
        (
            lambda: {**_minimal(), "lines": [{"sku": "a", "price": "1", "colour": "green"}]},
            "lines[0].colour: expected one of Colour's values ('red', 'blue'), got str 'green'",
        ),
        (lambda: {**_minimal(), "token": "not-a-uuid"}, "token: expected UUID"),
        (lambda: [1, 2], "expected Receipt, got list"),
    ],
)
def test_a_payload_that_does_not_fit_is_refused_naming_the_field_and_nothing_is_written(
    payload, error
):
    with pytest.raises(PayloadError, match=re.escape(error)):
        enqueue_job("tests.typed_receipt", payload())
    with pytest.raises(PayloadError, match=re.escape(error)):
        enqueue_many("tests.typed_receipt", [receipt(), payload()])
    assert not Job.objects.exists()


def _minimal() -> dict:
    return {
        "order_id": 1,
        "email": "c@example.com",
        "placed_at": "2026-11-27T09:30:00+00:00",
        "ships_on": "2026-12-01",
        "token": str(TOKEN),
        "lines": [],
    }


def test_a_typeddict_is_checked_and_passed_as_a_dict():
    job_id = enqueue_job("tests.typed_ping", {"host": "db", "port": 5432})
    with pytest.raises(PayloadError, match=re.escape("port: expected int, got str '5432'")):
        enqueue_job("tests.typed_ping", {"host": "db", "port": "5432"})
    (run,) = drain()
    assert Job.objects.get(pk=job_id).result == "db:5432" and run.outcome == "done"


def test_a_stored_payload_that_no_longer_fits_fails_that_job_alone():
    stale = enqueue_job("tests.typed_ping", {"host": "db", "port": 1})
    Job.objects.filter(pk=stale).update(payload={"hostname": "db", "port": 1})  # an old shape
    fine = enqueue_job("tests.typed_ping", {"host": "db", "port": 2})
    runs = {run.job_id: run for run in drain()}
    assert runs[fine].outcome == "done"
    failed = Job.objects.get(pk=stale)
    assert (runs[stale].outcome, failed.status, failed.attempts) == ("failed", "failed", 1)
    assert failed.error_type == "PermanentError"
    assert "does not fit Ping: Ping has no field 'hostname'" in failed.last_error


def test_many_payloads_are_checked_each_and_stored_as_json():
    ids = enqueue_many("tests.typed_ping", [{"host": "a", "port": 1}, {"host": "b", "port": 2}])
    assert [Job.objects.get(pk=n).payload for n in ids] == [
        {"host": "a", "port": 1},
        {"host": "b", "port": 2},
    ]


def test_a_second_parameter_of_another_type_is_no_typed_argument_and_check_says_so():
    def untyped(ctx, args):  # type: ignore[no-untyped-def]
        return None

    def with_default(ctx, retries: int = 3) -> None:
        return None

    try:
        job("tests.untyped_args")(untyped)
        job("tests.default_args")(with_default)
        assert registry.get("tests.untyped_args").arguments is None
        assert registry.get("tests.default_args").arguments is None
        problems = {m.obj: m.msg for m in run_checks() if m.id == "pqjobs.E091"}
        assert any("untyped" in name for name in problems)  # the worker could not fill args
        assert not any("with_default" in name for name in problems)
        assert registry.get("tests.typed_ping").arguments.name == "Ping"
    finally:
        registry.unregister("tests.untyped_args")
        registry.unregister("tests.default_args")


def test_the_guide_s_example_runs_as_written():
    code = documented_block("guides/writing-jobs.md", "typed-arguments", "python")
    found: dict = {}
    try:
        exec(compile(code, "writing-jobs.md", "exec", dont_inherit=True), found)
        assert Job.objects.get(pk=found["refund_id"]).payload == {
            "order_id": 42,
            "amount": "9.90",
            "requested_on": "2026-11-27",
            "reason": "",
        }
        assert [run.outcome for run in drain()] == ["done", "done"]
        with pytest.raises(PayloadError, match=re.escape("amount: expected Decimal, got float")):
            enqueue_job("billing.refund", found["Refund"](1, 9.9, date(2026, 11, 27)))
    finally:
        registry.unregister("billing.refund")


def test_a_pydantic_model_is_validated_by_pydantic_and_rebuilt():
    from tests.testapp.typed_models import Invoice

    job_id = enqueue_job("tests.typed_invoice", Invoice(number="A-1", amount=Decimal("10.5")))
    assert Job.objects.get(pk=job_id).payload == {"number": "A-1", "amount": "10.5", "paid": False}
    enqueue_job("tests.typed_invoice", {"number": "A-2", "amount": "3"})
    with pytest.raises(PayloadError, match=re.escape("does not fit Invoice: amount:")):
        enqueue_job("tests.typed_invoice", {"number": "A-3", "amount": "lots"})
    assert Job.objects.count() == 2
    drain()
    assert sorted(Job.objects.values_list("result", flat=True)) == ["A-1: 10.5", "A-2: 3"]


TYPED_CALLS = """
from dataclasses import dataclass

from django_pqjobs import JobContext, job


@dataclass
class Refund:
    order_id: int


@job("snippet.refund")
def refund(ctx: JobContext, args: Refund) -> str:
    return str(args.order_id)


job_id: int = refund.enqueue(Refund(1), queue="billing")
refund.enqueue_on_commit(Refund(2), using="default")
refund.enqueue({"order_id": 3})
refund.enqueue(Refund(4), colour="red")
"""


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_type_checker_sees_the_arguments_where_a_typed_job_is_enqueued(tmp_path):
    """`send.enqueue(...)` is typed by the handler's annotation: mypy flags a payload of
    another type and an unknown option, and nothing else."""
    snippet = tmp_path / "snippet.py"
    snippet.write_text(TYPED_CALLS)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", str(snippet)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=bound(280),
    )
    errors = [
        line.split(": error: ", 1)[1] for line in done.stdout.splitlines() if ": error: " in line
    ]
    assert errors == [
        'Argument 1 to "enqueue" of "TypedJob" has incompatible type "dict[str, int]"; '
        'expected "Refund"  [arg-type]',
        'Unexpected keyword argument "colour" for "enqueue" of "TypedJob"  [call-arg]',
    ], done.stdout + done.stderr


def test_a_typed_job_enqueues_itself():
    from tests.testapp.jobs import Point, typed_noop

    job_id = typed_noop.enqueue(Point(1, 2), queue="typed")
    job = Job.objects.get(pk=job_id)
    assert (job.job_type, job.queue, job.payload) == (
        "tests.typed_noop",
        "typed",
        {"x": 1, "y": 2, "label": ""},
    )
    with pytest.raises(PayloadError, match="expected int"):
        typed_noop.enqueue(Point("1", 2))  # type: ignore[arg-type]


@dataclasses.dataclass
class Shapes:
    mode: typing.Literal["fast", "slow"]
    pair: tuple[int, str]
    many: tuple[int, ...]
    prices: dict[str, Decimal]
    due: date | None = None
    anything: typing.Any = None


def test_literals_tuples_dicts_and_optionals_round_trip_and_are_checked():
    shapes = Arguments(Shapes, "Shapes")
    value = Shapes("fast", (1, "a"), (1, 2, 3), {"tea": Decimal("2.5")}, date(2026, 1, 2), [1])
    stored = shapes.to_payload(value, "t")
    assert stored == {
        "mode": "fast",
        "pair": [1, "a"],
        "many": [1, 2, 3],
        "prices": {"tea": "2.5"},
        "due": "2026-01-02",
        "anything": [1],
    }
    assert shapes.from_payload(stored) == value
    assert shapes.from_payload({**stored, "due": None}).due is None
    for bad, error in (
        ({**stored, "mode": "medium"}, "mode: expected one of ('fast', 'slow')"),
        ({**stored, "pair": [1, 2]}, "pair[1]: expected str, got int 2"),
        ({**stored, "pair": [1]}, "pair: expected 2 items, got 1"),
        ({**stored, "prices": {"tea": "free"}}, "prices['tea']: expected Decimal"),
        ({**stored, "due": "soon"}, "due: expected datetime.date | None, got str"),
    ):
        with pytest.raises(PayloadError, match=re.escape(error)):
            shapes.to_payload(bad, "t")
