"""The job list, search, job page, dashboard, audit trail and batch pages on a table of
1,000,000 jobs (a batch of 100,000 of them, a job with 100,000 dependents).

The timings measured on the development machine are stated in docs/guides/operating.md.
Asserted here, whatever the machine's load: the exact number of queries per page, that no
page counts the whole table, and that no statement of a page reads a big table (the jobs,
the audit trail) by a sequential scan, as the planner plans it on these
analysed tables: what a page costs at this size is its plan, a wall-clock ceiling would
only measure the machine. The same holds for hostile URLs (sorts by unindexed columns,
thousands of sort terms, free lookups, NUL bytes, pages far down, facets): they are
refused, or planned as a normal page is. Filters whose matches are rare on a column
without an index (a queue nobody uses, a date range with no jobs) may scan: the list's
statement timeout (HOSTILE_TIMEOUT here) stops them, as test_admin_hardening.py shows.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_pqjobs.admin import pictures
from django_pqjobs.admin.jobs import JobAdmin
from django_pqjobs.models import Batch

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 1_000_000
# (and their partitions) The dependencies are not among them: the table holds little but
# the 100,000 edges of one fan-out, which its job page counts up to a bound, scanning as
# many rows whatever the plan.
BIG_TABLES = ("pqjobs_job", "pqjobs_audit")


def _scanned(plan: dict) -> Iterator[str]:
    if plan["Node Type"] == "Seq Scan" and plan["Relation Name"].startswith(BIG_TABLES):
        yield plan["Relation Name"]
    for child in plan.get("Plans", ()):
        yield from _scanned(child)


def sequential_scans(queries: list[dict[str, str]]) -> list[tuple[str, str]]:
    """``(table, statement)`` for each big table a page's SELECTs read by a sequential scan,
    in the plans the planner makes for them now (EXPLAIN without ANALYZE: not run)."""
    found = []
    with connection.cursor() as cursor:
        for query in queries:
            sql = query["sql"]
            if not sql.lstrip().upper().startswith("SELECT"):
                continue
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
            [[plan]] = cursor.fetchone()
            found += [(table, sql[:200]) for table in _scanned(plan["Plan"])]
    return found


# Only a hang guard: every page but MAY_TIME_OUT's is planned on indexes (asserted), and a
# machine running two suites on two cores may take seconds over what takes milliseconds.
HOSTILE_TIMEOUT = 10

# One statement; generated row g gets id base + g. Ids grow with created_at, as in real
# life; the newest rows are running and ready jobs, the last hour is full of finished ones;
# every 1000th job failed; every 10th is the child of the one before.
POPULATE = """
INSERT INTO pqjobs_job (job_type, queue, payload, status, priority, attempts, max_attempts,
                        run_after, last_error, error_type, created_at, updated_at, finished_at,
                        duration_ms, locked_by, locked_at, heartbeat_at, dedupe_key, parent_id,
                        batch_id)
SELECT 'type-' || (g %% 20),
       CASE WHEN g %% 7 = 0 THEN 'emails' ELSE 'default' END,
       jsonb_build_object('n', g),
       s.status, 0, 1, 5, t.at,
       CASE WHEN s.status = 'failed' THEN 'Traceback ...' || chr(10) || 'ValueError: boom'
            ELSE '' END,
       CASE WHEN s.status = 'failed' THEN 'ValueError' ELSE '' END,
       t.at, t.at,
       CASE WHEN s.status IN ('ready', 'running') THEN NULL ELSE t.at END,
       CASE WHEN s.status IN ('ready', 'running') THEN NULL ELSE 5 END,
       CASE WHEN s.status = 'ready' THEN NULL
            WHEN s.status = 'running' THEN 'worker-' || (g %% 3) ELSE 'worker-old' END,
       CASE WHEN s.status = 'running' THEN t.at END,
       CASE WHEN s.status = 'running' THEN now() END,
       CASE WHEN s.status IN ('ready', 'running') THEN 'key-' || g END,
       CASE WHEN g %% 10 = 0 THEN %(base)s + g - 1 END,
       CASE WHEN g > 100000 AND g <= 200000 THEN %(batch)s END
FROM generate_series(1, %(rows)s) g,
     LATERAL (SELECT now() - make_interval(secs => %(rows)s - g) AS at) t,
     LATERAL (SELECT CASE WHEN g > %(rows)s - 20 THEN 'running'
                          WHEN g > %(rows)s - 200 THEN 'ready'
                          WHEN g %% 1000 = 0 THEN 'failed'
                          WHEN g %% 997 = 0 THEN 'cancelled'
                          ELSE 'done' END AS status) s
