import datetime
import decimal
import json
import uuid
from pathlib import Path

import pytest
from django.test import override_settings
from django.utils.dateparse import parse_datetime, parse_time
from shop.models import Order

from django_pqjobs import (
    InvalidJobOption,
    JobTypeAlreadyRegistered,
    PayloadError,
    enqueue_job,
    job,
)
from django_pqjobs.enqueue import prepare, serialize_payload
from django_pqjobs.policies import StepBackoff
from django_pqjobs.registry import registry


@pytest.fixture
def cleanup_types():
    names: list[str] = []
    yield names
    for name in names:
        registry.unregister(name)


def test_job_registers_with_options(cleanup_types):
    cleanup_types.append("unit.options")

    @job(
        "unit.options",
        queue="emails",
        priority=7,
        max_attempts=2,
        timeout=30,
        backoff=[1, 2],
        dedupe="replace",
        atomic=True,
    )
    def handler(ctx):
        return None

    jt = registry.get("unit.options")
    assert jt is not None
    assert (jt.queue, jt.priority, jt.max_attempts, jt.timeout, jt.dedupe, jt.atomic) == (
        "emails",
        7,
        2,
        30.0,
        "replace",
        True,
    )
    assert isinstance(jt.backoff, StepBackoff)
    assert handler.job_type == "unit.options"


def test_autodiscovered_jobs_modules_are_registered():
    assert "send_receipt" in registry  # testproject/shop/jobs.py
    assert "tests.noop" in registry  # tests/testapp/jobs.py
    assert registry.get("tests.async_echo").is_async


def test_duplicate_registration_names_both_functions(cleanup_types):
    cleanup_types.append("unit.dup")

    @job("unit.dup")
    def first(ctx):
        return None

    with pytest.raises(JobTypeAlreadyRegistered, match=r"first.*second"):

        @job("unit.dup")
        def second(ctx):
            return None


def test_default_name_is_the_dotted_path(cleanup_types):
    @job()
    def unnamed(ctx):
        return None

    cleanup_types.append(unnamed.job_type)
    assert unnamed.job_type.endswith("test_default_name_is_the_dotted_path.<locals>.unnamed")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"queue": ""}, "queue"),
        ({"priority": "urgent"}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout": -3}, "timeout"),
        ({"backoff": "sometimes"}, "backoff"),
        ({"dedupe": "merge"}, "dedupe"),
    ],
)
def test_bad_job_options_fail_at_declaration(options, message):
    with pytest.raises(InvalidJobOption, match=message):
        job("unit.bad", **options)


def test_bare_decorator_is_refused():
    with pytest.raises(InvalidJobOption, match="bare"):

        @job
        def handler(ctx):
            return None


def test_payload_uses_djangos_encoder():
    payload = {
        "when": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        "amount": decimal.Decimal("1.10"),
        "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    }
    text = serialize_payload("t", payload)
    assert '"amount":"1.10"' in text and "12345678-1234" in text and "2026-01-02T03:04:05Z" in text
    assert serialize_payload("t", None) == "{}"


@pytest.mark.parametrize(
    "payload, message",
    [
        ({"f": object()}, "not JSON-serialisable"),
        ({"s": {1, 2}}, "not JSON-serialisable"),
        ({"x": float("nan")}, "not JSON-serialisable"),
        ({"s": "a\x00b"}, "NUL"),
    ],
)
def test_bad_payloads_name_the_job_type(payload, message):
    with pytest.raises(PayloadError, match=f"'my.type'.*{message}|{message}.*'my.type'"):
        serialize_payload("my.type", payload)


def test_datetimes_and_times_keep_their_microseconds():
    moment = datetime.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=datetime.UTC)
    paris = moment.astimezone(datetime.timezone(datetime.timedelta(hours=1)))
    payload = {"utc": moment, "paris": paris, "naive": moment.replace(tzinfo=None)}
    payload["time"] = datetime.time(3, 4, 5, 7)
    decoded = json.loads(serialize_payload("t", payload))
    assert decoded == {
        "utc": "2026-01-02T03:04:05.123456Z",
        "paris": "2026-01-02T04:04:05.123456+01:00",
        "naive": "2026-01-02T03:04:05.123456",
        "time": "03:04:05.000007",
    }
    # what a handler reads back equals what was sent; payloads written before, with
    # milliseconds, still read with the same parser
    assert parse_datetime(decoded["utc"]) == parse_datetime(decoded["paris"]) == moment
    assert parse_time(decoded["time"]) == payload["time"]
    assert parse_datetime("2026-01-02T03:04:05.123Z") == moment.replace(microsecond=123000)
    with pytest.raises(PayloadError, match="timezone-aware times"):
        serialize_payload("t", {"at": datetime.time(3, tzinfo=datetime.UTC)})


