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

-- name: active_version
SELECT doc_version_id FROM document_versions
WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s AND is_active;

-- name: s3_object_gone
-- An S3 document whose object is no longer in a live source (deleted from the bucket, or the
-- source deleted): bringing it back would serve what the bucket no longer holds, and the next
-- sync would take it down again. Uploads have no source_id and are never "gone"; nor are the
-- attachments of an S3 message (their message's own check applies: message_of_attachment).
SELECT d.source_id IS NOT NULL AND d.parent_doc_id IS NULL AND NOT EXISTS (
           SELECT 1 FROM source_objects so
           JOIN ingestion_sources s ON s.source_id = so.source_id AND s.deleted_at IS NULL
           WHERE so.tenant_id = d.tenant_id AND so.doc_id = d.doc_id AND so.status = 'active'
       ) AS gone
FROM documents d
WHERE d.tenant_id = %(tenant_id)s AND d.doc_id = %(doc_id)s;

-- name: reactivate_newest_version
-- After the lock, in a statement of its own (as deactivate_active_version): the newest version
-- is served again. deactivated_at stays as the record of the take-down; reactivated_at is new.
UPDATE document_versions SET is_active = true, reactivated_at = now()
WHERE doc_version_id = (
    SELECT doc_version_id FROM document_versions
    WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s
    ORDER BY version_number DESC LIMIT 1)
  AND tenant_id = %(tenant_id)s AND NOT is_active
RETURNING doc_version_id, version_number, reactivated_at;

-- name: message_of_attachment
-- For a document made from an e-mail attachment (docs/decisions/0250): whether the message
-- version it came from is served, since it can be served only with it. FOR SHARE: the order of
-- locks every writer keeps (message version row, then the attachment's rows; migrations/0066).
SELECT mv.is_active AS served
FROM message_attachments a
JOIN document_versions mv ON mv.doc_version_id = a.doc_version_id AND mv.tenant_id = a.tenant_id
WHERE a.tenant_id = %(tenant_id)s AND a.child_doc_id = %(doc_id)s
FOR SHARE OF mv;
