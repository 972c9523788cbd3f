"""CHANGELOG.md's upgrading notes run as written: the INSERT older docs showed fails on a
migrated database with the error the changelog quotes, and the replacement it gives
enqueues once however often it runs (a pg_cron job retried, run twice a day)."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from django_pqjobs.models import Job
from tests.helpers import ROOT, documented_sql

pytestmark = pytest.mark.django_db(transaction=True)

DOC = "../CHANGELOG.md"  # documented_sql reads docs/<doc>


def test_the_old_on_conflict_insert_fails_with_the_error_the_changelog_quotes():
    old = documented_sql(DOC, "old-on-conflict")
    assert "ON CONFLICT (job_type, dedupe_key)" in old
    error = "there is no unique or exclusion constraint matching the ON CONFLICT specification"
    assert error in (ROOT / "CHANGELOG.md").read_text()
    with (
        pytest.raises(DatabaseError, match=error),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(old)
    assert Job.objects.count() == 0


def test_the_replacement_enqueues_once_on_repeat():
    replacement = documented_sql(DOC, "enqueue-from-sql")
    with connection.cursor() as cursor:
        cursor.execute(replacement)
        (job_id,) = cursor.fetchone()
        cursor.execute(replacement)
        assert cursor.fetchone() == (None,)  # the key is held: nothing enqueued
    job = Job.objects.get()
    assert (job.pk, job.job_type, job.status) == (job_id, "cleanup", "ready")
    assert job.dedupe_key.startswith("cleanup:")
