"""No value of an encrypted payload or of a secret field in a message (issue 40, item 4).

A stored payload that no longer fits its typed arguments fails its job with the field
named: for a type encrypted at rest, or a field whose name says it holds a secret, the
message names the value's type, never the value. Nor does anything else on the way: the
attempt's traceback (with every exception it chains), the worker's log records, the admin's
job page for staff who may not see secrets, the error of an enqueue."""

from __future__ import annotations

import json
import logging
import re

import pytest

from django_pqjobs import PayloadError, enqueue_job
from django_pqjobs.models import Job, JobAttempt
from django_pqjobs.protection import seal
from django_pqjobs.testing import drain
from tests.helpers import make_user, wait_status
from tests.testapp.jobs import Point

pytestmark = pytest.mark.django_db(transaction=True)

# Letters and a dash: no job id, CSRF token or SVG path of a page can hold its fragment.
SECRET = "card-zq7x-4111-1111"
FRAGMENT = "zq7x-4111"


def sealed(job_type: str, value: object) -> object:
    """``value`` sealed by the project's own function, as an encrypted type stores it."""
    return json.loads(seal(json.dumps(value), "a test payload", job_type))


def everything_said(caplog: pytest.LogCaptureFixture, job_id: int) -> list[str]:
    """The job's last error, its attempts' tracebacks and every log record (with the text of
    its exception), and its admin page as staff who may see job data but not secrets and as
    staff who may only see that it exists."""
    job = Job.objects.get(pk=job_id)
    formatter = logging.Formatter()
    said = [job.last_error]
    said += JobAttempt.objects.filter(job_id=job_id).values_list("traceback", flat=True)
    said += [
        record.getMessage()
        + (formatter.formatException(record.exc_info) if record.exc_info else "")
        + str(getattr(record, "error", ""))
        for record in caplog.records
    ]
    url = f"/admin/django_pqjobs/job/{job_id}/change/"
    for user in (make_user("reader", "view_job", "change_job"), make_user("viewer", "view_job")):
        page = user.get(url)
        assert page.status_code == 200
        said.append(page.content.decode())
    return said


@pytest.fixture
def data_readers(settings):
    settings.PQJOBS = {**settings.PQJOBS, "ADMIN_DATA_PERMISSION": "django_pqjobs.change_job"}


def test_a_sealed_payload_that_no_longer_fits_its_type_is_described_not_quoted(
    worker_factory, caplog, data_readers
):
    job_id = enqueue_job("tests.encrypted_point", Point(1, 2))
    # written by an older deploy, whose x held a card number
    Job.objects.filter(pk=job_id).update(
        payload=sealed("tests.encrypted_point", {"x": SECRET, "y": 2})
    )
    caplog.set_level(logging.DEBUG)
    worker_factory()
    job = wait_status(job_id, "failed")
    assert job.error_type == "PermanentError" and job.attempts == 1
    assert "the payload does not fit Point: x: expected int, got str" in job.last_error
    said = everything_said(caplog, job_id)
    assert any(f"job {job_id} " in text and "expected int, got str" in text for text in said)
    assert not [text for text in said if FRAGMENT in text]


def test_an_upgrade_that_fails_on_a_sealed_payload_is_named_by_its_type(
    worker_factory, caplog, data_readers
):
    job_id = enqueue_job("tests.encrypted_versioned", Point(1, 2))
    # version 1's payload, which int() cannot read: its ValueError quotes it
    Job.objects.filter(pk=job_id).update(
        payload=sealed("tests.encrypted_versioned", {"x": SECRET, "y": 2}), payload_version=1
    )
    caplog.set_level(logging.DEBUG)
    worker_factory()
    job = wait_status(job_id, "failed")
    assert job.error_type == "PermanentError"
    assert "from version 1 to 2 failed: ValueError (its message is not shown" in job.last_error
    assert not [text for text in everything_said(caplog, job_id) if FRAGMENT in text]


