"""Typed task parameters (django_pqjobs/tasks/typed.py): arguments of a parameter annotated
with a dataclass, a TypedDict, a pydantic model, a date, a Decimal, an Enum... are checked and
stored as JSON at enqueue, and rebuilt as their types in the worker.

Each test runs once per framework installed (``tasks`` fixture). A job type (a task's path)
belongs to one task, so each task below is declared once per framework: ``<name>_builtin``
for django.tasks, ``<name>_backport`` for django_tasks, both calling the same body.
"""

from __future__ import annotations

import enum
import re
import sys
import types
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, TypedDict

import pytest
from django.db import connection
from pydantic import BaseModel

from django_pqjobs.models import Job
from django_pqjobs.registry import registry
from django_pqjobs.tasks import TaskArgumentsError
from django_pqjobs.tasks.binding import bound_task
from django_pqjobs.testing import drain
from tests.helpers import documented_block

from .tasks_apps import framework

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = uuid.UUID("12345678-1234-5678-1234-567812345678")


class Status(enum.Enum):
    PAID = "paid"
    REFUNDED = "refunded"


class Colour(enum.IntEnum):
    RED = 1
    BLUE = 2


@dataclass(frozen=True)
class Address:
    name: str
    email: str


@dataclass(frozen=True)
class Line:
    sku: str
    price: Decimal
    colour: Colour = Colour.RED


@dataclass(frozen=True)
class Receipt:
    order_id: int
    amount: Decimal
    placed_at: datetime
    ships_on: date
    token: uuid.UUID
    status: Status
    ship_to: Address
    lines: list[Line] = field(default_factory=list)


class Notice(TypedDict):
    to: str
    sent_on: date


class Invoice(BaseModel):
    number: str
    amount: Decimal


# What the tasks were called with, by the task's name (drain runs them in this process).
RECEIVED: dict[str, list[Any]] = {}


@pytest.fixture(autouse=True)
def _nothing_received() -> None:
    RECEIVED.clear()


def received(name: str, *call: Any) -> None:
    RECEIVED.setdefault(name, []).append(call)


def _send_receipt(receipt: Receipt, copy_to: list[Address] | None, note: str) -> str:
    received("send_receipt", receipt, copy_to, note)
    return f"{receipt.order_id}: {receipt.amount}"


def send_receipt_builtin(
    receipt: Receipt, copy_to: list[Address] | None = None, note: str = ""
) -> str:
    return _send_receipt(receipt, copy_to, note)


def send_receipt_backport(
    receipt: Receipt, copy_to: list[Address] | None = None, note: str = ""
) -> str:
    return _send_receipt(receipt, copy_to, note)


def notify_builtin(notice: Notice) -> None:
    received("notify", notice)


def notify_backport(notice: Notice) -> None:
    received("notify", notice)


def bill_builtin(invoice: Invoice) -> str:
    return f"{invoice.number}: {invoice.amount}"


def bill_backport(invoice: Invoice) -> str:
    return f"{invoice.number}: {invoice.amount}"


async def remind_builtin(on: date, *lines: Line) -> str:
    received("remind", on, lines)
    return on.isoformat()


async def remind_backport(on: date, *lines: Line) -> str:
    received("remind", on, lines)
    return on.isoformat()


def stamp_builtin(context: Any, on: date) -> str:
    return f"attempt {context.attempt}: {type(on).__name__} {on.isoformat()}"


def stamp_backport(context: Any, on: date) -> str:
    return f"attempt {context.attempt}: {type(on).__name__} {on.isoformat()}"


# On the "retrying" backend (two attempts): a stale argument must fail at the first.
def ship_builtin(receipt: Receipt) -> int:
    return receipt.order_id


def ship_backport(receipt: Receipt) -> int:
    return receipt.order_id


def declared(tasks: types.ModuleType, name: str, **options: Any) -> Any:
    """This module's task ``name`` as a task of ``tasks``'s framework."""
    suffix = "builtin" if tasks.FAMILY == "django.tasks" else "backport"
    return framework(tasks.FAMILY).task(**options)(globals()[f"{name}_{suffix}"])


def job_rows() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pqjobs_job")
        return int(cursor.fetchone()[0])


def receipt(**changes: Any) -> Receipt:
    fields: dict[str, Any] = {
        "order_id": 7,
        "amount": Decimal("12.50"),
        "placed_at": datetime(2026, 11, 27, 9, 30, tzinfo=UTC),
        "ships_on": date(2026, 12, 1),
        "token": TOKEN,
        "status": Status.PAID,
        "ship_to": Address("Ada", "ada@example.com"),
        "lines": [Line("book", Decimal("12.50")), Line("pen", Decimal("0.99"), Colour.BLUE)],
    }
    return Receipt(**{**fields, **changes})


RECEIPT_JSON = {
    "order_id": 7,
    "amount": "12.50",
    "placed_at": "2026-11-27T09:30:00+00:00",
    "ships_on": "2026-12-01",
    "token": str(TOKEN),
    "status": "paid",
    "ship_to": {"name": "Ada", "email": "ada@example.com"},
    "lines": [
        {"sku": "book", "price": "12.50", "colour": 1},
        {"sku": "pen", "price": "0.99", "colour": 2},
    ],
}


