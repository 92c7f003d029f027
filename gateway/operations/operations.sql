-- Queries of the operations tools: reopening runs (retry, DLQ redrive), metrics and cleanup.
-- Queries on one tenant's data filter by tenant_id; the fleet-wide ones (metrics, cleanup) say
-- so, because an operator's view of the whole system is their point.

-- ── reopen: retry and redrive ───────────────────────────────────────────────────────────────
-- name: lock_document_of_run
-- The lock intake's upsert takes, taken first as intake does: a retry and an upload of the same
-- document serialise, so they cannot both start work on the same bytes.
SELECT d.doc_id FROM documents d
JOIN ingestion_runs r ON r.doc_id = d.doc_id AND r.tenant_id = d.tenant_id
WHERE r.tenant_id = %(tenant_id)s AND r.run_id = %(run_id)s
FOR UPDATE OF d;

-- name: lock_run
-- FOR UPDATE: a retry and a redrive of one run at the same moment reopen it once.
SELECT run_id, tenant_id, doc_id, batch_id, status, error, error_code, initiated_by, config,
       stats
FROM ingestion_runs
WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
FOR UPDATE;

-- name: allow_reopen
-- The transition trigger (migrations/0001) lets failed → queued through only for the run that
-- this transaction names; is_local = true makes it a SET LOCAL, gone at commit.
SELECT set_config('ingest.reopen_run', %(run_id)s, true);

-- name: reopen_run
-- Back to a fresh queued run; the failure it had is kept in run_actions.details.
UPDATE ingestion_runs
SET status = 'queued', queued_at = now(), updated_at = now(), error = NULL, error_code = NULL,
    stage = NULL,
    progress = 0, stats = '{}', started_at = NULL, finished_at = NULL
WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND status = 'failed';

-- name: allow_reopen_batch
-- The batch trigger (migrations/0009) lets failed → pending through only for the batch this
-- transaction names, like the run's reopen above.
SELECT set_config('ingest.reopen_batch', %(batch_id)s, true);

-- name: reopen_batch
-- A records run's batch reopens with it (docs/decisions/0128): back to pending, and started
-- over from row 1 — its staged rows, row errors and counts would otherwise be counted twice
-- (the within-file duplicates are recorded again at staging_complete). The failure it had is
-- kept in run_actions.details.
WITH cleared_rows AS (
    DELETE FROM import_staged_rows WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s
), cleared_errors AS (
    DELETE FROM import_row_errors WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s
)
UPDATE import_batches
SET status = 'pending', rejection_reason = NULL, completed_at = NULL, started_at = NULL,
    updated_at = now(), last_staged_row = 0, rows_total = 0, rows_valid = 0, rows_invalid = 0,
    rows_duplicate = 0, rows_inserted = 0, rows_updated = 0, rows_unchanged = 0,
    parse_duration_ms = NULL, db_duration_ms = NULL
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND status = 'failed';

-- name: queue_attempt
-- A retry or redrive is an attempt of its own, waiting from now (migrations/0011, ADR 0100):
-- the worker that picks the run up starts this row instead of adding one.
INSERT INTO run_attempts (run_id, attempt_no, tenant_id, kind, actor, queued_at)
SELECT %(run_id)s, COALESCE(max(attempt_no), 0) + 1, %(tenant_id)s, %(kind)s, %(actor)s, now()
FROM run_attempts WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s;

-- name: record_action
INSERT INTO run_actions (tenant_id, run_id, action, actor, actor_user_id, reason, details)
VALUES (%(tenant_id)s, %(run_id)s, %(action)s, %(actor)s, %(actor_user_id)s, %(reason)s,
        %(details)s)
RETURNING action_id, created_at;

-- name: content_state
-- Whether retrying would redo finished or running work: the same bytes already active, or
-- another run of them in flight.
SELECT EXISTS (SELECT 1 FROM document_versions v
               WHERE v.tenant_id = %(tenant_id)s AND v.doc_id = %(doc_id)s AND v.is_active
                 AND v.content_hash = %(content_hash)s) AS active_same,
       (SELECT o.run_id FROM ingestion_runs o
        WHERE o.tenant_id = %(tenant_id)s AND o.doc_id = %(doc_id)s
          AND o.status IN ('queued', 'running') AND o.run_id <> %(run_id)s
          AND o.config ->> 'content_hash' = %(content_hash)s
        LIMIT 1) AS inflight_run_id;

-- name: outbox_payload
SELECT payload FROM job_outbox WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s;

-- name: requeue_job
-- The run's job goes through the outbox again: published by the relay, never lost.
INSERT INTO job_outbox (run_id, tenant_id, payload)
VALUES (%(run_id)s, %(tenant_id)s, %(payload)s)
ON CONFLICT (run_id) DO UPDATE
SET payload = EXCLUDED.payload, published_at = NULL, attempts = 0, next_attempt_at = now(),
    last_error = NULL
