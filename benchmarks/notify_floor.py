"""``python -m benchmarks.notify_floor``: the raw LISTEN/NOTIFY floor of the latency scenario.

The least any LISTEN/NOTIFY queue can do between an enqueue and a handler: one process,
one connection in autocommit, LISTENing; on a notification it claims with one
``UPDATE ... FOR UPDATE SKIP LOCKED ... RETURNING`` on a plain table (``TABLE``, made by the
latency scenario), takes ``time.time()`` (the handler's first line) and records it with
one more UPDATE. Its commits do not wait for the WAL flush, as the worker's claim does
not (``pqjobs_claim()``): the enqueue's commit is durable in both. No Django, threads, Job
objects, hooks or flow control. The enqueuer inserts and notifies in one statement. Runs
until SIGTERM.
"""

import signal
import time

from benchmarks.harness import raw_connection, setup_django

TABLE = "pqjobs_bench_floor"
CHANNEL = "pqjobs_floor"
CREATE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (id bigserial PRIMARY KEY, "
    "status text NOT NULL DEFAULT 'ready', payload jsonb NOT NULL DEFAULT '{}', "
    "created_at timestamptz NOT NULL DEFAULT now(), locked_at timestamptz, heard float8, "
    "result float8); "
    f"CREATE INDEX IF NOT EXISTS {TABLE}_ready ON {TABLE} (id) WHERE status = 'ready'"
)
ENQUEUE = (
    f"WITH j AS (INSERT INTO {TABLE} (payload) VALUES ('{{}}') RETURNING id) "
    f"SELECT pg_notify('{CHANNEL}', '') FROM j"
)
CLAIM = (
    f"UPDATE {TABLE} SET status = 'running', locked_at = now() WHERE id IN ("
    f"SELECT id FROM {TABLE} WHERE status = 'ready' ORDER BY id LIMIT 10 "
    "FOR UPDATE SKIP LOCKED) RETURNING id"
)
DONE = f"UPDATE {TABLE} SET status = 'done', heard = %s, result = %s WHERE id = ANY(%s)"


def main() -> None:
    setup_django(migrate=False)
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    with raw_connection() as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute(f"LISTEN {CHANNEL}")
        while not stopping:
            if not list(conn.notifies(timeout=0.5, stop_after=1)):
                continue
            heard = time.time()
            ids = [row[0] for row in conn.execute(CLAIM).fetchall()]
            started = time.time()  # the handler's first line
            if ids:
                conn.execute(DONE, [heard, started, ids])


if __name__ == "__main__":
    main()
