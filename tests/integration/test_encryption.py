"""Encryption at rest (issue 31): the payload and result of a type declared encrypted=True
are stored encrypted (the row holds no plaintext), opened in the worker, by wait_for and
for admin users who may see job data; keys rotate; a missing key fails the job clearly."""

from __future__ import annotations

import json
import logging

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.db import DataError, connection

from django_pqjobs import (
    InvalidJobOption,
    PayloadError,
    enqueue_job,
    enqueue_many,
    protection,
    wait_for,
)
from django_pqjobs.models import Job, ProtectedType
from django_pqjobs.protection import ENVELOPE
from django_pqjobs.testing import drain
from tests.helpers import bound, make_user
from tests.testapp.jobs import Point

pytestmark = pytest.mark.django_db(transaction=True)

OLD_KEY = "N_MkSMHJoaxg2V0eDGryUHEwe7ZgmsmWl7XeUoWzGfQ="  # tests/settings.py's
NEW_KEY = "j39TYjgBZsH9f5YsHqwkVtn_BOydE_B5X4f4_Ry50Fg="
SECRET = "4111-1111-1111-1111"


def stored(job_id: int) -> tuple[str, str | None]:
    """The row as psql would show it: payload and result as text."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT payload::text, result::text FROM pqjobs_job WHERE id = %s", [job_id])
        return cursor.fetchone()


def keys(settings, *given: str) -> None:
    settings.PQJOBS = {**settings.PQJOBS, "ENCRYPTION_KEYS": list(given)}


def test_the_row_holds_no_plaintext_and_the_handler_and_wait_for_see_it_in_clear():
    job_id = enqueue_job("tests.encrypted_echo", {"card": SECRET})
    payload, _ = stored(job_id)
    assert SECRET not in payload and ENVELOPE in payload
    (run,) = drain()
    assert run.outcome == "done"
    payload, result = stored(job_id)
    assert SECRET not in payload and SECRET not in result and ENVELOPE in result
    assert wait_for(job_id, timeout=bound()) == {"echo": {"card": SECRET}}


def test_typed_arguments_and_enqueue_many_are_encrypted_too():
    ids = enqueue_many("tests.encrypted_point", [Point(1, 2, "secret-label"), Point(3, 4)])
    assert all("secret-label" not in stored(n)[0] for n in ids)
    drain()
    assert [wait_for(n, timeout=bound()) for n in ids] == [3, 7]


def test_a_rotated_key_still_opens_old_jobs_and_the_newest_seals(settings):
    old = enqueue_job("tests.encrypted_echo", {"n": 1})
    keys(settings, NEW_KEY, OLD_KEY)
    new = enqueue_job("tests.encrypted_echo", {"n": 2})
    keys(settings, NEW_KEY)  # the old key gone: the new job still opens, the old does not
    runs = {run.job_id: run for run in drain()}
    assert runs[new].outcome == "done"
    failed = Job.objects.get(pk=old)
    assert (runs[old].outcome, failed.status, failed.error_type) == (
        "failed",
        "failed",
        "SealedError",
    )
    assert "no key of PQJOBS['ENCRYPTION_KEYS'] opens the payload of job" in failed.last_error


def test_no_keys_refuses_the_enqueue_and_check_says_why(settings):
    keys(settings)
    with pytest.raises(InvalidJobOption, match=r"PQJOBS\['ENCRYPTION_KEYS'\] is empty"):
        enqueue_job("tests.encrypted_echo", {"card": SECRET})
    assert not Job.objects.exists()
    problems = [m for m in run_checks() if m.id == "pqjobs.E092"]
    assert {m.obj for m in problems} == {
        "tests.encrypted_echo",
        "tests.encrypted_point",
        "tests.encrypted_noop",
        "tests.encrypted_dict_noop",
        "tests.encrypted_fields",
        "tests.encrypted_versioned",
    }


def test_a_bad_key_setting_is_refused_by_name(settings):
    keys(settings, "not-a-key")
    assert any(
        m.id == "pqjobs.E076" and "ENCRYPTION_KEYS'][0] is not a Fernet key" in m.msg
        for m in run_checks()
    )


def test_a_clear_payload_of_an_encrypted_type_is_refused_in_the_worker():
    # A payload stored in clear: enqueued from SQL before the type's protection was published
    # (pqjobs_enqueue() refuses it once pqjobs_protected_type names the type, which every
    # migrate, and so every test database flush, writes).
    ProtectedType.objects.filter(job_type="tests.encrypted_echo").delete()
    with connection.cursor() as cursor:  # as pqjobs_enqueue() from SQL stores it
        cursor.execute(
            "SELECT pqjobs_enqueue('tests.encrypted_echo', 'default', %s::jsonb, 0, 1, NULL, 0, "
            "NULL, NULL, NULL, NULL, NULL)",
            [json.dumps({"card": SECRET})],
        )
        (job_id,) = cursor.fetchone()
    (run,) = drain()
    job = Job.objects.get(pk=job_id)
    assert (run.outcome, job.error_type) == ("failed", "SealedError")
    assert "stored in clear" in job.last_error and job.result is None


def test_the_admin_opens_it_only_for_users_who_may_see_secrets(settings):
    settings.PQJOBS = {**settings.PQJOBS, "ADMIN_DATA_PERMISSION": "django_pqjobs.change_job"}
    job_id = enqueue_job("tests.encrypted_echo", {"card": SECRET})
    drain()
    url = f"/admin/django_pqjobs/job/{job_id}/change/"
    viewer = make_user("viewer", "view_job")  # no job data at all
    page = viewer.get(url).content.decode()
    assert SECRET not in page and ENVELOPE not in page and "Hidden" in page
    reader = make_user("reader", "view_job", "change_job")  # job data, but not secrets
    page = reader.get(url).content.decode()
    assert SECRET not in page and ENVELOPE not in page and "[encrypted]" in page
    trusted = make_user("trusted", "view_job", "change_job", "view_job_secrets")
    page = trusted.get(url).content.decode()
    assert SECRET in page and "Encrypted at rest" in page


def test_encrypted_fields_are_sealed_one_by_one_and_the_rest_stays_readable():
    job_id = enqueue_job(
        "tests.encrypted_fields", {"card_number": SECRET, "cvv": "737", "amount": 1250}
    )
    payload, _ = stored(job_id)
    document = json.loads(payload)
    assert SECRET not in payload and '"737"' not in payload
    assert document["amount"] == 1250
    assert set(document["card_number"]) == set(document["cvv"]) == {ENVELOPE}
    (run,) = drain()
    assert run.outcome == "done"
    _, result = stored(job_id)
    assert '"737"' not in result and '"1111"' in result  # the result's cvv field too
    assert wait_for(job_id, timeout=bound()) == {"last4": "1111", "cvv": "737"}
    page = make_user("reader", "view_job").get(f"/admin/django_pqjobs/job/{job_id}/change/")
    text = page.content.decode()
    assert "1250" in text and "[encrypted]" in text and SECRET not in text


def test_encrypted_fields_need_an_object_payload():
    with pytest.raises(PayloadError, match=r"must be a JSON object: its fields card_number, cvv"):
        enqueue_job("tests.encrypted_fields", ["not", "an", "object"])
    assert not Job.objects.exists()


def sql_enqueue(job_type: str, payload: object) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pqjobs_enqueue(%s, 'default', %s::jsonb, 0, 1, NULL, 0, NULL, NULL, NULL, "
            "NULL, NULL)",
            [job_type, json.dumps(payload)],
        )
        return int(cursor.fetchone()[0])


def test_migrate_publishes_the_encrypted_types_and_sql_enqueue_refuses_clear_payloads():
    call_command("migrate", "django_pqjobs", verbosity=0)  # post_migrate publishes
    assert dict(ProtectedType.objects.values_list("job_type", "fields")) == {
        "tests.encrypted_echo": None,
        "tests.encrypted_point": None,
        "tests.encrypted_noop": None,
        "tests.encrypted_dict_noop": None,
        "tests.encrypted_fields": ["card_number", "cvv"],
        "tests.encrypted_versioned": None,
    }
    with pytest.raises(DataError, match=r"job type 'tests.encrypted_echo' is encrypted at rest"):
        sql_enqueue("tests.encrypted_echo", {"card": SECRET})
    with pytest.raises(DataError, match=r'the fields \["card_number", "cvv"\]'):
        sql_enqueue("tests.encrypted_fields", {"card_number": SECRET, "amount": 1})
    with pytest.raises(DataError, match="encrypted at rest"):  # a look-alike envelope
        sql_enqueue("tests.encrypted_echo", {ENVELOPE: "x", "more": 1})
    assert not Job.objects.exists()
    # what Python's enqueue stores passes, and fields the payload lacks need no envelope
    sealed = json.loads(stored(enqueue_job("tests.encrypted_echo", {"n": 1}))[0])
    sql_enqueue("tests.encrypted_echo", sealed)
    sql_enqueue("tests.encrypted_fields", {"amount": 2})
    sql_enqueue("tests.echo", {"card": "not protected"})
    assert Job.objects.count() == 4
    runs = {run.job_type: run.outcome for run in drain()}
    assert runs["tests.encrypted_echo"] == runs["tests.encrypted_fields"] == "done"


def test_publishing_again_follows_the_declarations(monkeypatch):
    from django_pqjobs.declarations import publish
    from django_pqjobs.registry import registry

    ProtectedType.objects.create(job_type="another.service_type", fields=None)
    ProtectedType.objects.create(job_type="tests.echo", fields=None)  # no longer encrypted
    assert publish("default")
    names = set(ProtectedType.objects.values_list("job_type", flat=True))
    assert "another.service_type" in names  # not ours to forget
    assert "tests.echo" not in names and "tests.encrypted_echo" in names
    assert registry.get("tests.echo") is not None


@pytest.mark.parametrize("token", ["gAAAAAnot-a-token", "\u00e9-not-ascii"])
def test_a_damaged_envelope_fails_that_job_alone(token):
    damaged = enqueue_job("tests.encrypted_echo", {"n": 1})
    Job.objects.filter(pk=damaged).update(payload={ENVELOPE: token})
    fine = enqueue_job("tests.encrypted_echo", {"n": 2})
    runs = {run.job_id: run.outcome for run in drain()}
    assert runs == {damaged: "failed", fine: "done"}
    assert Job.objects.get(pk=damaged).error_type == "SealedError"


def test_check_warns_while_the_database_does_not_know_an_encrypted_type():
    from django_pqjobs.declarations import publish

    ProtectedType.objects.all().delete()
    ProtectedType.objects.create(job_type="tests.encrypted_fields", fields=["card_number"])
    warned = {m.obj for m in run_checks(databases=["default"]) if m.id == "pqjobs.W093"}
    assert warned == {
        "tests.encrypted_echo",
        "tests.encrypted_point",
        "tests.encrypted_noop",
        "tests.encrypted_dict_noop",
        "tests.encrypted_fields",  # listed, but with other fields
        "tests.encrypted_versioned",
    }
    publish("default")
    assert not [m for m in run_checks(databases=["default"]) if m.id == "pqjobs.W093"]


def test_psql_and_a_backup_show_no_plaintext():
    """What an operator or a thief with the table or a dump reads: no secret of an encrypted
    job, whole or by field, its payload or its result."""
    import shutil
    import subprocess

    whole = enqueue_job("tests.encrypted_echo", {"card": SECRET})
    fields = enqueue_job("tests.encrypted_fields", {"card_number": SECRET, "cvv": "cvv-9k7q"})
    drain()
    assert {j.status for j in Job.objects.filter(pk__in=[whole, fields])} == {"done"}
    params = connection.get_connection_params()
    env = {"PGPASSWORD": str(params.get("password") or ""), "PATH": "/usr/bin:/bin"}
    target = [
        "-h", str(params.get("host") or "127.0.0.1"), "-p", str(params.get("port") or 5432),
        "-U", str(params["user"]), "-d", str(params["dbname"]),
    ]  # fmt: skip
    if not (shutil.which("psql") and shutil.which("pg_dump")):
        pytest.skip("psql and pg_dump are not installed")
    table = subprocess.run(
        ["psql", *target, "-c", "SELECT payload, result FROM pqjobs_job"],
        capture_output=True, text=True, check=True, env=env, timeout=bound(60),
    ).stdout  # fmt: skip
    backup = subprocess.run(
        ["pg_dump", *target, "--data-only", "--table", "pqjobs_job*"],  # with its partitions
        capture_output=True, text=True, check=True, env=env, timeout=bound(60),
    ).stdout  # fmt: skip
    for text in (table, backup):
        assert ENVELOPE in text
        assert SECRET not in text and "cvv-9k7q" not in text


# --- envelopes bound to their job type (issue 40, item 5) -------------------------------


def test_an_envelope_copied_into_a_job_of_another_type_fails_that_job_alone():
    source = enqueue_job("tests.encrypted_echo", {"card": SECRET})
    target = enqueue_job("tests.encrypted_dict_noop", {"n": 1})
    Job.objects.filter(pk=target).update(payload=Job.objects.get(pk=source).payload)
    runs = {run.job_id: run.outcome for run in drain(run_delayed=True)}
    assert runs == {source: "done", target: "failed"}  # at once: no retry
    moved = Job.objects.get(pk=target)
    assert (moved.error_type, moved.attempts) == ("EnvelopeMoved", 1)
    assert (
        f"the payload of job {target} was sealed for job type 'tests.encrypted_echo', not for "
        "job type 'tests.encrypted_dict_noop'" in moved.last_error
    )
    assert SECRET not in moved.last_error


def test_a_field_envelope_copied_into_another_field_is_refused():
    job_id = enqueue_job("tests.encrypted_fields", {"card_number": SECRET, "cvv": "737"})
    payload = Job.objects.get(pk=job_id).payload
    Job.objects.filter(pk=job_id).update(payload={**payload, "cvv": payload["card_number"]})
    (run,) = drain()
    job = Job.objects.get(pk=job_id)
    assert (run.outcome, job.error_type) == ("failed", "EnvelopeMoved")
    assert "field 'cvv' was sealed for job type 'tests.encrypted_fields', field 'card_number'" in (
        job.last_error
    )


def test_a_result_copied_into_a_job_of_another_type_is_refused_to_the_waiter():
    from django_pqjobs.protection import EnvelopeMoved

    source = enqueue_job("tests.encrypted_echo", {"card": SECRET})
    target = enqueue_job("tests.encrypted_dict_noop", {"n": 1})
    drain()
    Job.objects.filter(pk=target).update(result=Job.objects.get(pk=source).result)
    with pytest.raises(EnvelopeMoved, match=r"sealed for job type 'tests\.encrypted_echo'"):
        wait_for(target, timeout=bound())


def legacy_envelope(value: object, key: str = OLD_KEY) -> dict:
    """An envelope as versions before binding sealed it: a bare Fernet token of the JSON."""
    from cryptography.fernet import Fernet

    return {ENVELOPE: Fernet(key.encode()).encrypt(json.dumps(value).encode()).decode()}


def test_an_unbound_envelope_still_opens_with_a_warning_once_and_after_a_rotation(settings, caplog):
    keys(settings, NEW_KEY, OLD_KEY)  # rotated since it was sealed
    ids = [enqueue_job("tests.encrypted_echo", {"n": n}) for n in (1, 2)]
    for job_id in ids:
        Job.objects.filter(pk=job_id).update(payload=legacy_envelope({"card": SECRET}))
    caplog.set_level(logging.WARNING, logger="django_pqjobs.protection")
    protection._warned.clear()
    assert {run.outcome for run in drain()} == {"done"}
    assert wait_for(ids[0], timeout=bound()) == {"echo": {"card": SECRET}}
    stored_result = stored(ids[0])[1]
    assert f'"{ENVELOPE}": "{protection.MARK}' in stored_result  # its result is sealed bound
    warnings = [
        r.getMessage() for r in caplog.records if "before envelopes were bound" in r.getMessage()
    ]
    assert len(warnings) == 1 and "'tests.encrypted_echo'" in warnings[0]


def test_unbound_envelopes_are_refused_once_the_setting_says_so(settings):
    settings.PQJOBS = {**settings.PQJOBS, "ACCEPT_UNBOUND_ENVELOPES": False}
    job_id = enqueue_job("tests.encrypted_echo", {"n": 1})
    Job.objects.filter(pk=job_id).update(payload=legacy_envelope({"card": SECRET}))
    fine = enqueue_job("tests.encrypted_echo", {"n": 2})
    assert {run.job_id: run.outcome for run in drain()} == {job_id: "failed", fine: "done"}
    job = Job.objects.get(pk=job_id)
    assert job.error_type == "SealedError"
    assert "ACCEPT_UNBOUND_ENVELOPES'] is False" in job.last_error


def test_an_unbound_token_marked_bound_is_refused():
    job_id = enqueue_job("tests.encrypted_echo", {"n": 1})
    token = legacy_envelope({"n": 1})[ENVELOPE]
    Job.objects.filter(pk=job_id).update(payload={ENVELOPE: protection.MARK + token})
    (run,) = drain()
    job = Job.objects.get(pk=job_id)
    assert (run.outcome, job.error_type) == ("failed", "SealedError")
    assert "marked bound to its job type, but its plaintext is not" in job.last_error
