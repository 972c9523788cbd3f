"""Operator console in the Django admin: jobs (``jobs.py``) and schedules (``schedules.py``)."""

from . import jobs, schedules  # noqa: F401 - registers the ModelAdmins
