"""Operator console in the Django admin: jobs (``jobs.py``), batches (``batches.py``),
schedules (``schedules.py``), live worker concurrency (``concurrency.py``), the weights of fair
keys (``fairness.py``) and the audit trail of operator actions (``audit.py``)."""

from . import (  # noqa: F401 - registers the ModelAdmins
    audit,
    batches,
    concurrency,
    fairness,
    jobs,
    schedules,
)
