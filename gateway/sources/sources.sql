-- Queries of admin S3 sources: the sources, their syncs, the per-key state and deactivation.
-- The gateway owns these tables (gateway-worker-ingestion.md §2.5). Every query names the tenant.

-- ── sources ─────────────────────────────────────────────────────────────────────────────────
-- name: insert_source
INSERT INTO ingestion_sources (tenant_id, name, bucket, prefix, endpoint_url, region,
                               include_patterns, exclude_patterns, enabled, sync_every_minutes,
                               created_by)
VALUES (%(tenant_id)s, %(name)s, %(bucket)s, %(prefix)s, %(endpoint_url)s, %(region)s,
        %(include_patterns)s, %(exclude_patterns)s, %(enabled)s, %(sync_every_minutes)s,
        %(created_by)s)
RETURNING source_id;

-- name: get_source
-- A live (not deleted) source with a summary of its latest sync.
SELECT s.source_id, s.tenant_id, s.name, s.bucket, s.prefix, s.endpoint_url, s.region,
       s.include_patterns, s.exclude_patterns, s.enabled, s.sync_every_minutes, s.created_by,
       s.created_at,
       s.updated_at, l.sync_id AS last_sync_id, l.status AS last_sync_status,
       l.started_at AS last_sync_started_at, l.finished_at AS last_sync_finished_at
FROM ingestion_sources s
LEFT JOIN LATERAL (
    SELECT sync_id, status, started_at, finished_at FROM source_syncs y
    WHERE y.tenant_id = s.tenant_id AND y.source_id = s.source_id
    ORDER BY started_at DESC LIMIT 1
) l ON true
WHERE s.tenant_id = %(tenant_id)s AND s.source_id = %(source_id)s AND s.deleted_at IS NULL;

-- name: find_source_any
-- Live or deleted: a repeated DELETE re-applies the deactivation.
SELECT source_id, deleted_at FROM ingestion_sources
WHERE tenant_id = %(tenant_id)s AND source_id = %(source_id)s;

-- name: list_sources
SELECT s.source_id, s.tenant_id, s.name, s.bucket, s.prefix, s.endpoint_url, s.region,
       s.include_patterns, s.exclude_patterns, s.enabled, s.sync_every_minutes, s.created_by,
       s.created_at,
       s.updated_at, l.sync_id AS last_sync_id, l.status AS last_sync_status,
       l.started_at AS last_sync_started_at, l.finished_at AS last_sync_finished_at,
       count(*) OVER () AS total
FROM ingestion_sources s
LEFT JOIN LATERAL (
    SELECT sync_id, status, started_at, finished_at FROM source_syncs y
    WHERE y.tenant_id = s.tenant_id AND y.source_id = s.source_id
    ORDER BY started_at DESC LIMIT 1
) l ON true
WHERE s.tenant_id = %(tenant_id)s AND s.deleted_at IS NULL
ORDER BY s.created_at DESC, s.source_id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: lock_source
-- Row lock for a read-merge-write PATCH, so two concurrent PATCHes do not lose fields.
SELECT source_id, name, bucket, prefix, endpoint_url, region, include_patterns,
       exclude_patterns, enabled, sync_every_minutes
FROM ingestion_sources
WHERE tenant_id = %(tenant_id)s AND source_id = %(source_id)s AND deleted_at IS NULL
FOR UPDATE;

-- name: update_source
UPDATE ingestion_sources
SET name = %(name)s, prefix = %(prefix)s, endpoint_url = %(endpoint_url)s, region = %(region)s,
    include_patterns = %(include_patterns)s, exclude_patterns = %(exclude_patterns)s,
    enabled = %(enabled)s, sync_every_minutes = %(sync_every_minutes)s, updated_at = now()
WHERE tenant_id = %(tenant_id)s AND source_id = %(source_id)s AND deleted_at IS NULL;

-- name: soft_delete_source
-- No rows are deleted (§14): the source is marked and disappears from the API.
UPDATE ingestion_sources SET deleted_at = now(), enabled = false, updated_at = now()
WHERE tenant_id = %(tenant_id)s AND source_id = %(source_id)s AND deleted_at IS NULL
RETURNING source_id;

