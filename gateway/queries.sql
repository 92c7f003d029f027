-- Queries of the gateway, which owns tenants, users, sources, documents, runs and the outbox.
-- Every query on tenant data filters by tenant_id.

-- ── intake ──────────────────────────────────────────────────────────────────────────────────
-- name: upsert_document
-- Get-or-create by identity. DO UPDATE (not DO NOTHING) so RETURNING always yields the row and
-- takes its lock: a concurrent upload of the same bytes waits here until this one commits.
INSERT INTO documents (tenant_id, source_type, source_uri, title, source_id)
VALUES (%(tenant_id)s, %(source_type)s, %(source_uri)s, %(title)s, %(source_id)s)
ON CONFLICT (tenant_id, source_uri) DO UPDATE SET title = EXCLUDED.title
RETURNING doc_id, (xmax = 0) AS is_new;

-- name: lock_document_for_upload
-- An upload that names its document (a new version): only a document of the caller's tenant.
SELECT doc_id, title, source_uri FROM documents
WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s
FOR UPDATE;

-- name: set_upload_identity
-- A document versioned by id is no longer found by its first bytes (docs/decisions/0045).
UPDATE documents SET source_uri = %(source_uri)s, source_type = %(source_type)s, title = %(title)s
WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s;

-- name: active_version_hash
SELECT content_hash FROM document_versions
WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s AND is_active;

-- name: inflight_run_for_hash
-- A queued or running run of the same document and bytes: a second one would redo its work.
SELECT run_id FROM ingestion_runs
WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s AND status IN ('queued', 'running')
  AND config ->> 'content_hash' = %(content_hash)s
ORDER BY created_at
LIMIT 1;

-- name: insert_run
INSERT INTO ingestion_runs (run_id, tenant_id, doc_id, status, run_type, source_id, initiated_by, config)
VALUES (%(run_id)s, %(tenant_id)s, %(doc_id)s, 'queued', %(run_type)s, %(source_id)s,
        %(initiated_by)s, %(config)s);

-- name: insert_outbox
INSERT INTO job_outbox (run_id, tenant_id, payload) VALUES (%(run_id)s, %(tenant_id)s, %(payload)s);

-- ── outbox relay ────────────────────────────────────────────────────────────────────────────
-- name: claim_due_jobs
-- SKIP LOCKED: every gateway replica runs a relay; each row is published by whichever claims it.
SELECT run_id, payload, attempts FROM job_outbox
WHERE published_at IS NULL AND next_attempt_at <= now()
ORDER BY created_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: mark_published
UPDATE job_outbox SET published_at = now(), attempts = attempts + 1, last_error = NULL
WHERE run_id = ANY(%(run_ids)s);

-- name: mark_publish_retry
UPDATE job_outbox
SET attempts = attempts + 1, last_error = %(error)s,
    next_attempt_at = now() + make_interval(secs => %(delay_s)s)
WHERE run_id = ANY(%(run_ids)s);

-- name: mark_publish_rejected
-- The queue refused the message itself: retrying cannot help, so the run fails visibly.
WITH parked AS (
    UPDATE job_outbox SET attempts = attempts + 1, last_error = %(error)s, next_attempt_at = 'infinity'
    WHERE run_id = %(run_id)s
    RETURNING run_id
)
UPDATE ingestion_runs r
SET status = 'failed', error = %(error)s, error_code = 'queue_rejected', finished_at = now(),
    updated_at = now()
FROM parked WHERE r.run_id = parked.run_id AND r.status = 'queued';

-- name: outbox_lag
SELECT count(*) AS pending, EXTRACT(EPOCH FROM now() - min(created_at)) AS oldest_s
FROM job_outbox WHERE published_at IS NULL AND next_attempt_at < 'infinity';

-- ── crash guard ─────────────────────────────────────────────────────────────────────────────
-- ── reads ───────────────────────────────────────────────────────────────────────────────────
-- name: get_run
SELECT run_id, tenant_id, doc_id, status, run_type, source_id, initiated_by, config, stats, error,
       error_code, stage, progress, delivery_count, takeover_count, created_at, started_at, updated_at, finished_at
FROM ingestion_runs
WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s;

