"""Django signals sent around enqueue and each job outcome.

- ``job_enqueued(sender=job_type, job_id, job_type, created)``: after the INSERT (inside the
  caller's transaction, if any). ``created`` is False when a dedupe returned an existing job;
  ``job_id`` is None for ``enqueue_many``.
- ``job_started(sender=job_type, job, worker_id)``: in the executor, before the handler.
- ``job_finished(sender=job_type, job, outcome, error)``: once for every ending (see
  ``endings.py``). ``outcome`` is one of ``done``, ``retry``, ``failed``, ``cancelled``,
  ``released`` (the attempt was given back), ``lost`` (the attempt was no longer this
  worker's). The worker sends it for every attempt it records, including one the watchdog
  abandoned; the process that rescued, cancelled, released or replaced a job sends it after
  its commit, also for the dependents the database cancelled then.
"""

from django.dispatch import Signal

job_enqueued = Signal()
job_started = Signal()
job_finished = Signal()
