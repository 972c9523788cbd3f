"""The test settings with finished jobs moved to history partitions, as by default (the
test settings turn it off): for the processes tests/integration/test_history_migration.py
starts."""

from tests.settings import *  # noqa: F403

PQJOBS = {**PQJOBS, "HISTORY_AFTER": 600}  # noqa: F405
