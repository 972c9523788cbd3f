"""Lifecycle hooks for the hook tests: each records where (which process) it ran.

Configured for the whole test suite in tests/settings.py; they only record jobs whose
payload has ``"hooks": true``.
"""

import os

from .models import Effect


def pre_execute(job) -> None:
    if job.payload.get("hooks"):
        Effect.objects.create(key=f"pre:{job.id}:{job.attempts}", worker=str(os.getpid()))


def post_execute(job, error) -> None:
    if job.payload.get("hooks"):
        outcome = "ok" if error is None else type(error).__name__
        Effect.objects.create(
            key=f"post:{job.id}:{job.attempts}:{outcome}", worker=str(os.getpid())
        )
