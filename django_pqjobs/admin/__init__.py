"""Operator console in the Django admin: jobs (``jobs.py``), batches (``batches.py``),
schedules (``schedules.py``), live worker concurrency (``concurrency.py``) and the audit trail
of operator actions (``audit.py``)."""

from . import audit, batches, concurrency, jobs, schedules  # noqa: F401 - registers the ModelAdmins
