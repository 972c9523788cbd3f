"""``python -m benchmarks.probed run_jobs ...``: ``manage.py`` with timestamps taken at the
stages between a NOTIFY and a handler's start, for the latency breakdown
(docs/benchmarks.md). Benchmark-only: the product code is wrapped here, not changed, so
``run_jobs`` itself carries no measuring.

Each mark is ``time.time()`` (the clock the database's timestamps and the handler's result
share). At exit the marks go, as JSON, to the file named by ``PQJOBS_PROBE_FILE``:
``heard`` (the listener got a notification), and per claim ``[start, returned, dispatched,
job ids]`` (the claim loop sent the claim; its rows were read; its jobs were on the
executors' queue).
"""

import atexit
import json
import os
import sys
import time

MARKS: dict[str, list] = {"heard": [], "claims": []}


def install() -> None:
    from django_pqjobs.worker import claim_loop, listener, worker

    heard = listener.Listener._heard

    def probed_heard(self, queue, pid, *rest):  # type: ignore[no-untyped-def]
        MARKS["heard"].append(time.time())
        return heard(self, queue, pid, *rest)

    listener.Listener._heard = probed_heard  # type: ignore[method-assign]
    claim_jobs = claim_loop.claim_jobs
    pending: list = []

    def probed_claim_jobs(*args, **kwargs):  # type: ignore[no-untyped-def]
        start = time.time()
        batch = claim_jobs(*args, **kwargs)
        pending.append((start, time.time(), [job.id for job in batch.jobs]))
        return batch

    claim_loop.claim_jobs = probed_claim_jobs
    dispatch = worker.Worker._dispatch

    def probed_dispatch(self, batch):  # type: ignore[no-untyped-def]
        dispatch(self, batch)
        if pending:
            start, returned, ids = pending.pop()
            if ids:
                MARKS["claims"].append([start, returned, time.time(), ids])

    worker.Worker._dispatch = probed_dispatch  # type: ignore[method-assign]

    def write() -> None:
        with open(os.environ["PQJOBS_PROBE_FILE"], "w") as out:
            json.dump(MARKS, out)

    atexit.register(write)


if __name__ == "__main__":
    import django
    from django.core.management import execute_from_command_line

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    django.setup()
    install()
    execute_from_command_line(["manage.py", *sys.argv[1:]])