"""

# Per job list page: session, user, the pauses (its banner), BEGIN, the statement timeout,
# job type filter choices, EXPLAIN estimate, rows, COMMIT (and, when the page shows running
# jobs, their workers' heartbeats: one query by primary key); filtered pages whose estimate is
# small count exactly (three more: the count inside a savepoint). Refused URLs stop before
# the rows and roll back; a refused lookup after the choices. The audit trail's list has no
# banner and no choices to read.
WORKERS_LOOKUP = "FROM pqjobs_worker w WHERE w.worker_id = ANY"
EXPECTED_QUERIES = {
    "list": 9,
    "list, failed (exact count)": 12,
    "list, job type": 9,
    "list, queue + has error": 12,
    "list, created since yesterday": 9,
    "list, page 500": 9,
    "search, id": 12,
    "search, dedupe key": 12,
    "search, worker": 12,
    "search, no match": 12,
    # session, user, the job, its excerpts, attempts, operator actions, its dependencies and
    # dependents, content type, children; its pictures' jobs around it (children, parent,
    # dependencies and dependents, with their types: one query)
    "job page": 10,
    # session, user, pauses, now, active, per minute, retries, last day, running jobs per
    # worker, the workers (as the health checks read them: begin, statement timeout, the
    # read, commit), held jobs, job types
    "dashboard": 15,
    "list, blocked": 12,
    "audit trail": 7,
    "audit trail, job id": 10,
    # The batch list counts exactly (one batch here); the batch page reads the batch, its
    # members by status (one GROUP BY) and its callback jobs. A second job page finds the
    # content type cached, and counts the dependents beyond the 50 it shows. The planner
    # cannot estimate a list of dependents (an array of ids): the bounded count sees more
    # than 10,000, so they are all counted (one more query).
    "batch list": 10,
    "batch page, 100,000 members": 7,  # and its graph's first members (one query)
    "list, batch members": 9,
    "list, batch members cancelled": 12,
    "job page, 100,000 dependents": 10,
    "list, dependents of a job": 13,
    "list, waiting": 12,
    # hostile
    "sort by queue (o=3)": 9,
    "sort by status (o=4)": 9,
    "sort by five columns": 9,
    "2,000 sort terms": 9,
    "sort by job type": 9,
    "sort by job type, descending": 9,
    "job_type__regex": 7,
    "payload lookup": 7,
    "NUL in status": 6,
    "NUL in job type": 6,
    "page 20,000": 6,
    "facets": 9,
    "cancelled (no index)": 12,
    "finished in 2001": 12,
    "queue nobody uses": 12,
    "created in 2001": 12,
}
# Refused (400) or stopped by the statement timeout (503) instead of listing.
EXPECTED_STATUS = {
    "job_type__regex": 400,
    "payload lookup": 400,
    "NUL in status": 400,
    "NUL in job type": 400,
    "page 20,000": 400,
}
# Where the rows are rare and the column has no index, the timeout may stop the list.
MAY_TIME_OUT = {"queue nobody uses", "created in 2001"}
# The lists that may read the table once: those, and the exact count of a status of rare
# jobs that has no index of its own (the statement timeout bounds it too).
MAY_SCAN = MAY_TIME_OUT | {"cancelled (no index)"}


# Flow control and the audit trail: 90 of the ready jobs are held by the concurrency limit
# of 3 keys, the queue 'emails' is paused, and 200,000 operator actions name jobs (one in
# five jobs has one).
FLOW_AND_AUDIT = """
UPDATE pqjobs_job SET status = 'blocked', blocked_by = 'limit',
       concurrency_key = 'acct-' || (id %% 3), concurrency_limit = 1
WHERE status = 'ready' AND id %% 2 = 0;
INSERT INTO pqjobs_pause (kind, name, paused_at, paused_by)
VALUES ('queue', 'emails', now(), 'oncall');
INSERT INTO pqjobs_audit (at, actor, action, job_id, target, detail)
SELECT now() - make_interval(secs => %(actions)s - g), 'operator-' || (g %% 7), 'retry',
       %(base)s + g * 5, 'type-' || (g %% 20), 'failed → ready; next attempt 2 of 10'
