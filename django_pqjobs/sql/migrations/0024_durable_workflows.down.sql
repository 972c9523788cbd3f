-- Back to migration 0023: no pqjobs_record_step() (the tables go with the Django migration).

DROP FUNCTION :"schema".pqjobs_record_step(
    bigint, text, integer, text, text, jsonb, boolean, double precision, boolean
);
