"""Jobs enqueued by SQL alone (pg_cron, psql, any client) wake an idle worker through NOTIFY.

The statements are the ones docs/guides/enqueueing.md shows, read from the page.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from django_pqjobs.models import Job
from django_pqjobs.policies import DelaySequence
from tests.helpers import documented_sql, wait_status

pytestmark = pytest.mark.django_db(transaction=True)

# The worker under test would not look for jobs on its own for a minute: a job it runs
# within half of that (a loaded machine may take seconds) was woken by NOTIFY.
IDLE_POLL = 60.0
DOC = "guides/enqueueing.md"


@pytest.fixture
def sql_client() -> Iterator[psycopg.Connection]:
    """A client of its own, outside Django, as pg_cron or psql would be."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params, autocommit=True) as conn:
        yield conn


def _for_tests(sql: str) -> str:
    return sql.replace("'cleanup'", "'tests.echo'")


def _pg_cron_body() -> str:
    block = documented_sql(DOC, "pg-cron")
    return block.split("$$")[1]


def _idle_worker(worker_factory):
    worker = worker_factory(poll_intervals=DelaySequence((IDLE_POLL,)), listen=True)
    time.sleep(0.5)  # its first claim found nothing: it now waits for NOTIFY or the poll
    return worker


def _enqueued_at(sql_client: psycopg.Connection, sql: str) -> tuple[int, float]:
    """Run ``sql`` (autocommit: committed, and notified, when it returns)."""
    started = time.monotonic()
    cursor = sql_client.execute(sql)
    row = cursor.fetchone() if cursor.description else None
    if row is None or row[0] is None:  # the plain INSERT returns nothing: find its job
        row = Job.objects.filter(job_type="tests.echo").values_list("pk").latest("pk")
    return int(row[0]), started


def test_pqjobs_enqueue_from_sql_is_picked_up_at_once_by_an_idle_worker(worker_factory, sql_client):
    _idle_worker(worker_factory)
    job_id, started = _enqueued_at(sql_client, _for_tests(documented_sql(DOC, "sql-enqueue")))
    job = wait_status(job_id, "done", timeout=IDLE_POLL / 2)
    assert time.monotonic() - started < IDLE_POLL / 2, "woken by NOTIFY, not the idle poll"
    assert job.result["echo"]["target_date"]  # the payload built in SQL reached the handler
    assert (job.queue, job.priority, job.max_attempts) == ("default", 0, 5)
    assert job.dedupe_key.startswith("cleanup:")


def test_the_pg_cron_statement_enqueues_once_per_day_and_wakes_the_worker(
    worker_factory, sql_client
):
    _idle_worker(worker_factory)
    body = _for_tests(_pg_cron_body())
    with sql_client.transaction():  # one cron run, and a second one of the same day
        (job_id,) = sql_client.execute(body).fetchone()
        assert sql_client.execute(body).fetchone() == (None,)  # a duplicate: skipped
        started = time.monotonic()
    wait_status(job_id, "done", timeout=IDLE_POLL / 2)
    assert time.monotonic() - started < IDLE_POLL / 2, "woken by NOTIFY at commit"
    assert Job.objects.count() == 1


def test_a_plain_insert_with_pg_notify_is_picked_up_at_once(worker_factory, sql_client):
    _idle_worker(worker_factory)
    job_id, started = _enqueued_at(sql_client, _for_tests(documented_sql(DOC, "sql-insert")))
    wait_status(job_id, "done", timeout=IDLE_POLL / 2)
    assert time.monotonic() - started < IDLE_POLL / 2


def test_without_notify_the_idle_worker_does_not_see_the_job_until_its_poll(
    worker_factory, sql_client
):
    """The control: what wakes the worker in the tests above is the NOTIFY."""
    _idle_worker(worker_factory)
    silent = _for_tests(documented_sql(DOC, "sql-enqueue")).replace(
        "'notify_channel', 'pqjobs'", "'notify_channel', NULL"
    )
    assert "'notify_channel', NULL" in silent
    job_id, _ = _enqueued_at(sql_client, silent)
    time.sleep(2)
    assert Job.objects.get(pk=job_id).status == "ready"
    sql_client.execute("SELECT pg_notify('pqjobs', 'default')")
    wait_status(job_id, "done", timeout=IDLE_POLL / 2)
