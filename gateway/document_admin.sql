-- An admin's deactivation of a document: the one write to document_versions the gateway makes
-- outside S3 sync (gateway-worker-ingestion.md §14: deactivate, never delete).

-- name: lock_document
-- The worker's per-document lock (worker/runs.lock_key: the first 8 bytes of the doc id as a
-- signed bigint), so a deactivation never interleaves with a version activation. Returns no row
-- (and takes no lock) when the document is not in the tenant.
SELECT pg_advisory_xact_lock(('x' || left(replace(doc_id::text, '-', ''), 16))::bit(64)::bigint)
FROM documents
WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s;

-- name: deactivate_active_version
-- A statement of its own after the lock: in READ COMMITTED it sees the version a worker may
-- have activated while we waited.
UPDATE document_versions SET is_active = false, deactivated_at = now()
WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s AND is_active
RETURNING doc_version_id, version_number, deactivated_at;