# --- enqueue: checked before anything is written -------------------------------------------


def test_a_dataclass_argument_that_does_not_fit_is_refused_before_anything_is_written(tasks):
    send_receipt = declared(tasks, "send_receipt")
    task_path = send_receipt.module_path
    refused = [
        ((receipt(amount="x"),), {}, "argument receipt.amount: expected Decimal, got str 'x'"),
        (
            (receipt(lines=[Line("book", Decimal(1), colour=3)]),),
            {},
            "argument receipt.lines[0].colour: expected Colour, got int 3",
        ),
        (
            (receipt(),),
            {"copy_to": [Address("Bob", "b@example.com"), "c@example.com"]},
            "argument copy_to: expected list[tests.integration.test_tasks_typed.Address] | None",
        ),
        (({"order_id": 7},), {}, "argument receipt: Receipt needs 'amount'"),
        ((), {}, "missing a required argument: 'receipt'"),
        ((receipt(),), {"cc": []}, "got an unexpected keyword argument 'cc'"),
        # a plain parameter beside typed ones keeps the JSON rule
        ((receipt(),), {"note": {"a"}}, "argument kwargs['note'] is a set"),
    ]
    for args, kwargs, message in refused:
        with pytest.raises(TaskArgumentsError, match=re.escape(message)) as caught:
            send_receipt.enqueue(*args, **kwargs)
        assert f"task {task_path!r}" in str(caught.value)
        assert isinstance(caught.value, TypeError)
    assert job_rows() == 0


def test_a_typeddict_argument_that_does_not_fit_is_refused_before_anything_is_written(tasks):
    notify = declared(tasks, "notify")
    refused = [
        ({"to": "a@example.com", "sent_on": "2026-11-27"}, "notice.sent_on: expected date"),
        ({"to": "a@example.com"}, "notice: Notice needs 'sent_on'"),
        (
            {"to": "a@example.com", "sent_on": date(2026, 11, 27), "cc": "b"},
            "notice: Notice has no field 'cc'",
        ),
    ]
    for notice, message in refused:
        with pytest.raises(TaskArgumentsError, match=re.escape(message)) as caught:
            notify.enqueue(notice)
        assert notify.module_path in str(caught.value)
    assert job_rows() == 0

    result = notify.enqueue({"to": "a@example.com", "sent_on": date(2026, 11, 27)})
    assert result.args == [{"to": "a@example.com", "sent_on": "2026-11-27"}]
    drain(raise_errors=True)
    assert RECEIVED["notify"] == [({"to": "a@example.com", "sent_on": date(2026, 11, 27)},)]


def test_a_pydantic_argument_that_does_not_fit_is_refused_before_anything_is_written(tasks):
    bill = declared(tasks, "bill")
    with pytest.raises(TaskArgumentsError, match=r"argument invoice\.amount: .*decimal") as caught:
        bill.enqueue({"number": "A-1", "amount": "lots"})
    assert bill.module_path in str(caught.value)
    with pytest.raises(TaskArgumentsError, match="argument invoice: expected Invoice, got str"):
        bill.enqueue("A-1")
    assert job_rows() == 0

    first = bill.enqueue(Invoice(number="A-1", amount=Decimal("10.5")))
    second = bill.enqueue(invoice={"number": "A-2", "amount": "3"})
    assert (first.args, second.kwargs) == (
        [{"number": "A-1", "amount": "10.5"}],
        {"invoice": {"number": "A-2", "amount": "3"}},
    )
    drain(raise_errors=True)
    for result in (first, second):
        result.refresh()
    assert [first.return_value, second.return_value] == ["A-1: 10.5", "A-2: 3"]


# --- the worker: rebuilt as the types ----------------------------------------------------------


