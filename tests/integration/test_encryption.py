"""Encryption at rest (issue 31): the payload and result of a type declared encrypted=True
are stored encrypted (the row holds no plaintext), opened in the worker, by wait_for and
for admin users who may see job data; keys rotate; a missing key fails the job clearly."""

from __future__ import annotations

import json

import pytest
from django.core.checks import run_checks
from django.db import connection

from django_pqjobs import InvalidJobOption, enqueue_job, enqueue_many, wait_for
from django_pqjobs.models import Job
from django_pqjobs.protection import ENVELOPE
from django_pqjobs.testing import drain
from tests.helpers import make_user
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
    assert wait_for(job_id, timeout=5) == {"echo": {"card": SECRET}}


def test_typed_arguments_and_enqueue_many_are_encrypted_too():
    ids = enqueue_many("tests.encrypted_point", [Point(1, 2, "secret-label"), Point(3, 4)])
    assert all("secret-label" not in stored(n)[0] for n in ids)
    drain()
    assert [wait_for(n, timeout=5) for n in ids] == [3, 7]


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
    }


def test_a_bad_key_setting_is_refused_by_name(settings):
    keys(settings, "not-a-key")
    assert any(
        m.id == "pqjobs.E076" and "ENCRYPTION_KEYS'][0] is not a Fernet key" in m.msg
        for m in run_checks()
    )


def test_a_clear_payload_of_an_encrypted_type_is_refused_in_the_worker():
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


def test_the_admin_opens_it_only_for_users_who_may_see_job_data(settings):
    settings.PQJOBS = {**settings.PQJOBS, "ADMIN_DATA_PERMISSION": "django_pqjobs.change_job"}
    job_id = enqueue_job("tests.encrypted_echo", {"card": SECRET})
    drain()
    viewer = make_user("viewer", "view_job")
    page = viewer.get(f"/admin/django_pqjobs/job/{job_id}/change/").content.decode()
    assert SECRET not in page and ENVELOPE not in page
    reader = make_user("reader", "view_job", "change_job")
    page = reader.get(f"/admin/django_pqjobs/job/{job_id}/change/").content.decode()
    assert SECRET in page and "Encrypted at rest" in page


@pytest.mark.parametrize("token", ["gAAAAAnot-a-token", "\u00e9-not-ascii"])
def test_a_damaged_envelope_fails_that_job_alone(token):
    damaged = enqueue_job("tests.encrypted_echo", {"n": 1})
    Job.objects.filter(pk=damaged).update(payload={ENVELOPE: token})
    fine = enqueue_job("tests.encrypted_echo", {"n": 2})
    runs = {run.job_id: run.outcome for run in drain()}
    assert runs == {damaged: "failed", fine: "done"}
    assert Job.objects.get(pk=damaged).error_type == "SealedError"
