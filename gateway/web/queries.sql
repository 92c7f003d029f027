-- Reads of the web UI that the JSON API does not already have. Every query filters by tenant_id.

-- name: document_runs
-- The runs that ingested (or tried to ingest) this document, newest first.
SELECT run_id, status, run_type, created_at, finished_at, error
FROM ingestion_runs
WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s
ORDER BY created_at DESC
LIMIT %(limit)s;

-- name: signed_in_email
-- The header shows who is signed in; the token carries ids only, never the e-mail.
SELECT email FROM users WHERE tenant_id = %(tenant_id)s AND user_id = %(user_id)s;