PAYLOAD_ERROR = "payload for job type 'send_receipt' is not JSON-serialisable: "


@pytest.mark.parametrize(
    "payload, problem",
    [
        (
            {"order": Order(pk=7, email="a@example.com", total=1)},
            "the value at ['order'] is a model instance (shop.Order); pass its primary key "
            "instead (e.g. order.pk) and fetch the object where it is used",
        ),
        (
            Order(pk=7),
            "it is a model instance (shop.Order); pass its primary key instead (e.g. "
            "order.pk) and fetch the object where it is used",
        ),
        (
            {"order_id": 7, "lines": [1, {"tags": {"gift"}}]},
            "the value at ['lines'][1]['tags'] is a set; pass a list instead (e.g. sorted(...))",
        ),
        ({1, 2}, "it is a set; pass a list instead (e.g. sorted(...))"),
        (
            ({"skus": frozenset()},),
            "the value at [0]['skus'] is a frozenset; pass a list instead (e.g. sorted(...))",
        ),
        (
            {"file": Path("/tmp/x.csv")},
            "the value at ['file'] is of type pathlib.PosixPath, which JSON cannot hold",
        ),
        ({"raw": b"x"}, "the value at ['raw'] is of type bytes, which JSON cannot hold"),
    ],
)
def test_what_json_cannot_hold_is_named_with_where_it_is_and_what_to_pass(payload, problem):
    with pytest.raises(PayloadError) as caught:
        enqueue_job("send_receipt", payload)  # refused before the database is asked
    assert str(caught.value) == PAYLOAD_ERROR + problem
    assert caught.value.__suppress_context__  # one error, not the encoder's besides


def test_escaped_backslash_u0000_text_is_allowed():
    assert serialize_payload("t", {"s": "\\u0000"})  # a literal backslash, not a NUL


def test_self_referencing_payload_is_refused():
    loop: dict = {}
    loop["self"] = loop
    with pytest.raises(PayloadError, match="'t'"):
        serialize_payload("t", loop)


def test_oversized_payload_reports_size_and_limit():
    with (
        override_settings(PQJOBS={"PAYLOAD_MAX_BYTES": 100}),
        pytest.raises(PayloadError, match=r"'big'.*over the limit of 100 bytes"),
    ):
        serialize_payload("big", {"blob": "x" * 200})


def test_prepare_fills_defaults_from_job_type_then_settings(unknown_job_types_allowed):
    prepared = prepare("send_receipt", {"order_id": 1})
    assert (prepared.queue, prepared.max_attempts, prepared.timeout) == ("emails", 5, 60.0)
    prepared = prepare("not.registered")
    assert (prepared.queue, prepared.priority, prepared.max_attempts, prepared.dedupe) == (
        "default",
        0,
        5,
        "skip",
    )