-- name: source_served_objects
-- What a deleted source still serves: its objects with an active document, except documents
-- another live source of the tenant also holds (the same bucket and key, listed twice).
SELECT so.key, so.doc_id FROM source_objects so
WHERE so.tenant_id = %(tenant_id)s AND so.source_id = %(source_id)s AND so.doc_id IS NOT NULL
  AND (so.status = 'active' OR EXISTS (
        SELECT 1 FROM document_versions v
        WHERE v.tenant_id = so.tenant_id AND v.doc_id = so.doc_id AND v.is_active))
  AND NOT EXISTS (
        SELECT 1 FROM source_objects o2
        JOIN ingestion_sources s2 ON s2.source_id = o2.source_id AND s2.deleted_at IS NULL
        WHERE o2.tenant_id = so.tenant_id AND o2.doc_id = so.doc_id
          AND o2.source_id <> so.source_id AND o2.status = 'active');

-- name: count_running_source_runs
SELECT count(*) AS n FROM ingestion_runs
WHERE tenant_id = %(tenant_id)s AND source_id = %(source_id)s AND status = 'running';

-- name: due_sources
-- Scheduled sources whose last sync started at least their interval ago (or never synced),
-- across tenants, longest overdue first (docs/decisions/0118). The housekeeping loop triggers
-- each through the per-source lock; is_due checks again under it.
SELECT s.tenant_id, s.source_id FROM ingestion_sources s
LEFT JOIN LATERAL (
    SELECT started_at FROM source_syncs y
    WHERE y.tenant_id = s.tenant_id AND y.source_id = s.source_id
    ORDER BY started_at DESC LIMIT 1
) l ON true
WHERE s.sync_every_minutes IS NOT NULL AND s.enabled AND s.deleted_at IS NULL
  AND (l.started_at IS NULL
       OR l.started_at <= now() - make_interval(mins => s.sync_every_minutes))
ORDER BY l.started_at NULLS FIRST
LIMIT %(limit)s;

-- name: is_due
-- Under the source's lock: another replica may have just run the scheduled sync.
SELECT 1 AS due FROM ingestion_sources s
WHERE s.tenant_id = %(tenant_id)s AND s.source_id = %(source_id)s
  AND s.sync_every_minutes IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM source_syncs y
        WHERE y.tenant_id = s.tenant_id AND y.source_id = s.source_id
          AND y.started_at > now() - make_interval(mins => s.sync_every_minutes));

-- ── the per-source sync lock ────────────────────────────────────────────────────────────────
-- name: try_lock_source
-- Session-level, on a connection held for the whole sync: whichever gateway replica holds it
-- runs the source's sync; the lock dies with that connection if the gateway dies.
SELECT pg_try_advisory_lock(%(key)s) AS locked;

-- name: unlock_source
SELECT pg_advisory_unlock(%(key)s) AS unlocked;

-- name: try_lock_source_xact
-- The same key for a moment (DELETE of a source): conflicts with a running sync's session lock.
SELECT pg_try_advisory_xact_lock(%(key)s) AS locked;

-- ── syncs ───────────────────────────────────────────────────────────────────────────────────
-- name: running_sync
SELECT sync_id FROM source_syncs
WHERE tenant_id = %(tenant_id)s AND source_id = %(source_id)s AND status = 'running'
ORDER BY started_at DESC LIMIT 1;

-- name: fail_orphaned_sync
-- Called only while holding the source's lock: a running row then belongs to a dead gateway.
UPDATE source_syncs
SET status = 'failed', finished_at = now(),
    error = 'Interrupted: the gateway running this sync stopped; a new sync took over.'
WHERE tenant_id = %(tenant_id)s AND source_id = %(source_id)s AND status = 'running'
RETURNING sync_id;

-- name: insert_sync
INSERT INTO source_syncs (tenant_id, source_id, status, initiated_by, runner)
VALUES (%(tenant_id)s, %(source_id)s, 'running', %(initiated_by)s, %(runner)s)
RETURNING sync_id, started_at;

-- name: heartbeat_sync
-- Also publishes the counters so far; no row back means the crash guard failed the sync.
UPDATE source_syncs
SET heartbeat_at = now(), listed_count = %(listed)s, excluded_count = %(excluded)s,
    new_count = %(new)s, changed_count = %(changed)s, unchanged_count = %(unchanged)s,
    deleted_count = %(deleted)s, skipped_count = %(skipped)s, failed_count = %(failed)s,
    still_failed_count = %(still_failed)s,
    bytes_downloaded = %(bytes)s, reasons = %(reasons)s, issues = %(issues)s,
    timings = %(timings)s
WHERE tenant_id = %(tenant_id)s AND sync_id = %(sync_id)s AND status = 'running'
RETURNING sync_id;

