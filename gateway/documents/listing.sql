-- Listing and searching a tenant's documents (docs/decisions/0115). Every query names the tenant.

-- name: list_documents
-- One listing for every filter. A document's state: `active` (it has an active version),
-- `failed` (no active version and its newest run failed), `inactive` (no active version, an
-- older version exists: deactivated by an admin or by a sync), `pending` (nothing yet: a
-- queued upload, never listed). With %(query)s, only documents whose title contains the words
-- (%(like)s) or whose active chunks match them (the worker's chunk_fts tsvectors, 'english'),
-- ranked: a title match first, then the sum of ts_rank over the matching chunks.
-- Keyset paging by (rank, created_at, doc_id): a cursor names (created_at, doc_id) of the last
-- row (gateway/paging.py); its rank is computed again here, so the cursor format is unchanged.
WITH hits AS (
    SELECT f.doc_version_id, sum(ts_rank(f.tsv, q.tsq)) AS rank
    FROM chunk_fts f, websearch_to_tsquery('english', %(query)s::text) AS q(tsq)
    WHERE %(query)s::text IS NOT NULL AND f.tenant_id = %(tenant_id)s AND f.tsv @@ q.tsq
    GROUP BY f.doc_version_id
), docs AS (
    SELECT d.doc_id, d.title, d.source_type, d.source_uri, d.source_id, d.created_at,
           v.doc_version_id, v.version_number, v.content_hash, v.chunk_count, v.char_count,
           v.page_count, v.embedding_model, v.created_at AS version_created_at,
           lr.run_id AS last_run_id, lr.status AS last_run_status,
           CASE WHEN v.doc_version_id IS NOT NULL THEN 'active'
                WHEN lr.status = 'failed' THEN 'failed'
                WHEN EXISTS (SELECT 1 FROM document_versions x
                             WHERE x.tenant_id = d.tenant_id AND x.doc_id = d.doc_id) THEN 'inactive'
                ELSE 'pending' END AS state,
           CASE WHEN %(query)s::text IS NULL THEN 0::real
                ELSE (CASE WHEN d.title ILIKE %(like)s ESCAPE '\' THEN 1 ELSE 0 END)
                     + COALESCE(h.rank, 0) END::real AS rank
    FROM documents d
    LEFT JOIN document_versions v
      ON v.tenant_id = d.tenant_id AND v.doc_id = d.doc_id AND v.is_active
    LEFT JOIN hits h ON h.doc_version_id = v.doc_version_id
    LEFT JOIN LATERAL (
        SELECT r.run_id, r.status FROM ingestion_runs r
        WHERE r.tenant_id = d.tenant_id AND r.doc_id = d.doc_id
        ORDER BY r.created_at DESC, r.run_id DESC LIMIT 1
    ) lr ON true
    WHERE d.tenant_id = %(tenant_id)s
), matched AS (
    SELECT * FROM docs
    WHERE (docs.state = %(state)s OR (%(state)s = 'all' AND docs.state <> 'pending'))
      AND (%(query)s::text IS NULL OR docs.rank > 0)
)
SELECT m.*, (SELECT count(*) FROM matched) AS total
FROM matched m
WHERE %(after_id)s::uuid IS NULL
   OR (m.rank, m.created_at, m.doc_id) < (
        COALESCE((SELECT c.rank FROM matched c WHERE c.doc_id = %(after_id)s::uuid), 0),
        %(after_at)s::timestamptz, %(after_id)s::uuid)
ORDER BY m.rank DESC, m.created_at DESC, m.doc_id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: document_state
-- What the document page says about a document: its state as the listing has it, its newest
-- run (with the error), and where it came from (file name and uploader, or the S3 source).
SELECT d.doc_id,
       EXISTS (SELECT 1 FROM document_versions v
               WHERE v.tenant_id = d.tenant_id AND v.doc_id = d.doc_id AND v.is_active) AS active,
       EXISTS (SELECT 1 FROM document_versions v
               WHERE v.tenant_id = d.tenant_id AND v.doc_id = d.doc_id) AS has_versions,
       lr.run_id AS last_run_id, lr.status AS last_run_status, lr.error AS last_run_error,
       lr.config ->> 'original_filename' AS original_filename, u.email AS uploaded_by,
       s.name AS source_name, s.deleted_at AS source_deleted_at
FROM documents d
LEFT JOIN LATERAL (
    SELECT r.run_id, r.status, r.error, r.config, r.initiated_by FROM ingestion_runs r
    WHERE r.tenant_id = d.tenant_id AND r.doc_id = d.doc_id
    ORDER BY r.created_at DESC, r.run_id DESC LIMIT 1
) lr ON true
LEFT JOIN users u ON u.user_id = lr.initiated_by AND u.tenant_id = d.tenant_id
LEFT JOIN ingestion_sources s ON s.source_id = d.source_id AND s.tenant_id = d.tenant_id
WHERE d.tenant_id = %(tenant_id)s AND d.doc_id = %(doc_id)s;

-- name: chunks_page
-- A page of the active version's chunks, in order; (doc_version_id, ordinal) is unique and
-- indexed, so a page reads its rows, not the version.
SELECT c.ordinal, c.text, c.token_count, c.page
FROM document_versions v
JOIN chunks c ON c.doc_version_id = v.doc_version_id AND c.tenant_id = v.tenant_id
WHERE v.tenant_id = %(tenant_id)s AND v.doc_id = %(doc_id)s AND v.is_active
ORDER BY c.ordinal
LIMIT %(limit)s OFFSET %(offset)s;
