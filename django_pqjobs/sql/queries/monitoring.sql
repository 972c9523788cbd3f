-- The statements of monitoring.py, each under its name (loaded once, at import).

-- name: depth
SELECT queue, job_type, 'ready', NULL, count(*), count(*) FILTER (WHERE run_after <= now()),
       extract(epoch FROM now())
       - extract(epoch FROM min(run_after) FILTER (WHERE run_after <= now()))
FROM pqjobs_job WHERE shelf = 'hot' AND status = 'ready' GROUP BY queue, job_type
UNION ALL
SELECT queue, job_type, 'blocked', blocked_by, count(*), 0,
       extract(epoch FROM now())
       - extract(epoch FROM min(run_after) FILTER (WHERE run_after <= now()))
FROM pqjobs_job WHERE shelf = 'hot' AND status = 'blocked' GROUP BY queue, job_type, blocked_by
UNION ALL
SELECT queue, job_type, 'waiting', NULL, count(*), 0, NULL
FROM pqjobs_job WHERE shelf = 'hot' AND status = 'waiting' GROUP BY queue, job_type
UNION ALL
SELECT queue, job_type, 'running', NULL, count(*), 0, NULL
FROM pqjobs_job WHERE shelf = 'hot' AND status = 'running' GROUP BY queue, job_type
UNION ALL
SELECT queue, job_type, 'failed', NULL, count(*), 0, NULL FROM (
    SELECT queue, job_type FROM pqjobs_job WHERE status = 'failed' ORDER BY id DESC LIMIT %s
) newest GROUP BY queue, job_type
UNION ALL
SELECT queue, job_type, 'expired', NULL, count(*), 0, NULL
FROM pqjobs_job WHERE status = 'expired' AND finished_at > now() - interval '24 hours'
GROUP BY queue, job_type

-- name: lag
SELECT extract(epoch FROM now()) - extract(epoch FROM least(
    (SELECT min(run_after) FROM pqjobs_job
     WHERE shelf = 'hot' AND status = 'ready' AND run_after <= now() {queue_filter}),
    (SELECT min(run_after) FROM pqjobs_job
     WHERE shelf = 'hot' AND status = 'blocked' AND blocked_by <> 'paused'
       AND run_after <= now() {queue_filter})
))

-- name: held_by_pause
SELECT count(*) FROM pqjobs_job
WHERE shelf = 'hot' AND status = 'blocked' AND blocked_by = 'paused' {queue_filter}

-- name: expired_lately
-- all shelves: jobs expired within the window, shelved ones too
SELECT count(*) FROM pqjobs_job
WHERE status = 'expired' AND finished_at > now() - make_interval(secs => %s) {queue_filter}

-- name: left_behind
SELECT count(*) FILTER (WHERE status = 'ready' AND run_after <= now()),
       count(*) FILTER (WHERE status = 'ready' AND run_after <= now()
                        AND schedule_id IS NOT NULL),
       count(*) FILTER (WHERE status = 'ready' AND run_after > now() AND attempts > 0),
       extract(epoch FROM min(run_after) FILTER (WHERE status = 'ready' AND run_after > now()
                                                 AND attempts > 0))
       - extract(epoch FROM now()),
       count(*) FILTER (WHERE status = 'ready' AND run_after > now() AND attempts = 0),
       extract(epoch FROM min(run_after) FILTER (WHERE status = 'ready' AND run_after > now()
                                                 AND attempts = 0))
       - extract(epoch FROM now()),
       count(*) FILTER (WHERE status = 'blocked' AND blocked_by = 'paused'),
       count(*) FILTER (WHERE status = 'blocked' AND blocked_by IS DISTINCT FROM 'paused')
FROM pqjobs_job
WHERE shelf = 'hot' AND status IN ('ready', 'blocked') {queue_filter} {priority_filter}

-- name: workers
SELECT worker_id, hostname, pid, concurrency,
       least(greatest(started_at, '0001-01-02 00:00+00'), '9999-12-30 00:00+00'),
       extract(epoch FROM now()) - extract(epoch FROM heartbeat_at),
       extract(epoch FROM now()) - extract(epoch FROM loop_at),
       least(greatest(heartbeat_at, '0001-01-02 00:00+00'), '9999-12-30 00:00+00'),
       queues, started_concurrency, max_concurrency
FROM pqjobs_worker ORDER BY worker_id

-- name: read_lag
SELECT CASE
    WHEN NOT pg_is_in_recovery() THEN NULL
    WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
    ELSE GREATEST(0, extract(epoch FROM now() - pg_last_xact_replay_timestamp()))
END

-- name: set_timeout
SELECT set_config('statement_timeout', %s, true)

-- name: default_timeout
SET LOCAL statement_timeout TO DEFAULT
