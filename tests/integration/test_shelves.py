"""Statements about jobs still to run name the hot shelf, so PostgreSQL plans and locks the
hot partition alone, however many history partitions there are (#40).

``pqjobs_job`` is partitioned by ``shelf``; a history partition's CHECK names a finished
status, so a statement about ready, blocked, waiting or running jobs never *reads* one
(constraint exclusion) but, without ``shelf = 'hot'``, still opens and locks every one of
them and their indexes while it is planned: a hundred and more locks a statement at the
default retention, which ran a busy server out of its shared lock table
(``max_locks_per_transaction``).

The check is general: it runs the public operations that only concern live jobs while
recording every statement Django's connection sends, then plans each statement that names
``pqjobs_job`` or ``pqjobs_attempt`` again on a connection of its own, in a transaction,
and reads what that planning locked. A statement that locks history partitions and reads
none of them (every one was excluded by its CHECK: the statement is about live jobs) fails
the test, as does one with more references planned to the hot partition alone than
comparisons of ``shelf`` in its text (comments stripped, so ``-- shelf = 'hot'`` does not
count). A statement that reads history (a finished status, a lookup by id) passes.

A statement meant to see every shelf although the test found it about live jobs (say one
whose status list is a parameter that is live-only in this test) says so in its text with
the comment ``/* pqjobs: every shelf */`` (``EVERY_SHELF``); the check skips it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_pqjobs import enqueue_job, fairness, flow, monitoring, retry_job, wait_for, waiting
from django_pqjobs.models import Job, Schedule
from django_pqjobs.schedules.scheduler import previous_run_active
from django_pqjobs.tasks import resolver
from django_pqjobs.transitions import history
from django_pqjobs.worker import housekeeping
from django_pqjobs.worker.claiming import claim_jobs
from tests.fast_flush import flush_statements
from tests.helpers import drop_history_partitions, make_user

pytestmark = pytest.mark.django_db(transaction=True)

EVERY_SHELF = "/* pqjobs: every shelf */"
HOT = ("pqjobs_job_hot", "pqjobs_attempt_hot")
# about the partitions at the default retention (a seventh of each status's, ~8 a status)
HISTORY_PARTITIONS = 32

_HISTORY = """
SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent IN ('pqjobs_job'::regclass, 'pqjobs_attempt'::regclass)
  AND c.relname NOT IN ('pqjobs_job_hot', 'pqjobs_attempt_hot')
