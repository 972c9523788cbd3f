-- The statements of enqueue_job, enqueue_on_commit and enqueue_many (django_pqjobs/enqueue/).
-- {held} is the predicate of the unique index of dedupe keys (sql/schema/uniqueness.sql,
-- sql.held_by_key()): statements that rely on the index repeat it word for word, which is
-- how PostgreSQL matches them to it. The end of the window a unique_for job is enqueued in
-- is pqjobs_enqueue()'s: to_timestamp((floor(epoch of now / period) + 1) * period).

-- name: enqueue_one
-- One job goes in through pqjobs_enqueue(pqjobs_job_spec) (sql/schema/enqueue.sql): PL/pgSQL
-- keeps the INSERT's plan for the life of the server session, which spares the server
-- planning it on every call without client-side prepared statements (those break behind
-- PgBouncer in transaction mode). The job goes as one JSON object of the spec's fields it
-- has (enqueue.insert.job_spec()), whatever options it uses: one statement, one argument.
SELECT pqjobs_enqueue(jsonb_populate_record(NULL::pqjobs_job_spec, %s::jsonb))

-- name: key_lock
-- Enqueuers of one concurrency key with max_waiting take turns, so the count of its waiting
-- jobs (waiting) stays true until the insert.
SELECT pg_advisory_xact_lock(hashtext('pqjobs.key'), hashtext(%s))

-- name: waiting
SELECT count(*), max(id) FROM pqjobs_job
WHERE shelf = 'hot' AND concurrency_key = %s AND status IN ('ready', 'blocked')

-- name: replace_lock
-- Replacing enqueuers take turns: without it, many of them at once keep cancelling each
-- other's new job and none gets through. A single replace locks its key (and its job type in
-- shared mode, so single replaces of different keys never wait for each other); a bulk
-- replace (replace_many_lock) locks its job type, because one lock per key could fill the
-- server's shared lock table (a few thousand locks) and make unrelated transactions fail.
SELECT pg_advisory_xact_lock_shared(hashtext(%s)), pg_advisory_xact_lock(hashtext(%s), hashtext(%s))

-- name: replace_many_lock
SELECT pg_advisory_xact_lock(hashtext(%s))

-- name: find_holders
-- The jobs holding some keys of a type in the window a job enqueued now would be in (all in
-- the hot partition: the history mover leaves a job that holds its key there).
SELECT dedupe_key, id, status FROM pqjobs_job
WHERE shelf = 'hot' AND job_type = %(type)s AND dedupe_key = ANY(%(keys)s)
  AND COALESCE(unique_until, 'infinity'::timestamptz)
      = COALESCE(to_timestamp((floor(extract(epoch FROM now())::double precision
                                     / %(period)s::double precision) + 1)
                              * %(period)s::double precision),
                 'infinity'::timestamptz)
  AND {held}

-- name: insert_many
-- The one bulk INSERT: every job of the call shares the type's columns, each row has its
-- payload, key, fair key, concurrency key and rate key (NULL where it has none). A fair
-- job due now takes its turn here, its key's start asked once per statement
-- (pqjobs_fair_start, sql/schema/fairness.sql) and its rows numbered from it in their
-- order, so the row trigger that gives turns one at a time passes over them.
-- A pause in force holds the jobs it pauses as they are inserted: blocked, 'paused', written
-- once. The INSERT's statement trigger notes the pauses (pqjobs.paused, sql/schema/flow.sql)
-- before the rows are computed, so the rows read the note for their type and queue once (h)
-- and go in held; the row trigger then has nothing to do (no call per row). Without a note,
-- the rows go in ready and the row trigger reads the pauses itself.
-- The rows go in in the order of their keys (byte order: the same in every database,
-- whatever its collation), those without one after them in the caller's order. An INSERT
-- that meets a key another open transaction has just inserted waits for that one to end,
-- holding the keys it has inserted so far: two statements that took the same keys in
-- different orders would each wait for the other (a deadlock). Taken in one order, the one
-- that gets a key first gets every key after it first too. The ids go back in the caller's
-- order (_insert_many maps them by key).
INSERT INTO pqjobs_job (job_type, queue, payload, status, priority, attempts, max_attempts,
                        run_after, timeout_seconds, dedupe_key, parent_id, schedule_id,
                        last_error, error_type, created_at, updated_at, trace_context,
                        batch_id, unique_until, unique_states, expires_at, payload_version,
                        fair_key, fair_turn, concurrency_key, concurrency_limit, rate_key,
                        rate_limit, rate_period, blocked_by)
SELECT %(type)s, %(queue)s, t.payload::jsonb,
       CASE WHEN h.hold IS NULL THEN 'ready' ELSE 'blocked' END,
       %(priority)s, 0, %(max_attempts)s, d.due, %(timeout)s, t.dedupe_key, NULL, NULL,
       '', '', now(), now(), %(trace)s::jsonb, %(batch)s::bigint,
       to_timestamp((floor(extract(epoch FROM now())::double precision
                           / %(unique_for)s::double precision) + 1)
                    * %(unique_for)s::double precision), %(unique_states)s,
       COALESCE(%(deadline)s::timestamptz,
                d.due + make_interval(secs => %(expires_in)s::double precision)),
       %(version)s::smallint, t.fair_key,
       CASE WHEN d.due <= now() THEN f.after + f.step * row_number() OVER (
           PARTITION BY t.fair_key ORDER BY t.n) END,
       t.concurrency_key, %(concurrency_limit)s, t.rate_key, %(rate_limit)s,
       %(rate_period)s, h.hold
FROM (SELECT CASE WHEN COALESCE(current_setting('pqjobs.paused', true), '') NOT IN ('', '{}')
                   AND current_setting('pqjobs.paused', true)::text[]
                       && ARRAY['q:' || %(queue)s::text, 't:' || %(type)s::text]
                  THEN 'paused' END) AS h(hold),
     (SELECT COALESCE(%(run_at)s, now()) + make_interval(secs => %(delay)s)) AS d(due),
     unnest(%(payloads)s::text[], %(keys)s::text[], %(fair)s::text[],
            %(concurrency_keys)s::text[], %(rate_keys)s::text[])
     WITH ORDINALITY AS t(payload, dedupe_key, fair_key, concurrency_key, rate_key, n)
LEFT JOIN pqjobs_fair_start(%(fair)s::text[], %(priority)s) AS f ON f.key = t.fair_key
ORDER BY t.dedupe_key COLLATE "C", t.n
ON CONFLICT (job_type, dedupe_key, (COALESCE(unique_until, 'infinity'::timestamptz)), shelf)
    WHERE {held} DO NOTHING
RETURNING id, dedupe_key
