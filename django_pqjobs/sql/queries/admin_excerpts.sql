-- The statements of admin/excerpts.py, each under its name (loaded once, at import).

-- name: page_data
-- all shelves: looked for on the hot shelf first, then on every shelf
SELECT left(t.payload, %(chars)s), length(t.payload),
       left(t.result, %(chars)s), length(t.result),
       right(j.last_error, %(tb_chars)s), length(j.last_error),
       j.progress IS NOT NULL,
       left(j.progress ->> 'done', %(number_chars)s),
       left(j.progress ->> 'total', %(number_chars)s),
       left(j.progress ->> 'message', %(message_chars)s),
       EXISTS (SELECT 1 FROM pqjobs_step s WHERE s.job_id = j.id)
FROM pqjobs_job j,
     LATERAL (SELECT j.payload::text AS payload, j.result::text AS result OFFSET 0) t
WHERE {shelf} j.id = %(id)s LIMIT 1

-- name: page_progress
-- all shelves: looked for on the hot shelf first, then on every shelf
SELECT j.progress IS NOT NULL,
       left(j.progress ->> 'done', %(number_chars)s),
       left(j.progress ->> 'total', %(number_chars)s),
       EXISTS (SELECT 1 FROM pqjobs_step s WHERE s.job_id = j.id)
FROM pqjobs_job j WHERE {shelf} j.id = %(id)s LIMIT 1
