"""The test settings with priority aging in the queue ``aging`` (+1 a second, up to 10): for
the worker process of tests/integration/test_priority_aging.py, which reads its settings
once, at start."""

from tests.settings import *  # noqa: F403

PQJOBS = {**PQJOBS, "PRIORITY_AGING": {"aging": {"every": "1s", "up_to": 10}}}  # noqa: F405
