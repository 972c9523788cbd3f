-- The statements of worker/listener.py, each under its name (loaded once, at import).
-- {channel} is the channel enqueues notify on (notify.CHANNEL), filled in by the module.

-- name: listen
LISTEN {channel}

-- name: unlisten
UNLISTEN {channel}

-- name: say_listening
-- Whether this worker listens: enqueues notify only while some worker does (notify.py).
UPDATE pqjobs_worker SET listening = %s WHERE worker_id = %s