FROM generate_series(1, %(actions)s) g;
"""
ACTIONS = 200_000

# Composition: the jobs 100,001 to 200,000 are the members of one batch (its counts as the
# database would keep them), the job FAN_OUT has 100,000 dependents, and 30 of the ready
# jobs wait for the newest running job (holding no dedupe key, as waiting jobs do not).
BATCH = (
    "INSERT INTO pqjobs_batch (label, callbacks, sealed) VALUES ('big', '{}', true) RETURNING id"
)
COMPOSITION = """
UPDATE pqjobs_batch b SET total = c.total, pending = c.pending, done = c.done,
       failed = c.failed, cancelled = c.cancelled
FROM (SELECT count(*) AS total,
             count(*) FILTER (WHERE status NOT IN ('done', 'failed', 'cancelled')) AS pending,
             count(*) FILTER (WHERE status = 'done') AS done,
             count(*) FILTER (WHERE status = 'failed') AS failed,
             count(*) FILTER (WHERE status = 'cancelled') AS cancelled
      FROM pqjobs_job WHERE batch_id = %(batch)s) c
WHERE b.id = %(batch)s;
INSERT INTO pqjobs_dependency (job_id, depends_on_id)
SELECT %(base)s + g, %(base)s + %(fan_out)s
FROM generate_series(%(fan_out)s + 1, %(fan_out)s + %(dependents)s) g;
WITH w AS (SELECT id FROM pqjobs_job WHERE status = 'ready' AND id %% 2 = 1
           ORDER BY id LIMIT 30)
