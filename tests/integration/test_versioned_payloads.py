"""Versioned payloads (issue 31): a job type declares the version of its payload's shape and
an upgrade function; jobs written for an older version (by an earlier deploy, or from SQL)
are upgraded before the handler runs, one written by a newer deploy waits for a newer
worker, and an upgrade that cannot be made fails that job alone, saying why."""

from __future__ import annotations

import json

import pytest
from django.db import DataError, connection

from django_pqjobs import InvalidJobOption, batch, enqueue_job, enqueue_many, job, wait_for
from django_pqjobs.models import Job, JobAttempt
from django_pqjobs.testing import drain
from tests.helpers import bound

pytestmark = pytest.mark.django_db(transaction=True)

EXPECTED = "Ada Lovelace, N1 9GU (version 3)"


def sql_enqueue(job_type: str, payload: object, version: int | None = None) -> int:
    """As another service enqueues from SQL, naming the shape it wrote (or not: version 1)."""
    named = "" if version is None else ", p_payload_version => %s::smallint"
    params: list[object] = [job_type, json.dumps(payload)]
    if version is not None:
        params.append(version)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pqjobs_enqueue(%s, 'default', %s::jsonb, 0, 3, NULL, 0, NULL, NULL, NULL, "
            f"NULL, NULL{named})",
            params,
        )
        return int(cursor.fetchone()[0])


def test_payloads_of_every_older_version_are_upgraded_and_run():
    v1 = sql_enqueue("tests.versioned_shipment", {"name": "Ada Lovelace", "zip": "N1 9GU"})
    v2 = sql_enqueue(
        "tests.versioned_shipment", {"name": "Ada Lovelace", "postcode": "N1 9GU"}, version=2
    )
    v3 = enqueue_job(
        "tests.versioned_shipment", {"first": "Ada", "last": "Lovelace", "postcode": "N1 9GU"}
    )
    stored = dict(Job.objects.values_list("id", "payload_version"))
    assert stored == {v1: None, v2: 2, v3: 3}
    runs = {run.job_id: run.outcome for run in drain()}
    assert runs == {v1: "done", v2: "done", v3: "done"}
    assert [wait_for(n, timeout=bound()) for n in (v1, v2, v3)] == [EXPECTED] * 3
    # the stored payload is left as it was written: an upgrade is made in the worker only
    assert Job.objects.get(pk=v1).payload == {"name": "Ada Lovelace", "zip": "N1 9GU"}


def test_every_way_in_writes_the_types_version():
    shape = {"first": "Ada", "last": "Lovelace", "postcode": "N1 9GU"}
    many = enqueue_many("tests.versioned_shipment", [shape, shape])
    with batch(on_success="tests.versioned_shipment", callback_payload=shape) as opened:
        member = enqueue_job("tests.echo", {"n": 1})
    plain = enqueue_job("tests.echo", {"n": 2})
    versions = dict(Job.objects.values_list("id", "payload_version"))
    assert [versions[n] for n in many] == [3, 3]
    assert versions[member] is versions[plain] is None  # a type without a version writes none
    drain()
    callback = Job.objects.get(callback_of_id=opened.id)
    assert callback.payload_version == 3 and wait_for(callback.id, timeout=bound()) == EXPECTED


def test_a_payload_from_a_newer_deploy_waits_for_a_newer_worker():
    newer = sql_enqueue("tests.versioned_shipment", {"full_name": "Ada Lovelace"}, version=4)
    fine = enqueue_job(
        "tests.versioned_shipment", {"first": "Ada", "last": "Lovelace", "postcode": "N1"}
    )
    runs = {run.job_id: run.outcome for run in drain()}
    assert runs == {newer: "snoozed", fine: "done"}
    waiting = Job.objects.get(pk=newer)
    assert (waiting.status, waiting.attempts) == ("ready", 0)  # no attempt charged
    note = JobAttempt.objects.get(job_id=newer).traceback
    assert "is version 4, newer than this worker's 3" in note


def test_an_upgrade_that_cannot_be_made_fails_that_job_alone():
    missing = sql_enqueue("tests.versioned_without_upgrade", {"n": 1})
    broken = sql_enqueue("tests.versioned_broken_upgrade", {"n": 1})
    stale = sql_enqueue("tests.versioned_shipment", {"name": "Ada"}, version=2)  # no postcode
    fine = enqueue_job("tests.versioned_without_upgrade", {"n": 2})
    runs = {run.job_id: run.outcome for run in drain()}
    assert runs == {missing: "failed", broken: "failed", stale: "failed", fine: "done"}
    errors = {j.id: (j.error_type, j.last_error) for j in Job.objects.filter(status="failed")}
    assert errors[missing][0] == "PermanentError"
    assert "is version 1; the type is at version 2 and declares no upgrade=" in errors[missing][1]
    assert "from version 1 to 2 failed: KeyError: 'missing'" in errors[broken][1]
    assert errors[stale][0] == "PermanentError" and "KeyError: 'postcode'" in errors[stale][1]
    assert Job.objects.get(pk=broken).attempts == 1  # failed for good, not retried


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"upgrade": lambda p, v: p}, "upgrade needs version=2 or more"),
        ({"version": 1, "upgrade": lambda p, v: p}, "upgrade needs version=2 or more"),
        ({"version": 0}, "version must be a whole number from 1 to 32767, got 0"),
        ({"version": True}, "version must be a whole number from 1 to 32767, got True"),
        ({"version": "2"}, "version must be a whole number from 1 to 32767, got '2'"),
        ({"version": 2, "upgrade": "not callable"}, "upgrade must be a function"),
    ],
)
def test_bad_declarations_are_refused_by_name(given, message):
    with pytest.raises(InvalidJobOption, match=message):
        job("tests.never_registered", **given)


def test_sql_refuses_a_version_below_one():
    with pytest.raises(DataError, match="payload_version must be 1 or more, got 0"):
        sql_enqueue("tests.versioned_shipment", {}, version=0)
    assert not Job.objects.exists()


def test_the_job_page_shows_the_payload_version():
    from tests.helpers import make_user

    old = sql_enqueue("tests.versioned_shipment", {"name": "Ada", "zip": "N1"})
    newer = sql_enqueue("tests.versioned_shipment", {}, version=4)
    viewer = make_user("viewer", "view_job")
    page = viewer.get(f"/admin/django_pqjobs/job/{old}/change/").content.decode()
    assert "1 — older than the type&#x27;s 3: upgraded before its handler runs" in page
    page = viewer.get(f"/admin/django_pqjobs/job/{newer}/change/").content.decode()
    assert "4 — newer than this code&#x27;s 3" in page


def test_the_guides_example_runs_as_written():
    from django_pqjobs.registry import registry
    from tests.helpers import documented_block

    namespace: dict = {}
    exec(
        compile(
            documented_block("guides/writing-jobs.md", "versioned-payloads", "python"),
            "writing-jobs.md",
            "exec",
            dont_inherit=True,
        ),
        namespace,
    )
    try:
        old = sql_enqueue("shop.ship", {"name": "Ada Lovelace", "zip": "N1 9GU"})
        new = namespace["ship"].enqueue(namespace["Shipment"]("Ada", "Lovelace", "N1 9GU"))
        drain()
        assert (
            wait_for(old, timeout=bound())
            == wait_for(new, timeout=bound())
            == "Ada Lovelace, N1 9GU"
        )
    finally:
        registry.unregister("shop.ship")