def test_an_enqueue_that_does_not_fit_an_encrypted_type_names_the_type_only():
    with pytest.raises(PayloadError) as refused:
        enqueue_job("tests.encrypted_point", {"x": SECRET, "y": 2})
    assert "x: expected int, got str" in str(refused.value)
    assert FRAGMENT not in str(refused.value)
    assert not Job.objects.exists()


RECEIPT = {
    "order_id": 1,
    "email": "a@example.com",
    "placed_at": "2026-01-01T00:00:00+00:00",
    "ships_on": "2026-01-02",
    "token": "tok-live-9f8e7d",  # a secret field (REDACTED_FIELDS), and not a UUID
    "lines": [],
}


def test_a_secret_field_is_never_quoted_and_other_fields_still_are():
    receipt = RECEIPT
    with pytest.raises(PayloadError) as refused:
        enqueue_job("tests.typed_receipt", receipt)
    assert "token: expected UUID, got str" in str(refused.value)
    assert "tok-live" not in str(refused.value)
    with pytest.raises(PayloadError, match=re.escape("order_id: expected int, got str 'one'")):
        enqueue_job("tests.typed_receipt", {**receipt, "order_id": "one"})


def test_a_stored_payload_whose_secret_field_no_longer_fits_is_not_quoted():
    receipt = {**RECEIPT, "token": "12345678-1234-5678-1234-567812345678"}
    secret_field = enqueue_job("tests.typed_receipt", receipt)
    Job.objects.filter(pk=secret_field).update(payload={**RECEIPT, "token": "tok-live-9f8e7d"})
    plain_field = enqueue_job("tests.typed_noop", Point(1, 2))
    Job.objects.filter(pk=plain_field).update(payload={"x": 1, "y": 2, "label": 7})
    runs = {run.job_id: run.outcome for run in drain()}
    assert runs == {secret_field: "failed", plain_field: "failed"}
    error = Job.objects.get(pk=secret_field).last_error
    assert "token: expected UUID, got str" in error and "tok-live" not in error
    # a plain field of a plain type: its value is quoted, as before
    assert "label: expected str, got int 7" in Job.objects.get(pk=plain_field).last_error


def test_a_pydantic_refusal_of_an_encrypted_payload_names_no_input(settings):
    from django_pqjobs.arguments import Arguments
    from tests.testapp.typed_models import Invoice

    arguments = Arguments(Invoice, "Invoice")
    with pytest.raises(PayloadError) as refused:
        arguments.to_payload({"number": "A-1", "amount": SECRET}, "billing.invoice", True)
    assert "amount: Input should be a valid decimal, got str" in str(refused.value)
    assert FRAGMENT not in str(refused.value)
    # its context is not pydantic's ValidationError, whose text quotes the input
    assert refused.value.__context__ is None and refused.value.__cause__ is None
    with pytest.raises(PayloadError, match=re.escape("got str 'card-zq7x")):
        arguments.to_payload({"number": "A-1", "amount": SECRET}, "billing.invoice", False)


def test_an_unstorable_result_of_an_encrypted_type_is_not_quoted():
    from django_pqjobs.verdicts import success

    verdict = success("tests.encrypted_echo", {"card": SECRET, "when": object()})
    assert verdict.error_type == "ResultNotSerializable"
    assert "returned: dict (not shown" in verdict.error and FRAGMENT not in verdict.error
    plain = success("tests.echo", {"password": "hunter2", "n": 5, "when": object()})
    assert "'n': 5" in plain.error and "hunter2" not in plain.error


def test_a_field_sealed_one_by_one_is_not_quoted_and_its_neighbours_are():
    from django_pqjobs.arguments import Mismatch

    assert Mismatch("pin_hint[0]", "expected int", "zz").describe(("pin_hint",)) == (
        "pin_hint[0]: expected int, got str"
    )
    assert Mismatch("label", "expected int", "zz").describe(("pin_hint",)) == (
        "label: expected int, got str 'zz'"
    )
    # a secret name anywhere on the path (a dict's key too) hides what is below it
    assert "'zz'" not in Mismatch("meta['apiKey'].n", "expected int", "zz").describe()
    assert str(Mismatch("label", "expected int", "zz")) == "label: expected int, got str"
