"""Recurring jobs: schedule definitions and timing (``timing``), syncing the schedules
declared in code to the table (``sync``), and the scheduler pass every worker runs
(``scheduler``).
"""
