-- Durable workflows: the record of a step, a sleep or a wait (workflows.py), as a PL/pgSQL
-- function whose plan is made once per server session. A step is one statement of its own,
-- sent once per step of every workflow: planned anew each time (an INSERT ... ON CONFLICT
-- with its fence), it cost the server more than the insert itself.
--
-- It runs with the caller's rights (SECURITY INVOKER): the worker role's INSERT on
-- pqjobs_step and SELECT on pqjobs_job.

-- Records the step p_name of job p_job, fenced on the attempt (only while the job runs as
-- p_attempt on p_worker). p_finished: a step's result (now finished); else a sleep or a
-- wait, ending p_wake seconds from now. p_async: the statement is its own transaction, to
-- be committed without waiting for the WAL flush (a record the server loses in a crash of
-- its own runs its step once more, which at-least-once allows). True when recorded; false
-- when the attempt is no longer the caller's, or the name is recorded already.
CREATE OR REPLACE FUNCTION :"schema".pqjobs_record_step(
    p_job bigint,
    p_worker text,
    p_attempt integer,
    p_name text,
    p_kind text,
    p_result jsonb,
    p_finished boolean,
    p_wake double precision,
    p_async boolean
) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_async THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    INSERT INTO :"schema".pqjobs_step
        (job_id, name, kind, result, attempt, started_at, finished_at, wake_at)
    SELECT j.id, p_name, p_kind, p_result, j.attempts, now(),
           CASE WHEN p_finished THEN now() END, now() + make_interval(secs => p_wake)
    FROM :"schema".pqjobs_job j
    WHERE j.shelf = 'hot' AND j.id = p_job AND j.status = 'running' AND j.locked_by = p_worker
      AND j.attempts = p_attempt
    ON CONFLICT (job_id, name) DO NOTHING;
    RETURN FOUND;
END
$$;
