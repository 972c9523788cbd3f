"""The test settings with a worker that writes its heartbeat (its row in pqjobs_worker,
with the concurrency it runs) every second instead of every 10: for the tests that wait
for a worker's row to show a new concurrency (run_jobs(..., DJANGO_SETTINGS_MODULE=...))."""

from tests.settings import *  # noqa: F403

PQJOBS = {**PQJOBS, "HEARTBEAT_INTERVAL": 1}  # noqa: F405