WHERE job_outbox.tenant_id = EXCLUDED.tenant_id;

-- name: runs_of_messages
-- Dead letters name (tenant, run) pairs in their bodies; each pair is matched as a whole, so
-- a message can only ever show a run of the tenant it names.
SELECT r.run_id, r.tenant_id, r.status, r.error, r.stage, r.delivery_count, r.takeover_count,
       r.stats ->> 'last_retry_error' AS last_retry_error, r.finished_at, r.updated_at
FROM ingestion_runs r
JOIN unnest(%(run_ids)s::uuid[], %(tenant_ids)s::uuid[]) AS m(run_id, tenant_id)
  ON r.run_id = m.run_id AND r.tenant_id = m.tenant_id;

-- ── dead letters (docs/decisions/0060): the table the housekeeping mover fills ───────────────
-- Every query takes %(tenant_id)s: NULL is an operator's view of every tenant (and of the
-- messages that name none); a uuid is one tenant admin's view, which never includes those.

-- name: archive_dead_letter
-- Idempotent on the SQS message id: a message received again (its delete failed) updates
-- when it was last seen and never reopens a resolved row.
INSERT INTO dead_letters (message_id, tenant_id, run_id, body, body_bytes, body_truncated,
                          parse_error, dlq_reason, attributes, receive_count, sent_at)
VALUES (%(message_id)s, %(tenant_id)s, %(run_id)s, %(body)s, %(body_bytes)s,
        %(body_truncated)s, %(parse_error)s, %(dlq_reason)s, %(attributes)s,
        %(receive_count)s, %(sent_at)s)
ON CONFLICT (message_id) DO UPDATE
SET last_seen_at = now(),
    receive_count = GREATEST(dead_letters.receive_count, EXCLUDED.receive_count)
RETURNING (xmax = 0) AS inserted;

-- name: list_dead_letters
-- One page, oldest first, each with its run as the database has it. The run is matched on the
-- (tenant, run) pair the body names, so a message can only show a run of its own tenant.
SELECT d.message_id, d.tenant_id, d.run_id, d.parse_error, d.dlq_reason, d.receive_count,
       d.sent_at, d.first_seen_at, d.last_seen_at, d.status, d.resolved_at, d.resolved_by,
       d.resolution_reason, d.body_truncated,
       r.status AS run_status, r.error AS run_error, r.delivery_count,
       r.stats ->> 'last_retry_error' AS last_retry_error,
       count(*) OVER () AS total
FROM dead_letters d
LEFT JOIN ingestion_runs r ON r.run_id = d.run_id AND r.tenant_id = d.tenant_id
WHERE (%(tenant_id)s::uuid IS NULL OR d.tenant_id = %(tenant_id)s)
  AND (%(status)s::text IS NULL OR d.status = %(status)s)
ORDER BY d.sent_at, d.message_id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: show_dead_letter
SELECT d.*, r.status AS run_status, r.error AS run_error, r.delivery_count, r.stage,
       r.stats ->> 'last_retry_error' AS last_retry_error, r.finished_at AS run_finished_at
FROM dead_letters d
LEFT JOIN ingestion_runs r ON r.run_id = d.run_id AND r.tenant_id = d.tenant_id
WHERE d.message_id = %(message_id)s
  AND (%(tenant_id)s::uuid IS NULL OR d.tenant_id = %(tenant_id)s);

-- name: select_open_dead_letters
-- The open rows a redrive or purge acts on. FOR UPDATE SKIP LOCKED: two redrives at once
-- never act on one row twice; the second simply does not see it.
SELECT message_id, tenant_id, run_id, body, body_truncated, parse_error, sent_at,
       EXTRACT(EPOCH FROM now() - COALESCE(sent_at, first_seen_at)) AS age_s
FROM dead_letters
WHERE status = 'open'
  AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
  AND (%(all)s OR message_id = ANY(%(message_ids)s::text[])
       OR run_id = ANY(%(run_ids)s::uuid[]))
  AND (%(older_than_s)s::float8 IS NULL
       OR COALESCE(sent_at, first_seen_at) <= now() - make_interval(secs => %(older_than_s)s))
ORDER BY sent_at, message_id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: resolve_dead_letter
UPDATE dead_letters
SET status = %(status)s, resolved_at = now(), resolved_by = %(actor)s,
    resolved_by_user_id = %(actor_user_id)s, resolution_reason = %(reason)s
WHERE message_id = %(message_id)s AND status = 'open';

-- name: open_dead_letters
-- What dlq_depth adds to the messages still in SQS: archived and neither redriven nor purged.
SELECT count(*) AS open FROM dead_letters
WHERE status = 'open' AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s);