"""
_LOCKED = """
SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'
"""
_TOKENS = re.compile(r"'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/", re.S)
_SHELF_COMPARED = re.compile(r'\bshelf"?\s*(=|<>|!=|\bIN\b|\bNOT\b)', re.I)
_PLANNABLE = re.compile(r"\s*\(?\s*(SELECT|WITH|INSERT|UPDATE|DELETE)\b", re.I)
_JOB_TABLES = re.compile(r"\bpqjobs_(job|attempt)\b", re.I)
_APPENDS = ("Append", "Merge Append")


def without_comments(sql: str) -> str:
    """``sql`` with its comments blanked out (string literals kept as they are)."""
    return _TOKENS.sub(lambda m: m.group(0) if m.group(0).startswith("'") else " ", sql)


def make_history_partitions(count: int = HISTORY_PARTITIONS) -> None:
    """``count`` (empty) history partitions of jobs, each with its attempts' partition."""
    statuses = ("done", "failed", "cancelled", "expired")
    today = datetime.now(UTC).date()
    shelves = [
        history.shelf(statuses[n % 4], today - timedelta(days=n // 4), 1) for n in range(count)
    ]
    assert history.prepare("default", shelves) == count


@pytest.fixture
def history_partitions() -> Iterator[None]:
    make_history_partitions()
    yield
    drop_history_partitions()


@dataclass(frozen=True)
class Planned:
    sql: str
    history_locked: frozenset[str]
    history_read: frozenset[str]
    hot_alone: int  # references of the job tables planned to the hot partition alone

    def about_live_jobs_without_shelf(self) -> bool:
        if not self.history_locked or EVERY_SHELF in self.sql:
            return False
        if not self.history_read:
            return True
        return self.hot_alone > len(_SHELF_COMPARED.findall(without_comments(self.sql)))


def statements_of(call: Callable[[], object]) -> list[tuple[str, Any]]:
    """Every statement (and its parameters) Django's default connection sends in ``call``."""
    sent: list[tuple[str, Any]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if many:
            params = list(params)
            sent.append((sql, params[0] if params else None))
        else:
            sent.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        call()
    return sent


def _scans(plan: dict[str, Any], history_names: set[str]) -> tuple[set[str], int]:
    """(history partitions read, references planned to a hot partition alone)."""
    read: set[str] = set()
    hot = shared = 0
    stack = [plan]
    while stack:
        node = stack.pop()
        children = node.get("Plans", [])
        stack.extend(children)
        name = node.get("Relation Name")
        if name in history_names:
            read.add(name)
        elif name in HOT and node.get("Node Type") != "ModifyTable":
            hot += 1
        if node.get("Node Type") in _APPENDS:
            names = {child.get("Relation Name") for child in children}
            if names & set(HOT) and names & history_names:
                shared += 1
    return read, hot - shared


def plan_each(statements: list[tuple[str, Any]]) -> list[Planned]:
    """Plan each statement about the job tables on a connection of its own, in a
    transaction rolled back, and note the history partitions the planning locked and the
    plan reads."""
    other = connections.create_connection("default")
    found: list[Planned] = []
    try:
        with other.cursor() as cursor:
            cursor.execute(_HISTORY)
            history_names = {row[0] for row in cursor.fetchall()}
            assert len(history_names) == 2 * HISTORY_PARTITIONS
            for sql, params in statements:
                text = without_comments(sql)
                if not _PLANNABLE.match(text) or not _JOB_TABLES.search(text):
                    continue
                cursor.execute("BEGIN")
                try:
                    cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
                    [[plan]] = cursor.fetchone()
                    cursor.execute(_LOCKED)
                    locked = {row[0] for row in cursor.fetchall()} & history_names
                finally:
                    cursor.execute("ROLLBACK")
                read, hot_alone = _scans(plan["Plan"], history_names)
                found.append(Planned(sql, frozenset(locked), frozenset(read), hot_alone))
    finally:
        other.close()
    return found


def live_job_statements_without_shelf(call: Callable[[], object]) -> list[str]:
    planned = plan_each(statements_of(call))
    assert planned, "no statement about the job tables was sent"
    return [p.sql for p in planned if p.about_live_jobs_without_shelf()]


# --- the check checks ------------------------------------------------------------------------


def test_the_check_tells_live_statements_without_shelf_from_the_rest(history_partitions):
    def run(*statements: str) -> None:
        with connection.cursor() as cursor:
            for sql in statements:
                cursor.execute(sql)

    live = "SELECT count(*) FROM pqjobs_job WHERE status = 'ready'"
    commented = "SELECT count(*) FROM pqjobs_job WHERE status = 'ready' -- AND shelf = 'hot'"
    mixed = (
        "SELECT count(*) FROM pqjobs_job WHERE status = 'running' UNION ALL "
        "SELECT count(*) FROM pqjobs_job WHERE shelf = 'hot' AND status = 'ready' UNION ALL "
        "SELECT count(*) FROM pqjobs_job WHERE status = 'failed'"
    )
    assert live_job_statements_without_shelf(lambda: run(live, commented, mixed)) == [
        live,
        commented,
        mixed,
    ]
    fine = [
        "SELECT count(*) FROM pqjobs_job WHERE shelf = 'hot' AND status = 'ready'",
        "SELECT count(*) FROM pqjobs_job WHERE status = 'failed'",  # history: every shelf
        "SELECT count(*) FROM pqjobs_job WHERE id = 1",
        "SELECT count(*) FROM pqjobs_attempt WHERE job_id = 1",
        f"SELECT count(*) FROM pqjobs_job WHERE status = 'ready' {EVERY_SHELF}",
    ]
    assert live_job_statements_without_shelf(lambda: run(*fine)) == []
    # and an ORM query of live jobs lacking the shelf is caught, though it selects the column
    assert live_job_statements_without_shelf(lambda: list(Job.objects.filter(status="ready"))) != []
    assert live_job_statements_without_shelf(lambda: list(Job.objects.ready())) == []


# --- the operations about live jobs ----------------------------------------------------------


def _jobs_of_every_live_status() -> None:
    enqueue_job("t", {"n": 1})
    enqueue_job("t", {"n": 2}, priority=10)
    claim_jobs("default", "w", None, 1)  # running
    enqueue_job("t", {"n": 3}, depends_on=[enqueue_job("t", {"n": 4}, delay=3600)])  # waiting
    enqueue_job("tests.capped", {"k": 1})
    enqueue_job("tests.capped", {"k": 1})
    flow.pause_queue("paused")
    enqueue_job("t", {"n": 5}, queue="paused")  # blocked
    Job.objects.create(job_type="t", status="failed", last_error="boom", finished_at=timezone.now())


def superuser(name: str) -> Client:
    client = make_user(name)
    User.objects.filter(username=name).update(is_superuser=True)
    return client


def _admin_pages() -> None:
    client = superuser("admin")
    for page in (
        reverse("admin:django_pqjobs_job_dashboard"),
        reverse("admin:django_pqjobs_fairweight_changelist"),
        reverse("admin:django_pqjobs_concurrencysetting_changelist"),
    ):
        assert client.get(page).status_code == 200, page


def _monitoring() -> None:
    rows = monitoring.depth()
    monitoring.lag_by_queue(rows)
    monitoring.oldest_due_seconds()
    monitoring.held_by_pause()
    monitoring.left_behind()
    fairness.fair_keys()
    fairness.waiting_longest(0.0)
    flow.held()


OPERATIONS: dict[str, Callable[[], object]] = {
    "admin pages": _admin_pages,
    "metrics": lambda: superuser("scraper").get("/metrics"),
    "health view": lambda: Client().get("/health/jobs/lag"),
    "jobs_health": lambda: call_command("jobs_health", "--skip-worker", "--max-lag", "1h"),
    "monitoring, fairness, flow": _monitoring,
    "enqueue with max_waiting": lambda: enqueue_job("tests.capped_skip", {"k": 2}),
    "pause and resume": lambda: (flow.pause_queue("q2"), flow.resume_queue("q2")),
    "tasks resolver": lambda: resolver.resolve("tests.testapp.jobs.not_a_task"),
    "a schedule's overlap check": lambda: previous_run_active(
        Schedule(name="s", job_type="t", last_job_id=1), "default"
    ),
    "the sweeps of the maintenance": lambda: (
        housekeeping.expire_overdue("default"),
        housekeeping.wake_parked("default"),
        housekeeping.release_flow_blocked("default"),
    ),
}


@pytest.mark.parametrize("operation", OPERATIONS)
def test_statements_about_live_jobs_name_the_hot_shelf(history_partitions, operation):
    _jobs_of_every_live_status()
    lacking = live_job_statements_without_shelf(OPERATIONS[operation])
    assert not lacking, "about live jobs, without shelf = 'hot':\n\n" + "\n\n".join(lacking)


# --- locks -----------------------------------------------------------------------------------

_LOCK_COUNT = "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'relation'"


def locks_held(call: Callable[[], object]) -> int:
    """The relations (tables, indexes) locked by the end of one transaction that runs
    ``call`` on Django's connection, beyond those the count itself locks."""
    with connection.cursor() as cursor, transaction.atomic():
        cursor.execute(_LOCK_COUNT)
        baseline = cursor.fetchone()[0]
        call()
        cursor.execute(_LOCK_COUNT)
        return int(cursor.fetchone()[0]) - int(baseline)


# Bounds with the history partitions of the default retention present, at about twice what
# was measured (docs/guides/history.md, "Locks"): before the hot shelf was looked at first,
# each of these locked 250 to 850 relations.
LOOKUP_LOCKS = 40
WAIT_FOR_LOCKS = 100
FLUSH_LOCKS = 60
OPERATOR_LOCKS = 150


def _finished_hot_job() -> int:
    job_id = enqueue_job("t")
    Job.objects.filter(pk=job_id).update(status="done", finished_at=timezone.now())
    return job_id


def test_a_lookup_by_id_of_a_hot_job_locks_the_hot_partition_alone(history_partitions):
    hot = _finished_hot_job()
    assert locks_held(lambda: Job.objects.get_hot_first(pk=hot)) <= LOOKUP_LOCKS
    # a job in history is found too, through every partition
    shelved = Job.objects.create(job_type="t", status="done", finished_at=timezone.now())
    history.shelve("default", "done", after=0.0, kept=None)
    with connection.cursor() as cursor:
        cursor.execute("SELECT shelf FROM pqjobs_job WHERE id = %s", [shelved.pk])
        assert cursor.fetchone()[0] != "hot"
    assert Job.objects.get_hot_first(pk=shelved.pk).pk == shelved.pk
    with pytest.raises(Job.DoesNotExist):
        Job.objects.get_hot_first(pk=shelved.pk + 1000)


def test_the_job_page_the_result_lookup_and_wait_for_lock_few_relations(
    history_partitions, monkeypatch
):
    hot = _finished_hot_job()
    admin = superuser("admin")
    page = reverse("admin:django_pqjobs_job_change", args=[hot])
    # the page's reads of the job (its row, its excerpts) look on the hot shelf first; its
    # attempts, dependencies and children are read on every shelf
    sent = statements_of(lambda: admin.get(page))
    hot_first = [
        (sql, params)
        for sql, params in sent
        if _JOB_TABLES.search(sql) and _SHELF_COMPARED.search(without_comments(sql))
    ]
    assert len(hot_first) == 2, hot_first
    assert max(statement_locks(hot_first)) <= LOOKUP_LOCKS

    measured: list[int] = []

    @contextmanager
    def counting(alias: str) -> Iterator[psycopg.Connection[Any]]:
        params = connections[alias].get_connection_params()
        params.pop("cursor_factory", None)
        conn = psycopg.connect(**params, autocommit=False)  # one transaction, counted
        try:
            yield conn
        finally:
            measured.append(int(conn.execute(_LOCK_COUNT).fetchone()[0]))
            conn.close()

    monkeypatch.setattr(waiting, "listening_connection", counting)
    wait_for(hot)
    assert measured and measured[0] <= WAIT_FOR_LOCKS


def test_a_task_result_lookup_locks_the_hot_partition_alone(history_partitions, tasks):
    result = tasks.add.enqueue(1, 2)
    backend = tasks.add.get_backend()
    assert locks_held(lambda: backend.get_result(result.id)) <= LOOKUP_LOCKS


def test_an_operators_retry_of_a_hot_job_locks_few_relations(history_partitions):
    failed = enqueue_job("t")
    Job.objects.filter(pk=failed).update(status="failed", finished_at=timezone.now())
    assert locks_held(lambda: retry_job(failed)) <= OPERATOR_LOCKS
    assert Job.objects.get(pk=failed).status == "ready"


def statement_locks(statements: list[tuple[str, Any]]) -> list[int]:
    """The relations the planning of each statement locks, in a transaction of its own."""
    other = connections.create_connection("default")
    counts = []
    try:
        with other.cursor() as cursor:
            for sql, params in statements:
                cursor.execute("BEGIN")
                try:
                    cursor.execute(_LOCK_COUNT)
                    baseline = int(cursor.fetchone()[0])
                    cursor.execute(f"EXPLAIN {sql}", params)
                    cursor.fetchall()
                    cursor.execute(_LOCK_COUNT)
                    counts.append(int(cursor.fetchone()[0]) - baseline)
                finally:
                    cursor.execute("ROLLBACK")
    finally:
        other.close()
    return counts


def test_a_flush_between_tests_holds_few_locks_at_a_time(history_partitions):
    statements = flush_statements("default")
    assert any("pqjobs_job_done_" in statement for statement in statements)
    held = []
    for statement in statements:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = replica")
            cursor.execute(_LOCK_COUNT)
            baseline = int(cursor.fetchone()[0])
            cursor.execute(statement)
            cursor.execute(_LOCK_COUNT)
            held.append(int(cursor.fetchone()[0]) - baseline)
            transaction.set_rollback(True)
    assert max(held) <= FLUSH_LOCKS, dict(zip(statements, held, strict=True))
