"""One option set (issue 41 item 5): every public entry point takes the options its place
declares in ``specification.py`` (one TypedDict per place, ``**options: Unpack[...]``), and
each of them is stored: every entry point x every option, proven on the job row (or the
registered type, or the task's declaration), and ``pqjobs_enqueue``'s arguments are the
declared options' and the ones Python derives."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import DataError, connection
from django.utils import timezone

from django_pqjobs import (
    DuplicateJob,
    InvalidJobOption,
    enqueue_batch,
    enqueue_job,
    enqueue_many,
    enqueue_on_commit,
    job,
    specification,
)
from django_pqjobs.context import JobContext
from django_pqjobs.errors import UnknownJobOption
from django_pqjobs.graphs import JobGraph
from django_pqjobs.models import Job
from django_pqjobs.registry import registry
from django_pqjobs.specification import OPTIONS, PLACES, names_at
from django_pqjobs.tasks.options import TaskOptions, task_options

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
TYPE = "tests.option_set"
NOW = timezone.now()
LATER = NOW + timedelta(days=1)
LATEST = NOW + timedelta(days=2)

# (entry point, its options' keyword, the TypedDict it unpacks)
SIGNATURES = [
    (job, "options", "TypeOptions"),
    (enqueue_job, "options", "EnqueueOptions"),
    (enqueue_on_commit, "options", "EnqueueOptions"),
    (enqueue_many, "given", "ManyOptions"),
    (enqueue_batch, "options", "ManyOptions"),
    (task_options, "options", "TaskOptionValues"),
    (JobContext.enqueue, "options", "EnqueueOptions"),
    (JobContext.run_child, "options", "EnqueueOptions"),
    (JobGraph.add, "options", "JobOptions"),
]


@pytest.mark.parametrize(
    ("entry", "keyword", "declared"), SIGNATURES, ids=[e.__qualname__ for e, _, _ in SIGNATURES]
)
def test_every_entry_point_takes_its_places_options_typed_once(entry, keyword, declared):
    parameter = inspect.signature(entry).parameters[keyword]
    assert parameter.kind is inspect.Parameter.VAR_KEYWORD
    assert parameter.annotation == f"Unpack[{declared}]"
    # no option is also spelt out as a keyword of its own beside them (a graph's depends_on
    # names the graph's jobs)
    spelt = set(inspect.signature(entry).parameters) & set(OPTIONS)
    assert spelt == ({"depends_on"} if entry is JobGraph.add else set())


def test_each_place_declares_options_that_have_a_reader():
    for place, declared in PLACES.items():
        assert set(names_at(place)) == declared.__optional_keys__, place
    assert set().union(*(names_at(place) for place in PLACES)) == set(OPTIONS)
    assert set(names_at("many")) < set(names_at("call"))  # a bulk call is a set of jobs


@pytest.fixture
def declared_types():
    names: list[str] = []

    def declare(name: str, **options: Any) -> str:
        job(name, **options)(lambda ctx: None)
        names.append(name)
        return name

    declare(TYPE, concurrency=5)  # a concurrency_key needs a limit
    yield declare
    for name in names:
        registry.unregister(name)


Enqueue = Callable[[dict[str, Any]], int]


@dataclass(frozen=True)
class Case:
    """An option's value, the options it needs beside it, and the proof it was stored: on
    the row of a job enqueued with it (``row``), or by what a second enqueue meets
    (``behaviour``, given the entry point's enqueue)."""

    value: Any
    beside: dict[str, Any] = field(default_factory=dict)
    row: Callable[[Job], bool] | None = None
    behaviour: Callable[[Enqueue], None] | None = None


def _duplicate_refused(enqueue: Enqueue) -> None:
    enqueue({"a": 1})
    with pytest.raises(DuplicateJob):
        enqueue({"a": 1})


def _capped_push_back(enqueue: Enqueue) -> None:
    first = enqueue({"a": 1})
    Job.objects.filter(pk=first).update(created_at=timezone.now() - timedelta(minutes=50))
    assert enqueue({"a": 2}) == first
    # pushed back an hour, but never past an hour after it was enqueued: ~10 minutes left
    assert Job.objects.get(pk=first).run_after < timezone.now() + timedelta(minutes=15)


def _second_waits(enqueue: Enqueue) -> None:
    enqueue({"a": 1})
    assert Job.objects.get(pk=enqueue({"a": 2})).status == "waiting"


def _after(seconds: float) -> Callable[[Job], bool]:
    return lambda row: row.run_after > timezone.now() + timedelta(seconds=seconds)


CASES: dict[str, Case] = {
    "queue": Case("other", row=lambda row: row.queue == "other"),
    "priority": Case("high", row=lambda row: row.priority == 50),
    "max_attempts": Case(9, row=lambda row: row.max_attempts == 9),
    "timeout": Case(42, row=lambda row: row.timeout_seconds == 42),
    "dedupe": Case("error", {"unique_by": ["a"]}, behaviour=_duplicate_refused),
    "dedupe_key": Case("key-1", row=lambda row: row.dedupe_key == "key-1"),
    "unique_for": Case("1h", row=lambda row: row.unique_until is not None),
    "unique_states": Case("done", row=lambda row: row.unique_states == 1),
    "unique_by": Case(["a"], row=lambda row: row.dedupe_key is not None),
    "debounce": Case(600, row=lambda row: row.dedupe_key == "debounce" and _after(500)(row)),
    "debounce_max": Case("1h", {"debounce": "1h"}, behaviour=_capped_push_back),
    "expires_in": Case("10m", row=lambda row: row.expires_at is not None),
    "deadline": Case(LATEST, row=lambda row: row.expires_at == LATEST),
    "sequence": Case("s-1", behaviour=_second_waits),
    "fair_key": Case("tenant-1", row=lambda row: row.fair_key == "tenant-1"),
    "concurrency_key": Case(
        "ck-1", {"concurrency": 5}, row=lambda row: row.concurrency_key == "ck-1"
    ),
    "run_after": Case(LATER, row=lambda row: row.run_after == LATER),
    "delay": Case(7200, row=_after(7000)),
    "depends_on": Case(None, row=lambda row: row.status == "waiting"),
    "on_dependency_failure": Case(
        "run", {"depends_on": None}, row=lambda row: row.on_dependency_failure == "run"
    ),
    # what only a type declares: the registered type holds it
    "backoff": Case("exponential"),
    "sequence_on_failure": Case("continue", {"sequence": "s-2"}),
    "atomic": Case(True),
    "encrypted": Case(["card"]),
    "version": Case(2),
    "upgrade": Case(lambda payload, version: payload, {"version": 2}),
    "isolation": Case("process"),
    "memory_limit": Case("64M", {"isolation": "process"}),
    "concurrency": Case(3, row=lambda row: row.concurrency_limit == 3),
    "max_waiting": Case(5, {"concurrency": 3}),
    "when_waiting_full": Case("skip"),
    "rate": Case("5/m", row=lambda row: row.rate_limit == 5),
    "rate_key": Case("r-1", {"rate": "5/m"}, row=lambda row: row.rate_key == "r-1"),
}


def _given(name: str, place: str) -> dict[str, Any]:
    case = CASES[name]
    given = {**case.beside, name: case.value}
    if "depends_on" in given:  # a job of its own to wait for
        given["depends_on"] = [enqueue_job(TYPE, {}, run_after=LATEST)]
    return {key: value for key, value in given.items() if key in names_at(place)}


def _newest() -> int:
    return Job.objects.order_by("-id").values_list("id", flat=True)[0]


def _on_commit(job_type: str, payload: Any, **options: Any) -> int:
    enqueue_on_commit(job_type, payload, **options)  # no transaction: enqueued at once
    return _newest()


ENTRIES: dict[str, tuple[str, Callable[..., int]]] = {
    "enqueue_job": ("call", enqueue_job),
    "enqueue_on_commit": ("call", _on_commit),
    "enqueue_many": ("many", lambda t, p, **o: enqueue_many(t, [p], **o)[0]),
    "enqueue_batch": ("many", lambda t, p, **o: enqueue_batch(t, [p], **o).job_ids[0]),
}


def _prove(name: str, enqueue: Enqueue, stored: Callable[[], bool] | None = None) -> None:
    case = CASES[name]
    if case.behaviour is not None:
        case.behaviour(enqueue)
    elif case.row is not None:
        row = Job.objects.get(pk=enqueue({"a": 1}))
        assert case.row(row), (name, vars(row))
    else:
        assert stored is not None and stored(), name


@pytest.mark.parametrize(
    ("entry", "name"),
    [(entry, name) for entry, (place, _) in ENTRIES.items() for name in names_at(place)],
)
def test_every_entry_point_stores_every_option_it_takes(entry, name, declared_types):
    place, call = ENTRIES[entry]
    given = _given(name, place)
    _prove(name, lambda payload: call(TYPE, payload, **given))


@pytest.mark.parametrize("name", names_at("type"))
def test_job_stores_every_option_it_takes(name, declared_types):
    given = _given(name, "type")
    declared = declared_types(f"{TYPE}.{name}", **given)
    reader = OPTIONS[name].reader("type")
    _prove(
        name,
        lambda payload: enqueue_job(declared, payload),
        lambda: getattr(registry.get(declared), name) == reader(CASES[name].value, name),
    )


@pytest.mark.parametrize("name", names_at("task"))
def test_task_options_store_every_option_they_take(name):
    given = _given(name, "task")

    def send() -> None: ...

    task_options(**given)(send)
    declared: TaskOptions = send.pqjobs_task_options
    assert getattr(declared, name) == OPTIONS[name].reader("task")(CASES[name].value, name)


def test_a_misspelt_option_is_refused_by_name_at_every_entry_point(declared_types):
    calls = [
        lambda: job("tests.option_set.typo", queeu="x"),
        lambda: enqueue_job(TYPE, {}, queeu="x"),
        lambda: enqueue_on_commit(TYPE, {}, queeu="x"),
        lambda: enqueue_many(TYPE, [{}], queeu="x"),
        lambda: enqueue_batch(TYPE, [{}], queeu="x"),
        lambda: task_options(queeu="x"),
        # a place's own: enqueue_many cannot apply a sequence, @job no run_after
        lambda: enqueue_many(TYPE, [{}], sequence="s"),
        lambda: job("tests.option_set.typo", run_after=LATER),
    ]
    for call in calls:
        with pytest.raises(UnknownJobOption, match="unknown option") as refused:
            call()
        # a TypeError as Python's own for an unexpected keyword, and an InvalidJobOption
        assert isinstance(refused.value, TypeError)
        assert isinstance(refused.value, InvalidJobOption)
    assert not Job.objects.exists()
    assert registry.get("tests.option_set.typo") is None


def _enqueue_arguments() -> set[str]:
    """The fields of the one row pqjobs_enqueue takes (pqjobs_job_spec)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT a.attname
            FROM pg_proc p
            JOIN pg_type t ON t.oid = p.proargtypes[0]
            JOIN pg_attribute a ON a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
            WHERE p.proname = 'pqjobs_enqueue' AND p.pronargs = 1
              AND p.pronamespace = current_schema()::regnamespace
            """
        )
        return {row[0] for row in cursor.fetchall()}


