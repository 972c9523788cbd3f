"""The benchmark settings with the workers' pruning off: the history scenario's workers must
leave alone the history they are measured beside (RETENTION drops it when the scenario says)."""

from .settings import *  # noqa: F403

PQJOBS = {**PQJOBS, "PRUNE_INTERVAL": None}  # noqa: F405
