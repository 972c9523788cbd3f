-- The statements of transitions/claim.py, each under its name (loaded once, at import).

-- name: claim
-- The claim is the PL/pgSQL function pqjobs_claim() (sql/schema/claim.sql): its plans are made
-- once per server session instead of on every claim, and with no flow control in play it
-- claims the jobs it locked where they lie (by TID). Asked for no job but a scan, it only
-- moves the held jobs among the next due ones to blocked (transitions.hold_back).
SELECT * FROM pqjobs_claim(%s, %s::integer, %s::text[], %s::integer, %s::integer)