def test_nested_dataclasses_dates_decimals_enums_and_uuids_round_trip_through_the_worker(tasks):
    send_receipt = declared(tasks, "send_receipt")
    remind = declared(tasks, "remind")
    copies = [Address("Bob", "bob@example.com")]

    result = send_receipt.enqueue(receipt(), copy_to=copies, note="thanks")

    job = Job.objects.get(pk=int(result.id))
    assert job.payload == {
        "args": [RECEIPT_JSON],
        "kwargs": {"copy_to": [{"name": "Bob", "email": "bob@example.com"}], "note": "thanks"},
        "task_backend": "default",
    }
    # the TaskResult shows the arguments as stored: their JSON form
    assert (result.args, result.kwargs) == (job.payload["args"], job.payload["kwargs"])
    reminded = remind.enqueue(date(2026, 12, 1), Line("book", Decimal("12.50")))
    stamped = declared(tasks, "stamp", takes_context=True).enqueue(on=date(2026, 12, 2))

    assert [run.outcome for run in drain(raise_errors=True)] == ["done"] * 3

    [(got, got_copies, note)] = RECEIVED.pop("send_receipt")
    assert (got, got_copies, note) == (receipt(), copies, "thanks")
    assert type(got.amount) is Decimal and type(got.placed_at) is datetime
    assert type(got.ships_on) is date and type(got.token) is uuid.UUID
    assert got.status is Status.PAID and got.lines[1].colour is Colour.BLUE
    assert RECEIVED["remind"] == [(date(2026, 12, 1), (Line("book", Decimal("12.50")),))]
    for done in (result, reminded, stamped):
        done.refresh()
    fw = framework(tasks.FAMILY)
    assert result.status is fw.TaskResultStatus.SUCCESSFUL
    assert (result.return_value, reminded.return_value) == ("7: 12.50", "2026-12-01")
    assert stamped.return_value == "attempt 1: date 2026-12-02"
    assert result.args == [RECEIPT_JSON]

    # given by keyword, or as a dict of the dataclass's shape: the same call
    by_keyword = send_receipt.using(priority=5).enqueue(receipt=receipt())
    as_dict = send_receipt.enqueue(RECEIPT_JSON)
    assert by_keyword.kwargs == {"receipt": RECEIPT_JSON} and as_dict.args == [RECEIPT_JSON]
    drain(raise_errors=True)
    assert RECEIVED["send_receipt"] == [(receipt(), None, "")] * 2


def test_a_stored_argument_that_no_longer_fits_fails_its_job_alone_and_for_good(tasks):
    ship = declared(tasks, "ship", backend="retrying")
    stale = ship.enqueue(receipt(order_id=1))
    fine = ship.enqueue(receipt(order_id=2))
    # an older deploy's shape: Receipt.amount was a number of cents then
    old_shape = {**RECEIPT_JSON, "amount": "1250 cents"}
    Job.objects.filter(pk=int(stale.id)).update(
        payload={"args": [old_shape], "kwargs": {}, "task_backend": "retrying"}
    )

    runs = {run.job_id: run for run in drain()}

    assert runs[int(fine.id)].outcome == "done"
    assert runs[int(stale.id)].outcome == "failed"
    job = Job.objects.get(pk=int(stale.id))
    assert (job.status, job.attempts, job.max_attempts) == ("failed", 1, 2)  # no retry
    assert job.error_type == "PermanentError"
    assert f"task {ship.module_path!r}" in job.last_error
    assert "receipt.amount: expected Decimal, got str '1250 cents'" in job.last_error
    stale.refresh()
    fine.refresh()
    status = framework(tasks.FAMILY).TaskResultStatus
    assert (stale.status, fine.status, fine.return_value) == (status.FAILED, status.SUCCESSFUL, 2)
    assert stale.errors[-1].exception_class_path == "django_pqjobs.errors.PermanentError"


# --- untyped tasks: as before ------------------------------------------------------------------


def test_tasks_without_typed_parameters_are_unchanged(tasks):
    """The test apps' tasks take ints, strings and dicts: no plan, the JSON rule alone."""
    for name in ("add", "record", "noop", "describe_context"):
        assert bound_task(registry.get(f"{tasks.__name__}.{name}")).typed is None, name
    assert bound_task(registry.get(declared(tasks, "send_receipt").module_path)).typed

    result = tasks.add.enqueue(2, b=3)
    assert Job.objects.get(pk=int(result.id)).payload == {
        "args": [2],
        "kwargs": {"b": 3},
        "task_backend": "default",
    }
    # no signature check either: a wrong call fails in the worker, as it always did
    wrong = tasks.add.enqueue(1, 2, 3)
    with pytest.raises(TaskArgumentsError, match=re.escape("argument args[0] is a datetime")):
        tasks.add.enqueue(datetime(2026, 1, 1, tzinfo=UTC), 1)
    runs = {run.job_id: run for run in drain()}
    assert runs[int(result.id)].outcome == "done" and runs[int(wrong.id)].outcome == "failed"
    result.refresh()
    assert result.return_value == 5


# --- the guide ----------------------------------------------------------------------------------


def test_the_guide_s_typed_arguments_example_runs_as_written(tasks):
    code = documented_block("guides/tasks-framework.md", "tasks-typed-arguments", "python")
    code = code.replace("from django.tasks import", f"from {tasks.FAMILY} import")
    # a module of the tests package, as a worker would import it
    name = f"tests.integration.guide_typed_tasks_{tasks.FAMILY.replace('.', '_')}"
    module = types.ModuleType(name)
    sys.modules[name] = module
    try:
        exec(compile(code, "tasks-framework.md", "exec", dont_inherit=True), vars(module))
        result = module.result
        assert result.args == [{"order_id": 42, "amount": "9.90", "paid_on": "2026-11-27"}]
        assert [run.outcome for run in drain()] == ["done"]
        result.refresh()
        assert result.return_value == "42: 9.90 on 2026-11-27"
        with pytest.raises(
            TaskArgumentsError, match=re.escape("receipt.amount: expected Decimal, got float")
        ):
            module.send_receipt.enqueue(module.Receipt(1, 9.9, date(2026, 11, 27)))
    finally:
        registry.unregister(f"{name}.send_receipt")
        del sys.modules[name]
