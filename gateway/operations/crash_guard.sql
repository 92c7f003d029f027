-- Queries of the crash guard (gateway/operations/crash_guard.py). It never races a takeover: a run that a
-- worker could still take over gets its job re-published first, a bounded number of times, and
-- is failed only when that did not help (docs/decisions/0076-crash-guard-republishes.md).
-- Abandoned = running without a live owner (run_has_live_owner, migrations/0008), or with an
-- owner whose heartbeat is older than the stale window (wedged), and silent for a whole
-- republish window since its last heartbeat or republish. Queued runs count from their TTL.

-- name: republish_abandoned
-- The job goes back through the outbox (the relay publishes it), so a message that was lost
-- or dead-lettered while the run could still finish is replaced. SKIP LOCKED: a run being
-- claimed right now is left for the next pass.
WITH due AS (
    SELECT r.run_id
    FROM ingestion_runs r
    WHERE r.republish_count < %(max_republishes)s
      AND EXISTS (SELECT 1 FROM job_outbox o WHERE o.run_id = r.run_id)
      AND COALESCE(r.republished_at, '-infinity') < now() - make_interval(secs => %(republish_after_s)s)
      AND ((r.status = 'running'
            AND r.updated_at < now() - make_interval(secs => %(republish_after_s)s)
            AND (r.updated_at < now() - make_interval(secs => %(running_stale_s)s)
                 OR NOT run_has_live_owner(r.run_id)))
        OR (r.status = 'queued'
            AND COALESCE(r.queued_at, r.created_at) < now() - make_interval(secs => %(queued_ttl_s)s)))
    FOR UPDATE OF r SKIP LOCKED
), counted AS (
    UPDATE ingestion_runs r SET republish_count = republish_count + 1, republished_at = now()
    FROM due WHERE r.run_id = due.run_id
    RETURNING r.run_id, r.tenant_id, r.status, r.republish_count
), requeued AS (
    UPDATE job_outbox o SET published_at = NULL, next_attempt_at = now(), last_error = NULL
    FROM counted WHERE o.run_id = counted.run_id
)
SELECT run_id, tenant_id, status, republish_count FROM counted;

-- name: fail_abandoned_running
-- Republishing did not help (or there is no job to republish): fail with a reason.
UPDATE ingestion_runs
SET status = 'failed', finished_at = now(), updated_at = now(), error_code = 'run_abandoned',
    error = 'Interrupted: no worker could finish the run (it stopped responding and re-publishing '
            || 'its job ' || republish_count || ' times did not help); retry the run.'
WHERE status = 'running'
  AND (republish_count >= %(max_republishes)s
       OR NOT EXISTS (SELECT 1 FROM job_outbox o WHERE o.run_id = ingestion_runs.run_id))
  AND updated_at < now() - make_interval(secs => %(republish_after_s)s)
  AND COALESCE(republished_at, '-infinity') < now() - make_interval(secs => %(republish_after_s)s)
  AND (updated_at < now() - make_interval(secs => %(running_stale_s)s)
       OR NOT run_has_live_owner(run_id))
RETURNING run_id, tenant_id, batch_id;

-- name: fail_abandoned_queued
-- Also parks the run's unpublished job, so a queue that comes back does not revive it.
WITH failed AS (
    UPDATE ingestion_runs
    SET status = 'failed', finished_at = now(), updated_at = now(), error_code = 'never_picked_up',
        error = 'Interrupted: the job was never picked up by a worker; check that workers are running, then retry the run.'
    -- queued_at: a run reopened by an operator gets a fresh TTL (migrations/0003).
    WHERE status = 'queued'
      AND COALESCE(queued_at, created_at) < now() - make_interval(secs => %(queued_ttl_s)s)
      AND (republish_count >= %(max_republishes)s
           OR NOT EXISTS (SELECT 1 FROM job_outbox o WHERE o.run_id = ingestion_runs.run_id))
      AND COALESCE(republished_at, '-infinity') < now() - make_interval(secs => %(republish_after_s)s)
    RETURNING run_id, tenant_id, batch_id
), parked AS (
    UPDATE job_outbox SET next_attempt_at = 'infinity', last_error = 'run failed before it was published'
    WHERE run_id IN (SELECT run_id FROM failed) AND published_at IS NULL
)
SELECT run_id, tenant_id, batch_id FROM failed;

-- name: fail_batches_of_runs
-- A records run failed above takes its batch with it, in the same transaction (docs/decisions/
-- 0128): the run's reason is the batch's one-sentence rejection reason. A batch already final
-- (the worker finished it and died before the run) is left as it is.
UPDATE import_batches b
SET status = 'failed', rejection_reason = r.error, completed_at = now(), updated_at = now()
FROM ingestion_runs r
WHERE r.run_id = ANY(%(run_ids)s) AND r.batch_id = b.batch_id AND r.tenant_id = b.tenant_id
  AND b.status IN ('pending', 'processing', 'staging_complete', 'promoting')
RETURNING b.batch_id, b.tenant_id, b.file_name;