-- name: list_runs
-- By page (OFFSET) or after a cursor's row (after_at/after_id, a keyset on the tenant_created
-- index; gateway/paging.py). total counts the whole filtered listing, not what follows the cursor.
-- filename: a LIKE pattern (escaped by the caller) on the upload's file name or the S3 key.
SELECT run_id, tenant_id, doc_id, status, run_type, source_id, initiated_by, config, stats, error,
       error_code, stage, progress, delivery_count, takeover_count, created_at, started_at,
       updated_at, finished_at,
       (SELECT count(*) FROM ingestion_runs c WHERE c.tenant_id = %(tenant_id)s
          AND (%(status)s::text IS NULL OR c.status = %(status)s)
          AND (%(source_id)s::uuid IS NULL OR c.source_id = %(source_id)s)
          AND (%(filename)s::text IS NULL
               OR COALESCE(c.config ->> 'original_filename', c.config ->> 'key') ILIKE %(filename)s ESCAPE '\')) AS total
FROM ingestion_runs
WHERE tenant_id = %(tenant_id)s AND (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(source_id)s::uuid IS NULL OR source_id = %(source_id)s)
  AND (%(filename)s::text IS NULL
       OR COALESCE(config ->> 'original_filename', config ->> 'key') ILIKE %(filename)s ESCAPE '\')
  AND (%(after_at)s::timestamptz IS NULL
       OR (created_at, run_id) < (%(after_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY created_at DESC, run_id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: run_sources
-- The tenant's sources, for the runs page's source filter.
SELECT source_id, name FROM ingestion_sources WHERE tenant_id = %(tenant_id)s
ORDER BY name, source_id LIMIT 200;

-- name: list_run_attempts
-- A run's attempts, oldest first (migrations/0011); the caller checked the run is the tenant's.
SELECT attempt_no, kind, actor, worker, queued_at, started_at, ended_at, outcome, error,
       error_code, stages,
       EXTRACT(EPOCH FROM started_at - queued_at)::float8 AS queue_wait_s,
       EXTRACT(EPOCH FROM COALESCE(ended_at, CASE WHEN started_at IS NOT NULL THEN now() END)
               - started_at)::float8 AS duration_s
FROM run_attempts
WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
ORDER BY attempt_no;

-- name: find_upload_documents_by_filename
-- Upload documents of the tenant that a file of this exact name made (docs/decisions/0102):
-- the upload page offers to add a new version to one. Newest first, bounded by the caller.
SELECT d.doc_id, d.title, d.source_type, d.source_uri, d.source_id, d.created_at
FROM documents d
WHERE d.tenant_id = %(tenant_id)s AND d.source_uri LIKE 'upload://%%'
  AND EXISTS (SELECT 1 FROM ingestion_runs r
              WHERE r.tenant_id = d.tenant_id AND r.doc_id = d.doc_id
                AND r.config ->> 'original_filename' = %(filename)s)
ORDER BY d.created_at DESC, d.doc_id DESC
LIMIT %(limit)s;

-- name: list_documents
-- Only documents with an active version (§4.4): a queued upload is not a document yet.
-- Paged like list_runs.
SELECT d.doc_id, d.title, d.source_type, d.source_uri, d.source_id, d.created_at,
       v.doc_version_id, v.version_number, v.content_hash, v.chunk_count, v.char_count,
       v.page_count, v.embedding_model, v.created_at AS version_created_at,
       (SELECT count(*) FROM documents cd
        JOIN document_versions cv ON cv.doc_id = cd.doc_id AND cv.tenant_id = cd.tenant_id
         AND cv.is_active
        WHERE cd.tenant_id = %(tenant_id)s
          AND (%(search)s::text IS NULL OR cd.title ILIKE %(search)s ESCAPE '\')) AS total
FROM documents d
JOIN document_versions v ON v.doc_id = d.doc_id AND v.tenant_id = d.tenant_id AND v.is_active
WHERE d.tenant_id = %(tenant_id)s
  AND (%(search)s::text IS NULL OR d.title ILIKE %(search)s ESCAPE '\')
  AND (%(after_at)s::timestamptz IS NULL
       OR (d.created_at, d.doc_id) < (%(after_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY d.created_at DESC, d.doc_id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: get_document
SELECT doc_id, title, source_type, source_uri, source_id, created_at, parent_doc_id
FROM documents WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s;

-- name: list_versions
SELECT doc_version_id, version_number, content_hash, is_active, run_id, embedding_model,
       embedding_dim, chunk_count, char_count, page_count, created_at, deactivated_at
FROM document_versions
WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s
ORDER BY version_number DESC;