-- ── metrics: fleet-wide aggregates (tenant_id NULL, /metrics and /api/metrics, no tenant in any
-- label) or one tenant's (its admins' overview page) ────────────────────────────────────────
-- name: runs_by_status
SELECT status, count(*) AS runs FROM ingestion_runs WHERE (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s) GROUP BY status;

-- name: dashboard
-- import-runs-state-machine.md §6.1. Processing time is over the last 24 h, so the figure
-- moves with today's load rather than with the whole history.
SELECT count(*) FILTER (WHERE status IN ('queued', 'running')) AS backlog_count,
       count(*) FILTER (WHERE status = 'failed'
                          AND finished_at > now() - interval '24 hours') AS failed_24h,
       count(*) FILTER (WHERE status = 'running' AND updated_at
                                < now() - make_interval(secs => %(stale_s)s)) AS stale_runs,
       avg(EXTRACT(EPOCH FROM finished_at - started_at))
           FILTER (WHERE status = 'succeeded'
                     AND finished_at > now() - interval '24 hours') AS avg_processing_s
FROM ingestion_runs WHERE (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s);

-- name: last_failed
-- The file name is the tenant's own (/v1/metrics): a records batch's, or an upload's as given.
SELECT r.run_id, r.finished_at, COALESCE(b.file_name, r.config ->> 'original_filename') AS file_name
FROM ingestion_runs r
LEFT JOIN import_batches b ON b.batch_id = r.batch_id AND b.tenant_id = r.tenant_id
WHERE r.status = 'failed' AND r.finished_at IS NOT NULL AND (%(tenant_id)s::uuid IS NULL OR r.tenant_id = %(tenant_id)s)
ORDER BY r.finished_at DESC
LIMIT 1;

-- name: imports_dashboard
-- Records imports (migrations/0016): unfinished batches, batches failed in the last 24 h, and
-- stale ones (ops.v_stale_imports). Counts only.
SELECT count(*) FILTER (WHERE status IN ('pending', 'processing', 'staging_complete',
                                         'promoting')) AS backlog_count,
       count(*) FILTER (WHERE status = 'failed'
                          AND completed_at > now() - interval '24 hours') AS failed_24h,
       (SELECT count(*) FROM ops.v_stale_imports
        WHERE %(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s) AS stale_count
FROM import_batches WHERE (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s);

-- name: takeovers_total
SELECT COALESCE(sum(takeover_count), 0) AS takeovers FROM ingestion_runs
WHERE takeover_count > 0 AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s);

-- name: actions_by_kind
SELECT action, count(*) AS actions FROM run_actions WHERE (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s) GROUP BY action;

-- name: outbox_lag
SELECT count(*) AS pending, COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0) AS oldest_s
FROM job_outbox WHERE published_at IS NULL AND next_attempt_at < 'infinity' AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s);

-- name: backlog
SELECT count(*) AS backlog FROM ingestion_runs WHERE status IN ('queued', 'running');

-- name: imports_alert_figures
-- Across tenants (the housekeeping alerts): batches failed in the last hour, stale batches.
SELECT (SELECT count(*) FROM import_batches
        WHERE status = 'failed' AND completed_at > now() - interval '1 hour') AS failed_1h,
       (SELECT count(*) FROM ops.v_stale_imports) AS stale_count,
       s.batch_id AS oldest_stale_batch_id, s.hours_stale AS oldest_stale_hours
FROM (SELECT 1) one
LEFT JOIN LATERAL (SELECT batch_id, hours_stale FROM ops.v_stale_imports
                   ORDER BY hours_stale DESC LIMIT 1) s ON true;

-- name: expired_staged_rows
-- Staged rows of batches finished more than the retention ago (a retry restarts from row 1,
-- docs/decisions/0128, so nothing needs them); a partial batch's after the longer review
-- retention (docs/decisions/0151); a chunk at a time.
WITH doomed AS (
    SELECT s.batch_id, s.row_number FROM import_staged_rows s
    JOIN import_batches b ON b.batch_id = s.batch_id AND b.tenant_id = s.tenant_id
    WHERE b.status IN ('completed', 'partial', 'failed')
      AND b.completed_at < now() - make_interval(secs => CASE b.status
              WHEN 'partial' THEN %(partial_retention_s)s ELSE %(retention_s)s END)
    LIMIT %(limit)s
), gone AS (
    DELETE FROM import_staged_rows s USING doomed d
    WHERE NOT %(dry_run)s AND s.batch_id = d.batch_id AND s.row_number = d.row_number
    RETURNING 1
)
SELECT (SELECT count(*) FROM doomed) AS matched, (SELECT count(*) FROM gone) AS removed;

