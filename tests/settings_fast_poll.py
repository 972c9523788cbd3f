"""The test settings with a worker that polls every 0.2 s at most when idle: for tests that
bound how late a job that became due by the clock (no notification) is started."""

from tests.settings import *  # noqa: F403

PQJOBS = {**PQJOBS, "POLL_INTERVALS": [0.05, 0.1, 0.2]}  # noqa: F405
