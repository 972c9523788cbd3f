"""The cleanup between transactional tests (tests/fast_flush.py) leaves every table empty."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection

from django_pqjobs import enqueue_job, enqueue_many
from django_pqjobs.models import Job, JobAttempt

from ..fast_flush import SMALL_BYTES, empty_tables

pytestmark = pytest.mark.django_db(transaction=True)


def _size(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_relation_size(%s::regclass) + coalesce((SELECT sum(pg_relation_size(relid)) "
            "FROM pg_partition_tree(%s::regclass)), 0)",
            [table, table],
        )
        return int(cursor.fetchone()[0])


def test_small_and_large_tables_are_emptied_and_content_types_kept():
    content_types, permissions = ContentType.objects.count(), Permission.objects.count()
    assert content_types and permissions
    User.objects.create_user("operator")
    parent = enqueue_job("t", {"n": 1})
    JobAttempt.objects.create(job_id=parent, attempt=1, worker_id="w", outcome="failed")
    enqueue_many("t", [{"n": n, "pad": "x" * 200} for n in range(2_000)])
    assert _size("pqjobs_job") > SMALL_BYTES  # truncated, the others deleted
    assert _size("auth_user") <= SMALL_BYTES

    empty_tables("default")

    assert Job.objects.count() == JobAttempt.objects.count() == User.objects.count() == 0
    assert _size("pqjobs_job") == 0
    assert ContentType.objects.count() == content_types
    assert Permission.objects.count() == permissions
