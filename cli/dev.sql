-- Queries of `ingest dev` (cli/dev.py). moto keeps SQS messages in memory only: after moto
-- (re)starts, jobs are published again through the outbox (the gateway's relay sends them; the
-- worker deduplicates by run, so a second copy is harmless).

-- name: republish_queued
-- Runs still waiting for a worker: their message was lost with moto.
UPDATE job_outbox o SET published_at = NULL, next_attempt_at = now()
FROM ingestion_runs r
WHERE r.run_id = o.run_id AND r.status = 'queued' AND o.published_at IS NOT NULL
RETURNING o.run_id;

-- name: republish_orphaned_running
-- Running runs whose lock no session holds (their worker is gone; migrations/0008): the
-- message went with moto or with the worker, so publish the job again for a takeover.
UPDATE job_outbox o SET published_at = NULL, next_attempt_at = now()
FROM ingestion_runs r
WHERE r.run_id = o.run_id AND r.status = 'running' AND o.published_at IS NOT NULL
  AND NOT run_has_live_owner(r.run_id)
RETURNING o.run_id;
