-- Nothing to undo: statistics are not part of the schema.
SELECT 1;
