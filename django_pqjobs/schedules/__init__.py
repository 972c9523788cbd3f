"""Recurring jobs: syncing the schedules declared in code to the table (``sync``), the
scheduler pass every worker runs (``scheduler``) and the checks of declared schedules
(``checks``). What a schedule *is* and when it runs (cron, intervals, time zones) is pure
logic in ``django_pqjobs/recurrence.py``.
"""
