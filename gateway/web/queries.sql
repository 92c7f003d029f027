-- Reads of the web UI that the JSON API does not already have. Every query filters by tenant_id.

-- name: first_chunks
-- The opening chunks of the document's active version, for the document page's preview.
-- chunks (doc_version_id, ordinal) is unique and indexed, so this reads N rows, not the version.
SELECT c.ordinal, c.text, c.token_count, c.page
FROM document_versions v
JOIN chunks c ON c.doc_version_id = v.doc_version_id AND c.tenant_id = v.tenant_id
WHERE v.tenant_id = %(tenant_id)s AND v.doc_id = %(doc_id)s AND v.is_active
ORDER BY c.ordinal
LIMIT %(limit)s;

-- name: document_runs
-- The runs that ingested (or tried to ingest) this document, newest first.
SELECT run_id, status, run_type, created_at, finished_at, error
FROM ingestion_runs
WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s
ORDER BY created_at DESC
LIMIT %(limit)s;