def test_pqjobs_enqueue_takes_the_declared_options_and_what_python_derives():
    arguments = _enqueue_arguments()
    stored = {option.sql for option in OPTIONS.values() if option.sql is not None}
    assert stored <= arguments
    assert arguments == stored | specification.SQL_DERIVED


def test_enqueue_job_sends_only_fields_the_job_row_has():
    """Python writes the spec by the fields' names: every name it can write is a field."""
    from django_pqjobs.enqueue import job_spec, prepare

    job = prepare(
        "t",
        {},
        run_after=LATER,
        timeout=5,
        dedupe_key="k",
        unique_for=60,
        unique_states="done",
        expires_in=3600,
        fair_key="f",
    )
    sent = set(json.loads(job_spec(job, '{"t": 1}', "pqjobs")))
    assert sent <= _enqueue_arguments()
    assert {"run_at", "timeout_seconds", "unique_for", "expires_in", "fair_key"} <= sent


@pytest.mark.parametrize("name", [o.name for o in OPTIONS.values() if o.sql is not None])
def test_pqjobs_enqueue_stores_every_option_it_takes(name):
    """An SQL caller gives the read value (seconds, a mask) through the option's field."""
    option = OPTIONS[name]
    value = option.read(CASES[name].value, name)
    # what the database requires beside it (Python derives these)
    spec: dict[str, Any] = {"job_type": TYPE, "queue": "default", "max_attempts": 3}
    if name == "concurrency_key":
        spec["concurrency_limit"] = 1
    if name in ("unique_for", "unique_states"):
        spec["dedupe_key"] = "k"  # a unique job holds a key
    spec[option.sql] = value.isoformat() if isinstance(value, datetime) else value
    with connection.cursor() as cursor:
        cursor.execute("SELECT pqjobs_enqueue(pqjobs_job(%s::jsonb))", [json.dumps(spec)])
        (job_id,) = cursor.fetchone()
    proof = CASES[name].row
    assert proof is not None
    assert proof(Job.objects.get(pk=job_id)), name