UPDATE pqjobs_job j SET status = 'waiting', waiting_for = 1, dedupe_key = NULL
FROM w WHERE j.id = w.id;
INSERT INTO pqjobs_dependency (job_id, depends_on_id)
SELECT id, %(base)s + %(rows)s FROM pqjobs_job WHERE status = 'waiting';
UPDATE pqjobs_job SET has_dependents = true
WHERE id IN (%(base)s + %(fan_out)s, %(base)s + %(rows)s);
"""
FAN_OUT = ROWS // 4
DEPENDENTS = 100_000


@pytest.fixture
def base() -> Iterator[int]:
    """Fills the table; yields ``base``: generated row g has id base + g (earlier tests
    advanced the id sequence, and flushing does not reset it)."""
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval('pqjobs_job_id_seq')")
        first = cursor.fetchone()[0]
        cursor.execute(BATCH)
        batch = cursor.fetchone()[0]
        cursor.execute(POPULATE, {"rows": ROWS, "base": first, "batch": batch})
        cursor.execute(FLOW_AND_AUDIT, {"base": first, "actions": ACTIONS})
        composition = {"base": first, "batch": batch, "rows": ROWS}
        composition.update(fan_out=FAN_OUT, dependents=DEPENDENTS)
        cursor.execute(COMPOSITION, composition)
        for table in ("pqjobs_job", "pqjobs_audit", "pqjobs_batch", "pqjobs_dependency"):
            cursor.execute(f"ANALYZE {table}")
    print(f"\npopulated {ROWS:,} jobs in {time.perf_counter() - started:.1f} s")
    yield first
    with connection.cursor() as cursor:  # faster than the flush's TRUNCATE cascade
        cursor.execute(
            "TRUNCATE pqjobs_job, pqjobs_attempt, pqjobs_audit, pqjobs_pause, pqjobs_batch, "
            "pqjobs_dependency, pqjobs_step, pqjobs_signal"
        )


def pages(base: int) -> dict[str, str]:
    changelist = reverse("admin:django_pqjobs_job_changelist")
    # The rows were created one a second up to now: since yesterday's midnight (UTC) there
    # are 86,400 or more, whatever the time of day, so the list is estimated, never counted.
    # ("Since today's midnight" held fewer than the exact-count threshold before 02:47 UTC.)
    yesterday = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86_400))
    batch = Batch.objects.get(label="big").pk
    return {
        "list": changelist,
        "list, failed (exact count)": f"{changelist}?status__exact=failed",
        "list, job type": f"{changelist}?job_type=type-3",
        "list, queue + has error": f"{changelist}?queue=emails&has_error=yes",
        "list, created since yesterday": (
            f"{changelist}?created_at__gte={yesterday}+00%3A00%3A00%2B00%3A00"
            f"&created_at__lt=2999-01-01+00%3A00%3A00%2B00%3A00"
        ),
        "list, page 500": f"{changelist}?p=500",
        "search, id": f"{changelist}?q={base + 123456}",
        "search, dedupe key": f"{changelist}?q=key-{ROWS - 50}",
        "search, worker": f"{changelist}?q=worker-1",
        "search, no match": f"{changelist}?q=nothing-matches-this",
        "job page": reverse("admin:django_pqjobs_job_change", args=[base + ROWS // 2]),
        "dashboard": reverse("admin:django_pqjobs_job_dashboard"),
        "list, blocked": f"{changelist}?status__exact=blocked",
        "audit trail": reverse("admin:django_pqjobs_operatoraction_changelist"),
        "audit trail, job id": (
            reverse("admin:django_pqjobs_operatoraction_changelist") + f"?q={base + 500_000}"
        ),
        "batch list": reverse("admin:django_pqjobs_batch_changelist"),
        "batch page, 100,000 members": reverse("admin:django_pqjobs_batch_change", args=[batch]),
        "list, batch members": f"{changelist}?batch__id__exact={batch}",
        "list, batch members cancelled": (
            f"{changelist}?batch__id__exact={batch}&status__exact=cancelled"
        ),
        "job page, 100,000 dependents": (
            reverse("admin:django_pqjobs_job_change", args=[base + FAN_OUT])
        ),
        "list, dependents of a job": f"{changelist}?dependents_of={base + FAN_OUT}",
        "list, waiting": f"{changelist}?status__exact=waiting",
        "sort by queue (o=3)": f"{changelist}?o=3",
        "sort by status (o=4)": f"{changelist}?o=4",
        "sort by five columns": f"{changelist}?o=3.5.7.8.9",
        "2,000 sort terms": f"{changelist}?o={'.'.join(['3', '-4', '7', '8'] * 500)}",
        "sort by job type": f"{changelist}?o=2",
        "sort by job type, descending": f"{changelist}?o=-2",
        "job_type__regex": f"{changelist}?job_type__regex=%5E(a%2B)%2B%24",
        "payload lookup": f"{changelist}?payload__n=123",
        "NUL in status": f"{changelist}?status__exact=done%00",
        "NUL in job type": f"{changelist}?job_type=type-3%00",
        "page 20,000": f"{changelist}?p=20000",
        "facets": f"{changelist}?_facets=True",
        "cancelled (no index)": f"{changelist}?status__exact=cancelled",
        "finished in 2001": (
            f"{changelist}?finished_at__gte=2001-01-01+00%3A00%3A00%2B00%3A00"
            f"&finished_at__lt=2001-01-02+00%3A00%3A00%2B00%3A00"
        ),
        "queue nobody uses": f"{changelist}?queue=reports",
        "created in 2001": (
            f"{changelist}?created_at__gte=2001-01-01+00%3A00%3A00%2B00%3A00"
            f"&created_at__lt=2001-01-02+00%3A00%3A00%2B00%3A00"
        ),
    }


@pytest.mark.slow(seconds=75)
def test_every_admin_page_stays_fast_on_a_million_jobs(base, admin_client, capsys, monkeypatch):
    monkeypatch.setattr(JobAdmin, "list_statement_timeout", HOSTILE_TIMEOUT)
    client = admin_client
    client.get(reverse("admin:django_pqjobs_job_changelist"))  # warm session, content types
    timings = {}
    bodies = {}
    statuses = {}
    scans = {}
    for name, url in pages(base).items():
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = client.get(url)
            timings[name] = time.perf_counter() - started
        statuses[name] = response.status_code
        if response.status_code == 503:
            assert name in MAY_TIME_OUT, name
            assert b"stopped this list after 10 s" in response.content
        else:
            assert response.status_code == EXPECTED_STATUS.get(name, 200), name
            # A count stopped by the statement timeout (the machine busy) falls back to the
            # estimate: one statement more, the rollback to its savepoint.
            stopped = any("ROLLBACK TO SAVEPOINT" in q["sql"] for q in captured.captured_queries)
            # A list showing running jobs looks up their workers once (never per row).
            workers = sum(WORKERS_LOOKUP in q["sql"] for q in captured.captured_queries)
            assert workers <= 1, name
            assert len(captured.captured_queries) == EXPECTED_QUERIES[name] + stopped + workers, (
                name,
                [q["sql"][:120] for q in captured.captured_queries],
            )
        bodies[name] = response.content.decode()
        sqls = [q["sql"].upper() for q in captured.captured_queries]
        # (The batch table holds one batch here: the paginator counts it exactly, as it
        # counts any list the planner expects below 10,000 rows.)
        full_counts = [
            s for s in sqls if "COUNT(" in s and "WHERE" not in s and "PQJOBS_BATCH" not in s
        ]
        assert not full_counts, f"{name}: counted the whole table"
        if name not in MAY_SCAN:
            scans[name] = sequential_scans(captured.captured_queries)
    assert not {name: found for name, found in scans.items() if found}
    with capsys.disabled():
        print(
            f"admin on {ROWS:,} jobs (ms): "
            + ", ".join(
                f"{name} {seconds * 1000:.0f}"
                + (f" [{statuses[name]}]" if statuses[name] != 200 else "")
                for name, seconds in timings.items()
            )
        )

    # Bulk delete: "select all" across a million jobs asks on a page that counts them by
    # status (one scan), never lists them; then the failed ones (999) go, in batches.
    changelist = reverse("admin:django_pqjobs_job_changelist")
    across = {"action": "delete_action", "select_across": "1", "_selected_action": [base + 1]}
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        confirm = client.post(changelist, across)
        timings["bulk delete, asking for all"] = time.perf_counter() - started
    assert confirm.status_code == 200 and len(confirm.content) < 50_000
    assert "Delete <strong>999980</strong> jobs" in confirm.content.decode()
    # session, user, BEGIN, job type choices (twice: Django builds the filters again for the
    # action), EXPLAIN, the count by status, COMMIT
    assert len(captured.captured_queries) == 8, [q["sql"][:120] for q in captured]
    started = time.perf_counter()
    deleted = client.post(f"{changelist}?status__exact=failed", {**across, "post": "yes"})
    timings["bulk delete, 999 failed"] = time.perf_counter() - started
    assert deleted.status_code == 302
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pqjobs_job WHERE status = 'failed'")
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT count(*) FROM pqjobs_audit WHERE action = 'delete'")
        assert cursor.fetchone()[0] == 999  # every 1000th job but the last, which runs
    with capsys.disabled():
        print(
            "bulk delete (ms): "
            + ", ".join(
                f"{name} {timings[name] * 1000:.0f}"
                for name in ("bulk delete, asking for all", "bulk delete, 999 failed")
            )
        )

    # The searches find what the help text promises.
    def change(g: int) -> str:
        return reverse("admin:django_pqjobs_job_change", args=[base + g])

    rows = 'class="field-status_cell"'
    assert change(123456) in bodies["search, id"]
    assert bodies["search, dedupe key"].count(rows) == 1
    assert change(ROWS - 50) in bodies["search, dedupe key"]
    assert bodies["search, worker"].count(rows) == 7  # worker-1's running jobs
    assert rows not in bodies["search, no match"]
    # Blocked jobs say what holds them; the audit trail finds a job's actions by its id.
    assert bodies["list, blocked"].count(rows) == 50
    assert bodies["list, blocked"].count("concurrency limit of key acct-") == 50
    assert change(500_000) in bodies["audit trail, job id"]
    assert "Paused: queue <strong>emails</strong> (by oncall" in bodies["list"]
    # The job page links its parent (g - 1 for every 10th job).
    assert change(ROWS // 2 - 1) in bodies["job page"]
    # The batch page counts its members and links them by status, listing none; the job
    # page of a job with 100,000 dependents shows 50 and links the rest.
    members = f"?batch__id__exact={Batch.objects.get(label='big').pk}"
    batch_page = bodies["batch page, 100,000 members"]
    assert "100000 members: " in batch_page
    assert f"{members}&amp;status__exact=done" in batch_page
    # (its graph draws the first members: a bounded number, the rest a link)
    assert batch_page.count("/django_pqjobs/job/") < 20 + pictures.MAX_NODES
    assert "+99,952 more" in batch_page
    assert bodies["list, batch members"].count(rows) == 50
    assert bodies["list, batch members cancelled"].count(rows) == 50
    fan_out = bodies["job page, 100,000 dependents"]
    assert sum(change(g) in fan_out for g in range(FAN_OUT + 1, FAN_OUT + 101)) == 50
    assert "and 99,950 more" in fan_out
    assert bodies["list, dependents of a job"].count(rows) == 50
    # counted in time, or (the machine busy) as far as the bounded count saw
    assert re.search(r"\b(100000|10001) jobs\b", bodies["list, dependents of a job"])
    assert bodies["list, waiting"].count(rows) == 30
    assert "<td>waiting</td>" in bodies["dashboard"]

    # Unsortable columns sort by the default order; the job type sort is the index's.
    def link(g: int) -> str:  # the row's link (with the list's filters after it)
        return f'href="{change(g)}'

    for name in ("sort by queue (o=3)", "sort by five columns", "2,000 sort terms", "facets"):
        assert bodies[name].index(link(ROWS)) < bodies[name].index(link(ROWS - 1)), name
    assert link(ROWS - 20) in bodies["sort by job type"]  # type-0, newest first
    # Descending: type-9 first (the greatest name), oldest first (the index read backwards).
    assert link(9) in bodies["sort by job type, descending"]