-- name: finish_sync
UPDATE source_syncs
SET status = %(status)s, finished_at = now(), heartbeat_at = now(), error = %(error)s,
    listing_complete = %(listing_complete)s, listed_count = %(listed)s,
    excluded_count = %(excluded)s, new_count = %(new)s, changed_count = %(changed)s,
    unchanged_count = %(unchanged)s, deleted_count = %(deleted)s, skipped_count = %(skipped)s,
    failed_count = %(failed)s, still_failed_count = %(still_failed)s,
    bytes_downloaded = %(bytes)s, reasons = %(reasons)s, issues = %(issues)s, timings = %(timings)s
WHERE tenant_id = %(tenant_id)s AND sync_id = %(sync_id)s AND status = 'running'
RETURNING sync_id;

-- name: get_sync
SELECT y.sync_id, y.source_id, y.status, y.initiated_by, y.runner, y.listed_count,
       y.excluded_count, y.new_count, y.changed_count, y.unchanged_count, y.deleted_count,
       y.skipped_count, y.failed_count, y.still_failed_count, y.bytes_downloaded,
       y.listing_complete, y.reasons, y.issues, y.timings, y.error, y.started_at,
       y.heartbeat_at, y.finished_at, i.*
FROM source_syncs y
LEFT JOIN LATERAL (
    -- How this sync's files ingested: the runs it queued. Only a sync makes s3_sync runs of
    -- its source and one runs at a time (the source's lock), so they are the source's runs
    -- created while it ran (docs/decisions/0117).
    SELECT count(*) FILTER (WHERE r.status = 'queued') AS runs_queued,
           count(*) FILTER (WHERE r.status = 'running') AS runs_running,
           count(*) FILTER (WHERE r.status = 'succeeded') AS runs_succeeded,
           count(*) FILTER (WHERE r.status = 'failed') AS runs_failed
    FROM ingestion_runs r
    WHERE r.tenant_id = y.tenant_id AND r.source_id = y.source_id AND r.run_type = 's3_sync'
      AND r.created_at >= y.started_at AND (y.finished_at IS NULL OR r.created_at <= y.finished_at)
) i ON true
WHERE y.tenant_id = %(tenant_id)s AND y.source_id = %(source_id)s AND y.sync_id = %(sync_id)s;

-- name: sync_runs
-- The runs of one sync that did not succeed (failed first, then in flight), to link them.
SELECT r.run_id, r.status, r.error, r.config ->> 'title' AS title, d.source_uri
FROM source_syncs y
JOIN ingestion_runs r ON r.tenant_id = y.tenant_id AND r.source_id = y.source_id
 AND r.run_type = 's3_sync' AND r.created_at >= y.started_at
 AND (y.finished_at IS NULL OR r.created_at <= y.finished_at)
LEFT JOIN documents d ON d.doc_id = r.doc_id AND d.tenant_id = r.tenant_id
WHERE y.tenant_id = %(tenant_id)s AND y.sync_id = %(sync_id)s AND r.status <> 'succeeded'
ORDER BY (r.status = 'failed') DESC, r.created_at
LIMIT %(limit)s;

-- name: list_syncs
SELECT y.sync_id, y.source_id, y.status, y.initiated_by, y.runner, y.listed_count,
       y.excluded_count, y.new_count, y.changed_count, y.unchanged_count, y.deleted_count,
       y.skipped_count, y.failed_count, y.still_failed_count, y.bytes_downloaded,
       y.listing_complete, y.reasons, y.issues, y.timings, y.error, y.started_at,
       y.heartbeat_at, y.finished_at, i.*, count(*) OVER () AS total
FROM source_syncs y
LEFT JOIN LATERAL (
    -- How this sync's files ingested: the runs it queued. Only a sync makes s3_sync runs of
    -- its source and one runs at a time (the source's lock), so they are the source's runs
    -- created while it ran (docs/decisions/0117).
    SELECT count(*) FILTER (WHERE r.status = 'queued') AS runs_queued,
           count(*) FILTER (WHERE r.status = 'running') AS runs_running,
           count(*) FILTER (WHERE r.status = 'succeeded') AS runs_succeeded,
           count(*) FILTER (WHERE r.status = 'failed') AS runs_failed
    FROM ingestion_runs r
    WHERE r.tenant_id = y.tenant_id AND r.source_id = y.source_id AND r.run_type = 's3_sync'
      AND r.created_at >= y.started_at AND (y.finished_at IS NULL OR r.created_at <= y.finished_at)
) i ON true
WHERE y.tenant_id = %(tenant_id)s AND y.source_id = %(source_id)s
ORDER BY y.started_at DESC, y.sync_id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: fail_stale_syncs
-- Crash guard: a running sync whose gateway stopped writing its heartbeat.
UPDATE source_syncs
SET status = 'failed', finished_at = now(),
    error = 'Interrupted: the gateway running this sync stopped responding (no heartbeat); sync again: objects already queued are not queued twice.'
WHERE status = 'running' AND heartbeat_at < now() - make_interval(secs => %(stale_s)s)
RETURNING sync_id, tenant_id, source_id;

-- ── per-key state during a sync ─────────────────────────────────────────────────────────────
-- name: touch_known_objects
-- One round trip per listing page: stamp the keys as seen by this sync and return what is
-- known of them. "settled" = the recorded bytes became a version (active, or deactivated by an
-- admin, which a sync must not undo) or are on their way (a queued or running run); otherwise
-- their run failed (failed_run_id), or never was made.
UPDATE source_objects so SET last_sync_id = %(sync_id)s, last_seen_at = now()
WHERE so.tenant_id = %(tenant_id)s AND so.source_id = %(source_id)s AND so.key = ANY(%(keys)s)
RETURNING so.key, so.etag, so.size_bytes, so.last_modified, so.status, so.doc_id, so.content_hash,
    (EXISTS (SELECT 1 FROM document_versions v
             WHERE v.tenant_id = so.tenant_id AND v.doc_id = so.doc_id
               AND v.content_hash = so.content_hash)
     OR EXISTS (SELECT 1 FROM ingestion_runs r
                WHERE r.tenant_id = so.tenant_id AND r.doc_id = so.doc_id
                  AND r.status IN ('queued', 'running')
                  AND r.config ->> 'content_hash' = so.content_hash)) AS settled,
    -- The newest failed run of the recorded bytes: unchanged and not settled, the object is
    -- listed as failed, not fetched again, until it changes or that run is retried (0117).
    (SELECT r.run_id FROM ingestion_runs r
     WHERE r.tenant_id = so.tenant_id AND r.doc_id = so.doc_id AND r.status = 'failed'
       AND r.config ->> 'content_hash' = so.content_hash
     ORDER BY r.created_at DESC LIMIT 1) AS failed_run_id;

-- name: upsert_object
INSERT INTO source_objects (source_id, tenant_id, key, etag, size_bytes, last_modified,
                            content_hash, doc_id, status, last_seen_at, last_sync_id, deleted_at)
VALUES (%(source_id)s, %(tenant_id)s, %(key)s, %(etag)s, %(size_bytes)s, %(last_modified)s,
        %(content_hash)s, %(doc_id)s, 'active', now(), %(sync_id)s, NULL)
ON CONFLICT (source_id, key) DO UPDATE
SET etag = EXCLUDED.etag, size_bytes = EXCLUDED.size_bytes,
    last_modified = EXCLUDED.last_modified, content_hash = EXCLUDED.content_hash,
    doc_id = EXCLUDED.doc_id, status = 'active', last_seen_at = now(),
    last_sync_id = EXCLUDED.last_sync_id, deleted_at = NULL
WHERE source_objects.tenant_id = EXCLUDED.tenant_id;

-- name: missing_objects
-- After a complete listing: keys of the source this sync did not see. Also keys already marked
-- deleted whose document is active again (a run that was running at deletion time finished).
SELECT so.key, so.doc_id FROM source_objects so
WHERE so.tenant_id = %(tenant_id)s AND so.source_id = %(source_id)s
  AND so.last_sync_id IS DISTINCT FROM %(sync_id)s
  AND (so.status = 'active' OR EXISTS (
        SELECT 1 FROM document_versions v
        WHERE v.tenant_id = so.tenant_id AND v.doc_id = so.doc_id AND v.is_active));

-- ── deactivation (gateway-worker-ingestion.md §14) ──────────────────────────────────────────
-- name: lock_documents
-- The worker's per-document lock (worker/runs.lock_key: the first 8 bytes of the doc id as a
-- signed bigint), so a deactivation never interleaves with a version activation. Taken in key
-- order; a worker holds at most one, so no cycle can form.
SELECT pg_advisory_xact_lock(k)
FROM (SELECT DISTINCT ('x' || left(replace(d::text, '-', ''), 16))::bit(64)::bigint AS k
      FROM unnest(%(doc_ids)s::uuid[]) AS d) keys
ORDER BY k;

-- name: deactivate_documents
UPDATE document_versions SET is_active = false, deactivated_at = now()
WHERE tenant_id = %(tenant_id)s AND doc_id = ANY(%(doc_ids)s) AND is_active
RETURNING doc_id;

-- name: cancel_queued_runs
-- A queued run of a gone object would bring it back when a worker processes it: fail it and
-- park its unpublished job, as the crash guard does. A sync also fails the running ones
-- (%(statuses)s): the worker's final write is fenced on `running` and rolls back, so a deleted
-- object cannot come back after the sync that saw it gone (ADR 0241). A source's DELETE leaves
-- running runs to the worker (ADR 0020) and is repeated to deactivate what they activate.
WITH cancelled AS (
    UPDATE ingestion_runs
    SET status = 'failed', finished_at = now(), updated_at = now(), error = %(error)s,
        error_code = 'source_object_deleted'
    WHERE tenant_id = %(tenant_id)s AND doc_id = ANY(%(doc_ids)s)
      AND status = ANY(%(statuses)s) AND run_type = 's3_sync'
    RETURNING run_id
), parked AS (
    UPDATE job_outbox SET next_attempt_at = 'infinity', last_error = 'run cancelled before it was published'
    WHERE tenant_id = %(tenant_id)s AND run_id IN (SELECT run_id FROM cancelled)
      AND published_at IS NULL
)
SELECT count(*) AS n FROM cancelled;

-- name: mark_objects_deleted
UPDATE source_objects SET status = 'deleted', deleted_at = COALESCE(deleted_at, now())
WHERE tenant_id = %(tenant_id)s AND source_id = %(source_id)s AND key = ANY(%(keys)s);

-- ── grants (docs/decisions/0065): which buckets an operator granted a tenant ─────────────────
-- name: live_grant_prefixes
SELECT prefix FROM source_grants
WHERE tenant_id = %(tenant_id)s AND bucket = %(bucket)s AND revoked_at IS NULL;

-- name: source_creator_is_operator
-- Operator authority is the creator's, read now: a demoted creator's sources need a grant.
SELECT u.role = 'operator' AS by_operator
FROM ingestion_sources s JOIN users u ON u.user_id = s.created_by AND u.tenant_id = s.tenant_id
WHERE s.tenant_id = %(tenant_id)s AND s.source_id = %(source_id)s;

-- name: insert_grant
-- Nothing back when the same live grant exists (the partial unique index).
INSERT INTO source_grants (tenant_id, bucket, prefix, granted_by)
VALUES (%(tenant_id)s, %(bucket)s, %(prefix)s, %(granted_by)s)
ON CONFLICT (tenant_id, bucket, prefix) WHERE revoked_at IS NULL DO NOTHING
RETURNING grant_id, tenant_id, bucket, prefix, granted_by, granted_at;

-- name: live_grant
SELECT grant_id, tenant_id, bucket, prefix, granted_by, granted_at FROM source_grants
WHERE tenant_id = %(tenant_id)s AND bucket = %(bucket)s AND prefix = %(prefix)s
  AND revoked_at IS NULL;

-- name: revoke_grants
-- One folder, or (prefix NULL) every live grant of the bucket. The rows stay, as the record.
UPDATE source_grants SET revoked_at = now(), revoked_by = %(revoked_by)s
WHERE tenant_id = %(tenant_id)s AND bucket = %(bucket)s AND revoked_at IS NULL
  AND (%(prefix)s::text IS NULL OR prefix = %(prefix)s::text)
RETURNING grant_id, bucket, prefix, revoked_at;

-- name: list_grants
-- Operators' view, across tenants unless one is named.
SELECT g.grant_id, g.tenant_id, t.name AS tenant, g.bucket, g.prefix, g.granted_by,
       g.granted_at, g.revoked_by, g.revoked_at
FROM source_grants g JOIN tenants t USING (tenant_id)
WHERE (%(tenant_id)s::uuid IS NULL OR g.tenant_id = %(tenant_id)s::uuid)
  AND (%(include_revoked)s OR g.revoked_at IS NULL)
ORDER BY t.name, g.bucket, g.prefix, g.granted_at;

-- name: count_live_sources_of_bucket
SELECT count(*) AS n FROM ingestion_sources
WHERE tenant_id = %(tenant_id)s AND bucket = %(bucket)s AND deleted_at IS NULL;

-- name: tenant_named
SELECT tenant_id FROM tenants WHERE name = %(name)s;
