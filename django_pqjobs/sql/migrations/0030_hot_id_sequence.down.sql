-- Nothing to undo: the plain sequence is the form migration 0027 itself gives the hot
-- tables' ids (an identity column cannot come back on a partition on PostgreSQL 17 and
-- later), so a database taken back to 0032 keeps it.
SELECT 1;
