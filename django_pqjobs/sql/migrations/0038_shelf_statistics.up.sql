-- The statistics of the shelf column of the hot tables. Migration 0027 added the column to
-- tables that may hold millions of rows; a column added with a default has no statistics
-- until autovacuum next analyses its table, which waits for a tenth of the rows to change.
-- Until then the planner takes every `shelf = 'hot'` (the hot shelf's statements say it)
-- for one row in 200, and plans for that: the history mover sorted the whole hot table
-- for each batch of 5,000 it moved, instead of reading the index of finished jobs
-- (tests/integration/test_upgrade_statistics.py). Sampling one column is cheap at any size.
ANALYZE :"schema".pqjobs_job_hot (shelf), :"schema".pqjobs_attempt_hot (shelf);
