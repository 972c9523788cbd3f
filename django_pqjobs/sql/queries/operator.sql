-- The statements of transitions/operator.py, each under its name (loaded once, at import).

-- name: requeue
-- Attempt numbers go on (they fence a worker that may still be alive, and keep the history
-- readable): the job gets as many new attempts as its bound was. The cap keeps the column
-- inside its 32 bits. A job whose dedupe_key another job of its type holds in its window
-- (the unique index pqjobs_job_unique_key allows one; its predicate is repeated here) stays
-- as it is, and of several retried together with one key only the newest goes back. A
-- retried job loses its deadline (an operator's Retry asks for it to run). The jobs were
-- brought back to the hot table first (history.unshelve, in this transaction).
WITH old AS (
    SELECT id, status, job_type, dedupe_key,
           COALESCE(unique_until, 'infinity'::timestamptz) AS window_end FROM pqjobs_job
    WHERE shelf = 'hot' AND id = ANY(%s) AND status IN ('failed', 'cancelled', 'expired')
    ORDER BY id
    FOR UPDATE
), ranked AS (
    SELECT old.*,
           row_number() OVER (PARTITION BY job_type, dedupe_key, window_end ORDER BY id DESC)
               AS nth
    FROM old
), chosen AS (
    SELECT r.id, r.status FROM ranked r
    WHERE r.dedupe_key IS NULL
       OR (r.nth = 1 AND NOT EXISTS (
            SELECT 1 FROM pqjobs_job d
            WHERE d.shelf = 'hot' AND d.job_type = r.job_type AND d.dedupe_key = r.dedupe_key
              AND COALESCE(d.unique_until, 'infinity'::timestamptz) = r.window_end
              AND d.id <> r.id
              AND dedupe_key IS NOT NULL AND (status IN ('ready', 'blocked', 'running') OR (unique_states & CASE status WHEN 'done' THEN 1 WHEN 'failed' THEN 2 WHEN 'cancelled' THEN 4 ELSE 0 END) <> 0)))
)
UPDATE pqjobs_job AS j
SET status = 'ready', retried_from = j.attempts,
    max_attempts = LEAST(j.attempts::bigint + GREATEST(j.max_attempts - j.retried_from, 1),
                         2147483647),
    run_after = now(), finished_at = NULL, cancel_requested_at = NULL, expires_at = NULL,
    locked_by = NULL,
    locked_at = NULL, heartbeat_at = NULL, updated_at = now()
FROM chosen
WHERE j.shelf = 'hot' AND j.id = chosen.id
RETURNING j.id, chosen.status, j.attempts, j.max_attempts

-- name: lock_dependencies
-- all shelves: prerequisites by id, finished ones in history too
-- A retried job that has dependencies still active (retried too, say) waits for them again.
-- The dependencies are locked first (FOR SHARE: their status cannot change until this
-- transaction commits), so the count taken by the next statement stays true and their
-- finish, settled after this commit, sees the job waiting.
SELECT 1 FROM pqjobs_dependency d JOIN pqjobs_job p ON p.id = d.depends_on_id
WHERE d.job_id = ANY(%s) ORDER BY p.id FOR SHARE OF p

-- name: wait_again
-- all shelves (p): prerequisites by id, finished ones in history too
-- (A dependent that halts counts a failed dependency as unfinished. A job retried into a
-- pause was held by it at once, sql/schema/flow.sql: it waits all the same.)
UPDATE pqjobs_job AS j SET status = 'waiting', blocked_by = NULL, waiting_for = a.active
FROM (
    SELECT d.job_id, count(*) AS active FROM pqjobs_dependency d
    JOIN pqjobs_job p ON p.id = d.depends_on_id
    JOIN pqjobs_job w ON w.id = d.job_id
    WHERE w.shelf = 'hot' AND d.job_id = ANY(%s)
      AND (p.status NOT IN ('done', 'failed', 'cancelled', 'expired')
           OR p.status = 'failed' AND w.on_dependency_failure = 'halt')
    GROUP BY d.job_id
) a
WHERE j.shelf = 'hot' AND j.id = a.job_id
  AND (j.status = 'ready' OR j.status = 'blocked' AND j.blocked_by = 'paused')

-- name: run_now
-- The job is given a run_after just before the earliest ready job of its priority (or now,
-- if that is later), so the next claim that reaches its priority takes it first. The
-- earliest run_after of a priority is the first entry of the claim index for it.
WITH target AS (
    SELECT j.id, j.priority, j.run_after > now() AS delayed FROM pqjobs_job j
    WHERE j.shelf = 'hot' AND j.id = ANY(%s) AND j.status = 'ready'
    ORDER BY j.id
    FOR UPDATE
), head AS (
    SELECT t.id, t.delayed,
           (SELECT min(h.run_after) FROM pqjobs_job h
            WHERE h.shelf = 'hot' AND h.status = 'ready' AND h.priority = t.priority) AS earliest
    FROM target t
)
UPDATE pqjobs_job AS j
SET run_after = LEAST(now(), head.earliest - interval '1 microsecond'), updated_at = now()
FROM head
WHERE j.shelf = 'hot' AND j.id = head.id
RETURNING j.id, head.delayed

-- name: delete
-- all shelves: jobs by id, wherever they are
-- What they leave behind goes in the next statement (forget), once this one's trigger has
-- noted the jobs whose dependents settle at the commit.
DELETE FROM pqjobs_job WHERE id = ANY(%s) AND status <> 'running'
RETURNING id, job_type, status

-- name: forget
SELECT pqjobs_job_forget(%s::bigint[])

-- name: cancel
UPDATE pqjobs_job SET status = 'cancelled', finished_at = now(), updated_at = now()
WHERE shelf = 'hot' AND id = ANY(%s) AND status IN ('waiting', 'ready', 'blocked') RETURNING id

-- name: skip
-- A failed job is set aside (cancelled, its error kept), so the jobs that halt on it (the
-- rest of its sequence) go on: the database settles them at commit. (Brought back to the
-- hot table first: history.unshelve.)
UPDATE pqjobs_job SET status = 'cancelled', finished_at = now(), updated_at = now()
WHERE shelf = 'hot' AND id = ANY(%s) AND status = 'failed' RETURNING id

-- name: request_cancel
UPDATE pqjobs_job SET cancel_requested_at = now(), updated_at = now()
WHERE shelf = 'hot' AND id = ANY(%s) AND status = 'running' AND cancel_requested_at IS NULL
RETURNING id

-- name: cancel_duplicates
-- In the window a job enqueued now would hold its key in (unique_for: %(period)s seconds;
-- NULL: no window), as pqjobs_enqueue() computes it. A job replaced lets go of its key,
-- even if its unique_states would hold it while cancelled.
UPDATE pqjobs_job SET status = 'cancelled', finished_at = now(), updated_at = now(),
    last_error = 'replaced by a newer job with the same dedupe_key',
    unique_states = unique_states & ~4
WHERE shelf = 'hot' AND job_type = %(type)s AND dedupe_key = ANY(%(keys)s)
  AND status IN ('ready', 'blocked')
  AND COALESCE(unique_until, 'infinity'::timestamptz) = COALESCE(
      to_timestamp((floor(extract(epoch FROM now())::double precision
                          / %(period)s::double precision) + 1) * %(period)s::double precision),
      'infinity'::timestamptz)
RETURNING id

-- name: push_back
-- A debounced duplicate: the pending job takes the newest payload and is due again later,
-- never later than the cap after it was first enqueued (NULL: no cap). A job claimed
-- meanwhile is left alone (the enqueuer then sees it running).
UPDATE pqjobs_job SET payload = %(payload)s::jsonb,
    payload_version = %(version)s::smallint, updated_at = now(),
    run_after = LEAST(now() + make_interval(secs => %(debounce)s),
                      created_at + make_interval(secs => %(cap)s))
WHERE shelf = 'hot' AND id = %(id)s AND status IN ('ready', 'blocked')
RETURNING id

-- name: let_go_of_key
-- A debounced duplicate met its job running: the running job keeps running without its
-- key, and the new one (the newest payload) holds it, to run after.
UPDATE pqjobs_job SET dedupe_key = NULL, updated_at = now()
WHERE shelf = 'hot' AND id = %s AND status = 'running'

-- name: any_dependencies
SELECT 1 FROM pqjobs_dependency WHERE job_id = ANY(%s) LIMIT 1
