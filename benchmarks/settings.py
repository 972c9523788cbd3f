"""Benchmark settings: the test settings with quiet logging and worker-friendly intervals."""

from tests.settings import *  # noqa: F403

PQJOBS = {
    **PQJOBS,  # noqa: F405
    "HOOKS": {},
    "POLL_INTERVALS": [1, 2, 5, 10],
    "SHUTDOWN_TIMEOUT": 10,
    # the sustained scenario prunes done jobs as it goes; kept longer than its 60 s
    # measuring window, which counts the jobs finished in that window
    "RETENTION": {"done": 90, "failed": 3600, "cancelled": 3600},
    "PRUNE_INTERVAL": 10,
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"django_pqjobs": {"level": "WARNING"}},
}
