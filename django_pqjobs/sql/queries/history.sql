-- The statements of transitions/history.py, each under its name (loaded once, at import).
-- The partitions themselves are made and dropped by pqjobs_history_prepare() and
-- pqjobs_history_drop() (sql/schema/history.sql).

-- name: spans_to_shelve
-- The spans (their first UTC days) holding jobs of a status the mover would shelve (a
-- superset: it does not look at dedupe keys), one probe of the index of finished jobs per
-- span, and today: their partitions are made first. A row with no span when there is no
-- such job. A span of N days starts on a day whose number since 1970-01-01 N divides.
WITH RECURSIVE spans AS (
    SELECT first.day - ((first.day - date '1970-01-01') %% %(span)s::integer) AS start
    FROM (
        SELECT (min(finished_at) AT TIME ZONE 'UTC')::date AS day
        FROM pqjobs_job
        WHERE shelf = 'hot' AND status = %(status)s
          AND finished_at < now() - make_interval(secs => %(after)s)
          AND (%(kept)s::float8 IS NULL
               OR finished_at >= now() - make_interval(secs => %(kept)s))
    ) first
    UNION ALL
    SELECT next.day - ((next.day - date '1970-01-01') %% %(span)s::integer)
    FROM spans s, LATERAL (
        SELECT (min(j.finished_at) AT TIME ZONE 'UTC')::date AS day
        FROM pqjobs_job j
        WHERE j.shelf = 'hot' AND j.status = %(status)s
          AND j.finished_at < now() - make_interval(secs => %(after)s)
          AND j.finished_at >= (s.start + %(span)s::integer)::timestamp AT TIME ZONE 'UTC'
    ) next
    WHERE s.start IS NOT NULL
)
SELECT start, (now() AT TIME ZONE 'UTC')::date FROM spans
WHERE start IS NOT NULL OR NOT EXISTS (SELECT 1 FROM spans WHERE start IS NOT NULL)

-- name: shelve
-- Up to a batch of a status's jobs, oldest first, finished HISTORY_AFTER ago and kept by
-- RETENTION, leave the hot table for the partition of their span, with their attempts. A
-- job that still holds its dedupe key stays (the unique index is per partition: only the
-- hot one answers an enqueue); so do jobs locked by someone else (an operator's action),
-- and jobs of spans with no partition made yet. pqjobs_history_shelve() moves them, and
-- their attempts, with the owner's rights (no other role may change a job's shelf); it
-- returns how many moved.
WITH picked AS (
    SELECT j.id, j.status || '/' || to_char(day - ((day - date '1970-01-01') %% %(span)s::integer),
                                            'YYYY-MM-DD') || '/' || %(span)s::integer AS shelf
    FROM pqjobs_job j, LATERAL (SELECT (j.finished_at AT TIME ZONE 'UTC')::date AS day) d
    WHERE j.shelf = 'hot' AND j.status = %(status)s
      AND j.finished_at < now() - make_interval(secs => %(after)s)
      AND (%(kept)s::float8 IS NULL
           OR j.finished_at >= now() - make_interval(secs => %(kept)s))
      AND j.finished_at >= %(first_day)s::date::timestamp AT TIME ZONE 'UTC'
      AND j.finished_at < %(end_day)s::date::timestamp AT TIME ZONE 'UTC'
      AND NOT (COALESCE(j.unique_until, 'infinity'::timestamptz) > now() AND {held_by_key})
    ORDER BY j.finished_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
SELECT pqjobs_history_shelve(COALESCE(array_agg(id), '{}'), COALESCE(array_agg(shelf), '{}'))
FROM picked

-- name: unshelve
-- Shelved jobs of the given statuses back into the hot table, before a transition changes
-- their status (Retry, Skip): a history partition holds one status. Their attempts follow
-- (pqjobs_history_unshelve() runs with the owner's rights: a role that retries jobs may
-- not read attempts, nor change a job's shelf).
SELECT pqjobs_history_unshelve(%s::bigint[], %s::text[])

-- name: hot_already
-- How many of the jobs (of the given statuses) are on the hot shelf, locked there (in id
-- order, as the transitions lock them) so that the history mover cannot take one away
-- before the caller's transition: when all of them are, unshelve has nothing to look for
-- in history (and plans no history partition).
SELECT count(*) FROM (
    SELECT id FROM pqjobs_job
    WHERE shelf = 'hot' AND id = ANY(%s) AND status = ANY(%s)
    ORDER BY id FOR NO KEY UPDATE
) AS held

-- name: prepare
-- The partitions of these shelves that do not exist yet are made (sql/schema/history.sql).
SELECT pqjobs_history_prepare(%s::text[])

-- name: drop_expired
-- The partitions of a status whose whole span is older than its retention (seconds) go.
SELECT pqjobs_history_drop(%s, ((now() - make_interval(secs => %s)) AT TIME ZONE 'UTC')::date)
