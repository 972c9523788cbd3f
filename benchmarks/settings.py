"""Benchmark settings: the test settings with worker-friendly intervals.

No LOGGING here: workers log the way ``run_jobs`` does for a project that configured none
(INFO to stderr, which the harness writes to ``results/worker.log``), as users run them.
"""

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
    "HISTORY_AFTER": 600,  # the default (the test settings turn it off)
}
# No receivers of the Tasks frameworks' signals, as in a project that has none.
TASKS_TEST_RECORD_SIGNALS = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # The Tasks frameworks log a line at INFO for every task start and finish
    # ("Task id=... state=..."), which costs throughput; the guide advises WARNING for them.
    # django-pqjobs's own logger stays at its default, as users run it.
    "loggers": {
        "django.tasks": {"level": "WARNING"},
        "django_tasks": {"level": "WARNING"},
    },
}