def test_pqjobs_job_refuses_a_field_the_job_row_lacks():
    with connection.cursor() as cursor, pytest.raises(DataError, match=r"unknown field.*'queu'"):
        cursor.execute(
            "SELECT pqjobs_job(%s::jsonb)",
            ['{"job_type": "t", "queu": "default", "max_attempts": 1}'],
        )


def test_pqjobs_job_names_the_type_of_a_spec_that_is_no_object_never_its_text():
    """A spec that is not a JSON object may still hold a payload: the error says what type
    it is and none of its text."""
    with connection.cursor() as cursor:
        with pytest.raises(DataError, match=r"JSON object, got a JSON array") as refused:
            cursor.execute("SELECT pqjobs_job(%s::jsonb)", ['[{"card": "4111-secret"}]'])
        assert "secret" not in str(refused.value)


def test_mypy_refuses_a_misspelt_option_in_typed_code(tmp_path):
    snippet = tmp_path / "uses_pqjobs.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from django_pqjobs import enqueue_batch, enqueue_job, enqueue_many, job

            enqueue_job("t", {}, queue="q", priority="high", fair_key="k")
            enqueue_job("t", {}, queeu="q")
            enqueue_many("t", [{}], sequence="s")
            enqueue_batch("t", [{}], fair_key=1)
            job("t", max_attempts="3")
            """
        )
    )
    result = subprocess.run(
        # the project's configuration (its Django plugin), on the snippet alone
        [sys.executable, "-m", "mypy", str(snippet)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    errors = [
        line for line in result.stdout.splitlines() if ": error:" in line and snippet.name in line
    ]
    assert [line.split(":")[1] for line in errors] == ["5", "6", "7", "8"], result.stdout
    assert '"queeu"' in errors[0]
    assert '"sequence"' in errors[1]
