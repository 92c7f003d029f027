-- E-mail attachments into child documents (gateway/documents/attachments.py,
-- docs/decisions/0250). message_attachments rows are the worker's; the gateway only sets
-- child_doc_id, as it marks job_outbox rows published.

-- name: claim_pending_attachments
-- Across tenants, like the outbox relay: every replica runs it, SKIP LOCKED gives each row to
-- one. Only attachments of a served message version: one taken down before its children were
-- made waits here, and is made if the version is served again (reactivated). Each row carries
-- what the child needs from its message: tenant, model, uploader, source.
SELECT a.attachment_id, a.tenant_id, a.doc_id AS parent_doc_id, a.doc_version_id, a.ordinal,
       a.filename, a.source_type, a.size_bytes, a.content_hash, a.upload_uri, a.depth,
       v.embedding_model, v.embedding_dim, v.run_id AS parent_run_id,
       d.source_id, r.initiated_by, r.run_type AS parent_run_type
FROM message_attachments a
JOIN document_versions v ON v.doc_version_id = a.doc_version_id AND v.tenant_id = a.tenant_id
JOIN documents d ON d.doc_id = a.doc_id AND d.tenant_id = a.tenant_id
LEFT JOIN ingestion_runs r ON r.run_id = v.run_id AND r.tenant_id = a.tenant_id
WHERE a.child_doc_id IS NULL AND v.is_active
ORDER BY a.created_at, a.attachment_id
LIMIT %(limit)s
FOR UPDATE OF a SKIP LOCKED;

-- name: insert_child_document
-- The attachment's own document. Its identity is the attachment (one per message version), so
-- a repeat finds the same row; DO UPDATE so that RETURNING always yields it.
INSERT INTO documents (tenant_id, source_type, source_uri, title, source_id, parent_doc_id)
VALUES (%(tenant_id)s, %(source_type)s, %(source_uri)s, %(title)s, %(source_id)s,
        %(parent_doc_id)s)
ON CONFLICT (tenant_id, source_uri) DO UPDATE SET parent_doc_id = EXCLUDED.parent_doc_id
RETURNING doc_id;

-- name: insert_child_run
-- run_id = attachment_id: the file was stored under <tenant>/<attachment_id>/, the folder the
-- worker confines this run's upload to.
INSERT INTO ingestion_runs (run_id, tenant_id, doc_id, status, run_type, source_id,
                            initiated_by, config)
VALUES (%(run_id)s, %(tenant_id)s, %(doc_id)s, 'queued', 'attachment', NULL, %(initiated_by)s,
        %(config)s)
ON CONFLICT (run_id) DO NOTHING;

-- name: insert_child_job
INSERT INTO job_outbox (run_id, tenant_id, payload)
VALUES (%(run_id)s, %(tenant_id)s, %(payload)s)
ON CONFLICT (run_id) DO NOTHING;

-- name: mark_attachment_made
UPDATE message_attachments SET child_doc_id = %(child_doc_id)s
WHERE tenant_id = %(tenant_id)s AND attachment_id = %(attachment_id)s;

-- name: document_family
-- What the document page and GET /v1/documents/{id} show of a message and its attachments:
-- the message a document came from, and the documents its newest version's attachments became.
SELECT 'parent' AS relation, p.doc_id, p.title, p.source_type, NULL::int AS ordinal,
       a.message_subject
FROM message_attachments a
JOIN documents p ON p.doc_id = a.doc_id AND p.tenant_id = a.tenant_id
WHERE a.tenant_id = %(tenant_id)s AND a.child_doc_id = %(doc_id)s
UNION ALL
SELECT 'attachment', c.doc_id, c.title, c.source_type, a.ordinal, NULL
FROM message_attachments a
JOIN documents c ON c.doc_id = a.child_doc_id AND c.tenant_id = a.tenant_id
WHERE a.tenant_id = %(tenant_id)s AND a.doc_version_id = (
    SELECT v.doc_version_id FROM document_versions v
    WHERE v.tenant_id = %(tenant_id)s AND v.doc_id = %(doc_id)s
    ORDER BY v.version_number DESC LIMIT 1)
ORDER BY relation DESC, ordinal;
