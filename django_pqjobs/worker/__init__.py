"""The worker: claims jobs, runs them in executor threads (or child processes), records how
each ended, and keeps itself and its jobs alive.

- ``worker``: the process-level loop and lifecycle tying the parts together (``run_jobs``).
- ``claiming``: the claim, and the ``Job`` built from each claimed row.
- ``slots``: one slot per job in flight, and the worker's set of them.
- ``executor``: runs one handler (thread, async, atomic or isolated) and decides its verdict.
- ``isolation`` / ``child`` / ``forkserver``: running a job in a child process.
- ``completer`` / ``recorder``: the one path that writes each verdict, then logs,
  signals and counts its outcome.
- ``watchdog``: timeouts of thread jobs.
- ``maintenance``: heartbeats, rescue, pruning, schedules on their intervals
  (``heartbeats`` and ``housekeeping`` hold their SQL).
- ``listener``: LISTEN/NOTIFY wake-ups. ``hooks``: pre/post execute hooks.
  ``db``: connection hygiene for long-running threads.

The state transitions themselves live in ``django_pqjobs/transitions/``.
"""
