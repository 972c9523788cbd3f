-- The one unique index of dedupe keys: at most one job per job type, key and window holds
-- the key. A job holds its key while ready, blocked or running, and while done, failed or
-- cancelled as its unique_states mask says (1, 2, 4). unique_until is the end of the
-- window a unique_for job was enqueued in; without one (NULL) the window is for ever.
-- Waiting jobs hold no key (a job with depends_on, or in a batch, has none).
--
-- The shelf is in its key because pqjobs_job is partitioned by it (history.sql): a unique
-- index of a partitioned table holds its partition key, and so is unique per partition.
-- That is enough: every job that holds its key is in the hot partition (the history mover
-- leaves them there), and every enqueue inserts there.
--
-- Every statement that relies on it repeats its predicate word for word (PostgreSQL proves
-- an ON CONFLICT target, or a query's use of the index, by that text): enqueue.sql, the
-- queries of enqueue.py and queries/operator.sql. tests/integration/test_uniqueness.py
-- checks that each copy is this one.
CREATE UNIQUE INDEX IF NOT EXISTS pqjobs_job_unique_key
    ON :"schema".pqjobs_job (job_type, dedupe_key, (COALESCE(unique_until, 'infinity'::timestamptz)), shelf)
    WHERE dedupe_key IS NOT NULL AND (status IN ('ready', 'blocked', 'running') OR (unique_states & CASE status WHEN 'done' THEN 1 WHEN 'failed' THEN 2 WHEN 'cancelled' THEN 4 ELSE 0 END) <> 0);
