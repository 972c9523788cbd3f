"""Django signals sent around enqueue and each job outcome.

- ``job_enqueued(sender=job_type, job_id, job_type, created)``: after the INSERT (inside the
  caller's transaction, if any). ``created`` is False when a dedupe returned an existing job;
  ``job_id`` is None for ``enqueue_many``.
- ``job_started(sender=job_type, job, worker_id)``: in the executor, before the handler.
- ``job_finished(sender=job_type, job, outcome, error)``: after the outcome is recorded.
  ``outcome`` is one of ``done``, ``retry``, ``failed``, ``cancelled``, ``lost`` (the
  attempt was no longer this worker's). Sent for every recorded attempt, including one the
  watchdog abandoned.
"""

from django.dispatch import Signal

job_enqueued = Signal()
job_started = Signal()
job_finished = Signal()
