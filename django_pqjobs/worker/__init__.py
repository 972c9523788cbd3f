"""The worker: claiming, executing, heartbeats, rescue and pruning.

- ``queries``: every SQL statement that changes a job's status (the state machine).
- ``executor``: runs one handler in a thread, with timeouts, and records its outcome.
- ``maintenance``: heartbeats, stale-job rescue and retention pruning.
- ``listener``: LISTEN/NOTIFY wake-ups.
- ``worker``: the process-level loop tying them together (``run_jobs``).
"""
