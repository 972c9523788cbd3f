"""PQJOBS["READ_DATABASE"] with a real streaming replica (issue 32, reads off the primary).

A disposable primary and a hot standby of it (pg_basebackup), both started by the test. The
standby's replay is paused after three jobs and two more are enqueued on the primary: the
lists, the dashboard and the metrics show three (they read the standby), the job page and
the actions work on the fifth (they use the primary), and a worker with the same settings
runs all five.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, bound
from tests.pgcluster import disposable_cluster, standby_of

pytestmark = pytest.mark.slow


def test_the_console_reads_the_replica_and_every_change_goes_to_the_primary():
    with disposable_cluster() as primary, standby_of(primary) as standby:
        env = {**os.environ, **primary.env(), "PQJOBS_TEST_READ_URL": standby.url()}
        done = subprocess.run(
            [sys.executable, "-m", "tests.integration.replica_scenario"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=bound(120),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        first, later = seen["first"], seen["later"]

        # The list, the dashboard and the metrics read the standby: three jobs.
        assert seen["listed"] == first
        assert seen["dashboard_ready"] == ["3"]
        assert seen["dashboard_replica"]
        assert seen["metrics_status"] == 200
        assert (
            'pqjobs_jobs{job_type="tests.noop",queue="default",status="ready"} 3.0'
            in seen["metrics"]
        )
        assert any(line.startswith("pqjobs_read_lag_seconds ") for line in seen["metrics"])
        # The job page and the action use the primary, where the later jobs are.
        assert seen["job_page"] == 200
        assert seen["cancel"] == 302
        statuses = {int(k): v for k, v in seen["statuses_on_primary"].items()}
        assert statuses[later[0]] == "cancelled"
        # Once replay resumes, the list shows all five.
        assert seen["listed_after_replay"] == sorted(first + later)

        # A worker with READ_DATABASE set claims and finishes on the primary, even while
        # the standby is paused.
        with standby.connect() as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
        worker = subprocess.run(
            [sys.executable, "-m", "django", "run_jobs", "--burst"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=bound(120),
        )
        assert worker.returncode == 0, worker.stderr[-3000:]
        with primary.connect() as conn:
            rows = dict(conn.execute("SELECT status, count(*) FROM pqjobs_job GROUP BY 1"))
        assert rows == {"done": 4, "cancelled": 1}
