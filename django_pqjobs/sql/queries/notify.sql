-- The statements of notify.py, each under its name (loaded once, at import). {anyone_listens}
-- stands for notify.ANYONE_LISTENS: no NOTIFY is sent while no worker listens.

-- name: notify_queues
SELECT pg_notify(%s, q) FROM unnest(%s::text[]) q WHERE {anyone_listens}

-- name: notify_jobs
SELECT pg_notify(%s, queue) FROM (SELECT DISTINCT queue FROM pqjobs_job
WHERE shelf = 'hot' AND id = ANY(%s)) q WHERE {anyone_listens}
