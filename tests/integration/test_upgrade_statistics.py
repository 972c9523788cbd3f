"""Plans right after an upgrade of a loaded, analysed database.

Migration 0027 added the ``shelf`` column to job tables that may already hold millions of
rows. A column added with a default has no statistics until autovacuum next analyses the
table (after a tenth of its rows change); until then the planner reads every
``shelf = 'hot'`` as one row in 200. Migration 0038 samples that column: the history
mover's batch, planned right after ``migrate``, reads the index of finished jobs in order
instead of sorting the whole hot table for each batch it moves.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.db import connection

from django_pqjobs.transitions import history
from tests.helpers import ROOT, bound

ROWS = 100_000

# 1 job in 10 ready, the others done over the last 6 days: what a queue that ran a while
# holds when it is upgraded.
_FILL = """
INSERT INTO pqjobs_job (job_type, payload, status, attempts, max_attempts, run_after,
                        finished_at)
SELECT 'tests.noop', '{}', CASE WHEN g %% 10 = 0 THEN 'ready' ELSE 'done' END, 1, 5, now(),
       CASE WHEN g %% 10 = 0 THEN NULL
            ELSE now() - make_interval(secs => (g %% 6) * 86400 + 3600 + g %% 1000) END
FROM generate_series(1, %s) g
"""


def _migrate(database: str, target: str | None = None) -> None:
    targets = [target] if target else []
    done = subprocess.run(
        [sys.executable, "-m", "django", "migrate", "django_pqjobs", *targets, "--verbosity", "0"],
        cwd=ROOT,
        env={**os.environ, "PQJOBS_TEST_DATABASE": database},
        capture_output=True,
        text=True,
        timeout=bound(600),
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _connect(database: str) -> psycopg.Connection:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    return psycopg.connect(**{**params, "dbname": database}, autocommit=True)


def _shelve_plan(db: psycopg.Connection) -> str:
    """The plan of the history mover's batch of done jobs, as ``prune_jobs`` sends it."""
    today = datetime.now(UTC).date()
    params = {
        "status": "done",
        "after": 600.0,
        "kept": None,
        "span": history.span_for(None),
        "first_day": today - timedelta(days=30),
        "end_day": today + timedelta(days=2),
        "batch": history.SHELVE_BATCH,
    }
    rows = db.execute("EXPLAIN " + history._SHELVE, params).fetchall()
    return "\n".join(row[0] for row in rows)


@pytest.mark.django_db
@pytest.mark.slow
def test_the_history_mover_reads_the_index_right_after_the_upgrade(empty_database):
    _migrate(empty_database, "0026")
    with _connect(empty_database) as db:
        db.execute(_FILL, [ROWS])
        db.execute("ANALYZE")  # as autovacuum left the table before the upgrade
    _migrate(empty_database)
    with _connect(empty_database) as db:
        analysed = db.execute(
            "SELECT tablename FROM pg_stats WHERE attname = 'shelf' "
            "AND tablename IN ('pqjobs_job_hot', 'pqjobs_attempt_hot') ORDER BY tablename"
        ).fetchall()
        assert analysed == [("pqjobs_job_hot",)]  # pqjobs_attempt_hot is empty here
        plan = _shelve_plan(db)
        assert "pqjobs_job_finished" in plan, plan
        assert "Seq Scan" not in plan and "Sort" not in plan, plan
