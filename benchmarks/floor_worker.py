"""``python -m benchmarks.floor_worker PLACE COUNT``: the least a worker can do per job.

One thread, one connection: in the turns ``run_jobs`` keeps in stream mode (this process
claims at offset PLACE of COUNT, every ``STREAM_SPACING`` seconds between them all), it calls
``pqjobs_claim()`` and records every job it got as done with ``pqjobs_complete()``, the two
statements ``run_jobs`` sends. No Job objects, executors, completer, hooks or tracing: the
result is the time the row was read, as ``tests.started_at`` would return. The mixed
scenario runs it in place of ``run_jobs`` to show the floor the state machine itself sets
(see docs/benchmarks.md). Runs until SIGTERM.
"""

import json
import signal
import sys
import time

from benchmarks.harness import raw_connection, setup_django

CLAIM = "SELECT * FROM pqjobs_claim(%s, %s::integer, NULL::text[], NULL::integer)"
COMPLETE = "SELECT pqjobs_complete(%s, %s::jsonb)"


def main() -> None:
    place, count = int(sys.argv[1]), int(sys.argv[2])
    setup_django(migrate=False)
    from django_pqjobs.worker.claim_loop import STREAM_PERIOD_MAX, STREAM_SPACING

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    period = min(STREAM_SPACING * count, STREAM_PERIOD_MAX)
    offset = period * place / count
    worker = f"floor-{place}"
    with raw_connection() as conn:
        cursor = conn.cursor()
        while not stopping:
            time.sleep(period - (time.time() - offset) % period)
            rows = cursor.execute(CLAIM, [worker, 500]).fetchall()
            # the columns by the names the claim gives them (pqjobs_claim()'s RETURNS TABLE)
            names = [column.name for column in cursor.description or ()]
            ID, ATTEMPT, TID = names.index("id"), names.index("attempts"), names.index("row_tid")
            rows = [row for row in rows if row[ID] is not None]  # (the held-count row)
            if not rows:
                continue
            started = json.dumps(json.dumps(time.time()))
            done = ",".join(
                f"[{r[ID]},{r[ATTEMPT]},0,{started},null,{json.dumps(r[TID])}]" for r in rows
            )
            cursor.execute(COMPLETE, [worker, f"[{done}]"])


if __name__ == "__main__":
    main()