@pytest.mark.parametrize(
    "options, message",
    [
        ({"delay": -1}, "delay"),
        ({"delay": "soon"}, "delay"),
        ({"run_after": "tomorrow"}, "run_after"),
        ({"run_after": datetime.datetime(2030, 1, 1)}, "timezone-aware"),
        ({"run_after": datetime.datetime.now(datetime.UTC), "delay": 5}, "not both"),
        ({"dedupe_key": ""}, "dedupe_key"),
        ({"dedupe_key": "k" * 256}, "dedupe_key"),
        ({"dedupe": "merge"}, "dedupe"),
        ({"priority": 2**40}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout": 0}, "timeout"),
        ({"queue": ""}, "queue"),
    ],
)
def test_prepare_refuses_bad_options(options, message):
    with pytest.raises(InvalidJobOption, match=message):
        prepare("t", {}, **options)


def test_named_priorities_are_accepted_by_job_enqueue_settings_and_schedules(cleanup_types):
    from django_pqjobs import Priority
    from django_pqjobs.recurrence import build_spec

    cleanup_types.append("unit.urgent")

    @job("unit.urgent", priority=Priority.CRITICAL)
    def handler(ctx):
        return None

    assert registry.get("unit.urgent").priority == 100
    assert prepare("unit.urgent").priority == 100
    assert prepare("unit.urgent", priority="low").priority == -50
    with override_settings(PQJOBS={"DEFAULT_PRIORITY": "high"}):
        assert prepare("t").priority == 50
    spec = build_spec("nightly", "t", interval=60, priority="high")
    assert spec.priority == 50


def test_job_type_name_is_validated():
    with pytest.raises(InvalidJobOption, match="job_type"):
        prepare("", {})
    with pytest.raises(InvalidJobOption, match="job_type"):
        prepare(None, {})  # type: ignore[arg-type]


def test_resolver_supplies_unregistered_types_once(cleanup_types):
    from django_pqjobs.registry import JobType, Registry

    calls: list[str] = []

    def resolver(name: str) -> JobType | None:
        calls.append(name)
        return JobType(name=name, handler=lambda ctx: None) if name.startswith("ok.") else None

    local = Registry()
    local.add_resolver(resolver)
    local.add_resolver(resolver)  # added once
    assert local.resolve("ok.one") is not None
    assert local.resolve("ok.one") is local.get("ok.one")  # registered: not asked again
    assert local.resolve("nope") is None
    assert calls == ["ok.one", "nope"]


def test_isolation_options_are_validated():
    with pytest.raises(InvalidJobOption, match="isolation"):
        job("x", isolation="container")
    with pytest.raises(InvalidJobOption, match="memory_limit needs"):
        job("x", memory_limit="512M")
    with pytest.raises(InvalidJobOption, match="at least 16M"):
        job("x", isolation="process", memory_limit="lots")
    with pytest.raises(InvalidJobOption, match="cannot be combined"):
        job("x", isolation="process", atomic=True)


def test_concurrency_and_rate_keys_are_built_one_way(cleanup_types):
    cleanup_types.append("unit.keyed")

    @job(
        "unit.keyed",
        concurrency=1,
        concurrency_key="tenant:{tenant}",
        rate="5/s",
        rate_key="tenant:{tenant}:user:{user}",
    )
    def keyed(ctx):
        return None

    flows = {
        (flow.concurrency_key, flow.rate_key)
        for flow in (
            prepare("unit.keyed", {"tenant": tenant, "user": "a:b"}).flow
            for tenant in (7, 7.0, "07", " 7")
        )
    }
    assert flows == {("tenant:7", "tenant:7:user:a%3Ab")}
    with pytest.raises(
        InvalidJobOption,
        match=r"^job type 'unit.keyed' rate_key '.*': the payload field 'user' is a bool \(True\)",
    ):
        prepare("unit.keyed", {"tenant": 7, "user": True})
    with pytest.raises(
        InvalidJobOption,
        match=r"^job type 'unit.keyed' concurrency_key '.*': the payload field 'tenant' holds a "
        r"control character \(U\+001B\)",
    ):
        prepare("unit.keyed", {"tenant": "\x1b[31m", "user": "u"})
    # a key given whole is kept as it is, but not with control characters
    given = prepare("unit.keyed", {"tenant": 7, "user": "u"}, concurrency_key=" 07 ")
    assert given.flow.concurrency_key == " 07 "
    with pytest.raises(
        InvalidJobOption,
        match=r"^job type 'unit.keyed' concurrency_key must not contain control characters",
    ):
        prepare("unit.keyed", {"tenant": 7, "user": "u"}, concurrency_key="x\n")


@pytest.mark.parametrize("option", ["concurrency_key", "rate_key"])
def test_key_templates_that_could_merge_keys_fail_at_declaration(option):
    limit = {"concurrency": 1} if option == "concurrency_key" else {"rate": "1/s"}
    with pytest.raises(
        InvalidJobOption,
        match=rf"^@job\('unit.adjacent'\) {option} '\{{a\}}\{{b\}}': '\{{a\}}' and '\{{b\}}' "
        "are next to each other",
    ):
        job("unit.adjacent", **limit, **{option: "{a}{b}"})
    assert "unit.adjacent" not in registry
