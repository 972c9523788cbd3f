"""Redaction by default (issue 31): fields whose names say they hold secrets are masked in
the admin for staff without the secrets permission, at any depth, and in what the commands
print; the stored data and what handlers see are never changed."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.checks import run_checks
from django.core.management import call_command
from django.test import Client

from django_pqjobs import batch, enqueue_job
from django_pqjobs.models import Job, Schedule
from django_pqjobs.redaction import MASK, TOO_DEEP, is_secret, redact
from django_pqjobs.testing import drain
from tests.helpers import make_user

pytestmark = pytest.mark.django_db(transaction=True)

SECRETS = {
    "password": "hunter2-pw",
    "user": {"accessToken": "tok-abc-123", "name": "Ada"},
    "cards": [{"card_number": "4242424242424242", "X-Api-Key": "key-xyz-789"}],
    "tokenizer": "kept-in-clear",
    "iban": None,
}
HIDDEN = ("hunter2-pw", "tok-abc-123", "4242424242424242", "key-xyz-789")


def test_names_match_by_whole_words_in_any_case_style():
    for name in (
        "password",
        "access_token",
        "refreshToken",
        "X-Api-Key",
        "card_number",
        "IBAN",
        "client.secret",
        "SSN",
    ):
        assert is_secret(name), name
    for name in ("tokenizer", "cardholder_name", "passage", "description", "ssnake"):
        assert not is_secret(name), name
    assert is_secret("employee_id", ["employee id"]) and not is_secret("password", [])


def test_redact_masks_at_any_depth_and_leaves_the_rest():
    shown = redact(SECRETS)
    assert shown == {
        "password": MASK,
        "user": {"accessToken": MASK, "name": "Ada"},
        "cards": [{"card_number": MASK, "X-Api-Key": MASK}],
        "tokenizer": "kept-in-clear",
        "iban": None,  # nothing to hide
    }
    assert SECRETS["password"] == "hunter2-pw"  # a copy: the value itself is untouched


def test_a_value_nested_a_thousand_levels_deep_is_hidden_not_a_crash():
    deep: object = {"password": "x"}
    for _ in range(1000):
        deep = {"a": [deep]}
    assert TOO_DEEP in json.dumps(redact(deep)) and '"x"' not in json.dumps(redact(deep))


def test_the_admin_masks_secrets_for_staff_without_the_permission(settings):
    job_id = enqueue_job("tests.echo", SECRETS)
    drain()
    assert Job.objects.get(pk=job_id).result["echo"] == SECRETS  # the handler saw every field
    url = f"/admin/django_pqjobs/job/{job_id}/change/"
    page = make_user("viewer", "view_job").get(url).content.decode()
    assert not any(secret in page for secret in HIDDEN)
    assert MASK in page and "kept-in-clear" in page and "Ada" in page
    trusted = make_user("trusted", "view_job", "view_job_secrets").get(url).content.decode()
    assert all(secret in trusted for secret in HIDDEN)
    root = User.objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(root)
    assert all(secret in client.get(url).content.decode() for secret in HIDDEN)
    settings.PQJOBS = {**settings.PQJOBS, "ADMIN_SECRETS_PERMISSION": None}
    page = make_user("everyone", "view_job").get(url).content.decode()
    assert all(secret in page for secret in HIDDEN)


def test_a_payload_too_long_to_mask_is_not_shown_to_them():
    job_id = enqueue_job("tests.noop", {"password": "hunter2-pw", "blob": "x" * 70_000})
    page = make_user("viewer", "view_job").get(f"/admin/django_pqjobs/job/{job_id}/change/")
    text = page.content.decode()
    assert "hunter2-pw" not in text and "too long to show with its secrets masked" in text


def test_redacted_fields_can_be_chosen_or_turned_off(settings):
    job_id = enqueue_job("tests.noop", {"employee_id": "E-1234", "password": "hunter2-pw"})
    url = f"/admin/django_pqjobs/job/{job_id}/change/"
    settings.PQJOBS = {**settings.PQJOBS, "REDACTED_FIELDS": ["employee_id"]}
    page = make_user("viewer", "view_job").get(url).content.decode()
    assert "E-1234" not in page and "hunter2-pw" in page
    settings.PQJOBS = {**settings.PQJOBS, "REDACTED_FIELDS": []}
    page = make_user("viewer2", "view_job").get(url).content.decode()
    assert "E-1234" in page and "hunter2-pw" in page


@pytest.mark.parametrize(
    ("key", "value", "check", "message"),
    [
        ("REDACTED_FIELDS", "password", "pqjobs.E064", "must be 'default' or a list"),
        ("REDACTED_FIELDS", ["password", "--"], "pqjobs.E064", "REDACTED_FIELDS'][1] must be"),
        ("ADMIN_SECRETS_PERMISSION", "secrets", "pqjobs.E063", "app_label.codename"),
    ],
)
def test_bad_settings_are_refused_by_name(settings, key, value, check, message):
    settings.PQJOBS = {**settings.PQJOBS, key: value}
    assert any(m.id == check and message in m.msg for m in run_checks())


def test_task_calls_batch_callbacks_and_list_schedules_are_masked_too():
    with batch(on_success="tests.echo", callback_payload={"api_key": "key-xyz-789"}) as opened:
        enqueue_job("tests.noop")
    page = make_user("viewer", "view_job", "view_batch").get(
        f"/admin/django_pqjobs/batch/{opened.id}/change/"
    )
    assert "key-xyz-789" not in page.content.decode() and MASK in page.content.decode()
    Schedule.objects.create(
        name="nightly",
        job_type="tests.noop",
        interval_seconds=3600,
        payload={"report": "daily", "token": "tok-abc-123"},
    )
    out = StringIO()
    call_command("list_schedules", stdout=out, verbosity=2)
    assert "tok-abc-123" not in out.getvalue() and '"report": "daily"' in out.getvalue()


def test_a_tasks_call_is_masked_in_the_list_and_on_its_page(tasks):
    result = tasks.record.enqueue("hello", payload={"password": "hunter2-pw"})
    viewer = make_user("viewer", "view_job")
    listed = viewer.get("/admin/django_pqjobs/job/").content.decode()
    page = viewer.get(f"/admin/django_pqjobs/job/{result.id}/change/").content.decode()
    for text in (listed, page):
        assert "hunter2-pw" not in text and MASK in text
    trusted = make_user("trusted", "view_job", "view_job_secrets")
    assert "hunter2-pw" in trusted.get("/admin/django_pqjobs/job/").content.decode()
