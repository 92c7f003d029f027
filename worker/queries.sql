-- Queries of the worker, which owns document_versions, chunks, chunk_embeddings and chunk_fts,
-- and moves ingestion_runs through running → succeeded | failed. Every query names the tenant.

-- name: try_lock_run
-- Session-level: held for the whole job on a dedicated connection, released when it closes
-- (or when the connection dies, which is how a crashed worker lets go of its runs).
SELECT pg_try_advisory_lock(%(key)s) AS locked;

-- name: count_delivery
-- Every receive of the run's message counts, whoever ends up processing it.
UPDATE ingestion_runs SET delivery_count = delivery_count + 1
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s
RETURNING status, created_at, started_at,
          EXTRACT(EPOCH FROM now() - updated_at) AS heartbeat_age_s;

-- name: start_run
UPDATE ingestion_runs
SET status = 'running', started_at = COALESCE(started_at, now()), updated_at = now(),
    stage = 'starting', progress = 0, error = NULL
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'queued'
RETURNING started_at;

-- name: take_over_run
-- Only if the heartbeat is still stale now: two workers deciding at once cannot both win.
UPDATE ingestion_runs
SET updated_at = now(), takeover_count = takeover_count + 1, stage = 'starting', progress = 0,
    started_at = COALESCE(started_at, now())
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'running'
  AND updated_at < now() - make_interval(secs => %(stale_s)s)
RETURNING started_at, takeover_count;

-- name: heartbeat
UPDATE ingestion_runs SET updated_at = now(), stage = %(stage)s, progress = %(progress)s
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'running';

-- name: note_retry
-- Why the last attempt gave up on a transient failure, shown by `ingest dlq list` if the
-- message ends in the DLQ. Success and failure overwrite stats, so it lives only while the run
-- is unfinished.
UPDATE ingestion_runs SET stats = stats || jsonb_build_object('last_retry_error', %(error)s::text)
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'running';

-- name: fail_run
UPDATE ingestion_runs
SET status = 'failed', error = %(error)s, stats = %(stats)s, stage = %(stage)s,
    finished_at = now(), updated_at = now()
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'running';

-- ── the one content transaction ─────────────────────────────────────────────────────────────
-- name: lock_document
-- Serialises version numbering and activation of one document across workers.
SELECT pg_advisory_xact_lock(%(key)s);

-- name: deactivate_active_version
UPDATE document_versions SET is_active = false, deactivated_at = now()
WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s AND is_active;

-- name: insert_version
INSERT INTO document_versions (doc_version_id, tenant_id, doc_id, run_id, version_number,
    content_hash, is_active, embedding_model, embedding_dim, chunk_count, char_count, page_count,
    artifact_uri)
SELECT %(doc_version_id)s, %(tenant_id)s, %(doc_id)s, %(run_id)s,
       COALESCE(max(version_number), 0) + 1, %(content_hash)s, true, %(embedding_model)s,
       %(embedding_dim)s, %(chunk_count)s, %(char_count)s, %(page_count)s, %(artifact_uri)s
FROM document_versions WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s
RETURNING version_number;

-- name: insert_fts
-- Postgres computes the vectors from the rows just copied, so text never travels twice.
INSERT INTO chunk_fts (chunk_id, tenant_id, doc_version_id, tsv)
SELECT chunk_id, tenant_id, doc_version_id, to_tsvector(%(config)s::regconfig, text)
FROM chunks WHERE tenant_id = %(tenant_id)s AND doc_version_id = %(doc_version_id)s;

-- name: succeed_run
UPDATE ingestion_runs
SET status = 'succeeded', stats = %(stats)s, stage = 'done', progress = 1,
    finished_at = now(), updated_at = now()
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'running';

-- name: embedding_column_dim
SELECT atttypmod AS dim FROM pg_attribute
WHERE attrelid = 'chunk_embeddings'::regclass AND attname = 'embedding';

-- ── start-up report ─────────────────────────────────────────────────────────────────────────
-- name: backlog
-- Across tenants on purpose: the operator's view of the whole queue at worker start.
SELECT count(*) FILTER (WHERE status = 'queued') AS queued,
       count(*) FILTER (WHERE status = 'running') AS running,
       EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE status = 'queued')) AS oldest_queued_s
FROM ingestion_runs WHERE status IN ('queued', 'running');