-- name: expired_row_errors
-- Row errors written more than the retention ago, of finished batches only.
WITH doomed AS (
    SELECT e.id FROM import_row_errors e
    JOIN import_batches b ON b.batch_id = e.batch_id AND b.tenant_id = e.tenant_id
    WHERE e.created_at < now() - make_interval(secs => %(retention_s)s)
      AND b.status IN ('completed', 'partial', 'failed')
    LIMIT %(limit)s
), gone AS (
    DELETE FROM import_row_errors e USING doomed d
    WHERE NOT %(dry_run)s AND e.id = d.id
    RETURNING e.batch_id
), recount AS (
    -- The totals taken at finish (migrations/0027) no longer hold: count live from now on.
    UPDATE import_batches b SET error_totals = NULL
    WHERE NOT %(dry_run)s AND b.batch_id IN (SELECT DISTINCT batch_id FROM gone)
)
SELECT (SELECT count(*) FROM doomed) AS matched, (SELECT count(*) FROM gone) AS removed;

-- ── cleanup (across tenants: an operator task over the whole store) ─────────────────────────
-- name: upload_owners
-- The runs that point at stored uploads; an upload no run points at is an orphan. An e-mail
-- attachment stored by a worker has no run until the gateway's relay makes it a document
-- (docs/decisions/0250): while its message version is served, it counts as a queued run.
SELECT config ->> 'upload_uri' AS uri, run_id, tenant_id, status, finished_at,
       finished_at < now() - make_interval(secs => %(failed_ttl_s)s) AS past_failed_ttl
FROM ingestion_runs
WHERE config ->> 'upload_uri' = ANY(%(uris)s)
UNION ALL
SELECT a.upload_uri, a.attachment_id, a.tenant_id, 'queued', NULL, false
FROM message_attachments a
JOIN document_versions v ON v.doc_version_id = a.doc_version_id AND v.tenant_id = a.tenant_id
WHERE a.child_doc_id IS NULL AND v.is_active AND a.upload_uri = ANY(%(uris)s);

-- name: expired_artifacts
-- Artifacts of versions deactivated longer ago than the retention and not yet removed. An
-- artifact's key holds its version's id (worker/pipeline/runner.py), so no other version, and
-- no active one, can need it.
SELECT v.doc_version_id, v.tenant_id, v.artifact_uri, v.deactivated_at
FROM document_versions v
WHERE NOT v.is_active AND v.artifact_uri IS NOT NULL
  AND v.deactivated_at < now() - make_interval(secs => %(retention_s)s)
  AND NOT EXISTS (SELECT 1 FROM storage_purges p WHERE p.uri = v.artifact_uri)
  -- Keyset paging: a dry run, or a file that cannot be removed, never returns twice.
  AND (v.deactivated_at, v.doc_version_id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
ORDER BY v.deactivated_at, v.doc_version_id
LIMIT %(limit)s;

-- name: record_purge
INSERT INTO storage_purges (uri, tenant_id, doc_version_id)
VALUES (%(uri)s, %(tenant_id)s, %(doc_version_id)s)
ON CONFLICT (uri) DO NOTHING;

-- name: try_cleanup_lock
-- Session-level on a dedicated connection: held for the whole pass, so one replica cleans.
SELECT pg_try_advisory_lock(%(key)s) AS locked;

-- name: cleanup_unlock
SELECT pg_advisory_unlock(%(key)s);

-- ── the CLI's redrive publishes at once (a gateway's relay would, later) ────────────────────
-- name: claim_unpublished_jobs
-- SKIP LOCKED: a gateway relay publishing the same rows right now keeps them.
SELECT run_id, payload FROM job_outbox
WHERE run_id = ANY(%(run_ids)s::uuid[]) AND published_at IS NULL
FOR UPDATE SKIP LOCKED;

-- name: mark_job_published
UPDATE job_outbox SET published_at = now(), attempts = attempts + 1, last_error = NULL
WHERE run_id = %(run_id)s;

-- name: expired_events
-- Completion and test events older than the retention whose every webhook delivery is final
-- (delivered or failed: nothing will send them again), with those deliveries, in one statement
-- so the deliveries' foreign key is checked once both are gone (docs/decisions/0161). An event
-- with a pending delivery stays, however old: its receiver is still being retried.
WITH doomed AS (
    SELECT o.event_id, o.tenant_id FROM event_outbox o
    WHERE o.created_at < now() - make_interval(secs => %(retention_s)s)
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                      WHERE d.tenant_id = o.tenant_id AND d.event_id = o.event_id
                        AND d.status = 'pending')
    LIMIT %(limit)s
), deliveries AS (
    DELETE FROM webhook_deliveries d USING doomed x
    WHERE NOT %(dry_run)s AND d.tenant_id = x.tenant_id AND d.event_id = x.event_id
), gone AS (
    DELETE FROM event_outbox o USING doomed x
    WHERE NOT %(dry_run)s AND o.event_id = x.event_id AND o.tenant_id = x.tenant_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM doomed) AS matched, (SELECT count(*) FROM gone) AS removed;
