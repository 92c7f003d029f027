-- Queries of `ingest dev` (cli/dev.py). moto keeps SQS messages in memory only: after moto
-- (re)starts, jobs are published again through the outbox (the gateway's relay sends them; the
-- worker deduplicates by run, so a second copy is harmless).

-- name: republish_queued
-- Runs still waiting for a worker: their message was lost with moto.
UPDATE job_outbox o SET published_at = NULL, next_attempt_at = now()
FROM ingestion_runs r
WHERE r.run_id = o.run_id AND r.status = 'queued' AND o.published_at IS NOT NULL
RETURNING o.run_id;

-- name: running_with_published_job
SELECT r.run_id FROM ingestion_runs r JOIN job_outbox o ON o.run_id = r.run_id
WHERE r.status = 'running' AND o.published_at IS NOT NULL;

-- name: try_lock_run
-- Transaction-scoped: held only until this transaction ends, so a worker can claim the run
-- right after. Acquired = no session holds the run's lock = the run has no live owner.
SELECT pg_try_advisory_xact_lock(%(key)s) AS free;

-- name: republish_run
UPDATE job_outbox SET published_at = NULL, next_attempt_at = now()
WHERE run_id = %(run_id)s AND published_at IS NOT NULL;
