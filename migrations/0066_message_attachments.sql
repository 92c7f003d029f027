-- E-mail attachments become child documents of their message (issue 25, docs/decisions/0250).
-- Append-only: once applied anywhere, this file never changes.
--
-- Who writes what (DESIGN.md ownership kept):
--   the worker, in the message version's one content transaction, inserts one
--     message_attachments row per readable attachment, after storing its bytes in the upload
--     store under <tenant>/<attachment_id>/;
--   the gateway's outbox relay turns each row of an active message version into a child
--     document (documents.parent_doc_id), a run whose run_id is the attachment_id, and its job,
--     and records the child in message_attachments.child_doc_id (the one column it writes
--     there, as it marks job_outbox rows published);
--   the triggers below keep the children's served state equal to their message version's.

-- A document made from an attachment names the message it came from.
ALTER TABLE documents ADD COLUMN parent_doc_id UUID REFERENCES documents(doc_id);
CREATE INDEX idx_documents_parent ON documents(tenant_id, parent_doc_id)
    WHERE parent_doc_id IS NOT NULL;

ALTER TABLE ingestion_runs DROP CONSTRAINT ingestion_runs_run_type_check;
ALTER TABLE ingestion_runs ADD CONSTRAINT ingestion_runs_run_type_check
    CHECK (run_type IN ('manual_upload', 's3_sync', 'records_import', 'attachment'));

CREATE TABLE message_attachments (
    -- Chosen by the worker from its run id and the ordinal (the same on a takeover), and the
    -- run id of the child's run: creating that run twice is impossible by primary key.
    attachment_id  UUID PRIMARY KEY,
    tenant_id      UUID NOT NULL REFERENCES tenants(tenant_id),
    doc_version_id UUID NOT NULL REFERENCES document_versions(doc_version_id),
    doc_id         UUID NOT NULL REFERENCES documents(doc_id),
    ordinal        INTEGER NOT NULL CHECK (ordinal >= 1),
    filename       TEXT NOT NULL,
    source_type    TEXT NOT NULL,
    size_bytes     BIGINT NOT NULL CHECK (size_bytes > 0),
    content_hash   TEXT NOT NULL,
    upload_uri     TEXT NOT NULL,
    -- 1 for an upload's own attachments, 2 for those of an attached message, …
    depth          INTEGER NOT NULL CHECK (depth >= 1),
    -- The Subject of the message version, which hits and citations of the child show.
    message_subject TEXT,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    child_doc_id   UUID REFERENCES documents(doc_id),
    UNIQUE (doc_version_id, ordinal)
);
-- What the relay has still to turn into documents; small, since it empties within seconds.
CREATE INDEX idx_message_attachments_pending ON message_attachments(created_at)
    WHERE child_doc_id IS NULL;
-- Cleanup asks whether a stored file is a pending attachment's.
CREATE INDEX idx_message_attachments_pending_uri ON message_attachments(upload_uri)
    WHERE child_doc_id IS NULL;
CREATE UNIQUE INDEX idx_message_attachments_child ON message_attachments(child_doc_id)
    WHERE child_doc_id IS NOT NULL;

-- A child document can be served only while the message version it came from is. BEFORE
-- INSERT covers the worker activating a child's new version; BEFORE UPDATE an admin's (or a
-- cascade's) reactivation. FOR SHARE on the message's version row: a transaction taking the
-- message down holds that row, so we wait for it and then see it inactive; one that comes after
-- us waits for our commit and then finds our version in its cascade below. The worker takes the
-- same lock first thing in its content transaction (worker/queries.sql lock_message_version), so
-- the order is always message row, then child rows: no deadlock.
CREATE FUNCTION attachment_served_with_message() RETURNS trigger AS $$
BEGIN
    IF NEW.is_active AND EXISTS (
        SELECT 1 FROM message_attachments a
        JOIN document_versions mv ON mv.doc_version_id = a.doc_version_id
                                 AND mv.tenant_id = a.tenant_id
        WHERE a.tenant_id = NEW.tenant_id AND a.child_doc_id = NEW.doc_id AND NOT mv.is_active
        FOR SHARE OF mv
    ) THEN
        NEW.is_active := false;
        NEW.deactivated_at := now();
        IF TG_OP = 'UPDATE' THEN
            NEW.reactivated_at := OLD.reactivated_at;
        END IF;
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trg_document_versions_attachment_served
    BEFORE INSERT OR UPDATE OF is_active ON document_versions
    FOR EACH ROW WHEN (NEW.is_active) EXECUTE FUNCTION attachment_served_with_message();

-- A message version taken down (a new version, an admin's deactivation, its S3 object deleted)
-- takes its children down; served again (reactivation), it serves their newest versions again.
-- Children's own children follow, since these updates fire this trigger in turn.
CREATE FUNCTION attachments_follow_message() RETURNS trigger AS $$
BEGIN
    IF NOT NEW.is_active THEN
        UPDATE document_versions cv SET is_active = false, deactivated_at = now()
        FROM message_attachments a
        WHERE a.tenant_id = NEW.tenant_id AND a.doc_version_id = NEW.doc_version_id
          AND cv.tenant_id = a.tenant_id AND cv.doc_id = a.child_doc_id AND cv.is_active;
    ELSE
        UPDATE document_versions cv SET is_active = true, reactivated_at = now()
        WHERE cv.doc_version_id IN (
            SELECT DISTINCT ON (v.doc_id) v.doc_version_id
            FROM message_attachments a
            JOIN document_versions v ON v.tenant_id = a.tenant_id AND v.doc_id = a.child_doc_id
            WHERE a.tenant_id = NEW.tenant_id AND a.doc_version_id = NEW.doc_version_id
              AND NOT EXISTS (SELECT 1 FROM document_versions x
                              WHERE x.tenant_id = v.tenant_id AND x.doc_id = v.doc_id
                                AND x.is_active)
            ORDER BY v.doc_id, v.version_number DESC);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trg_document_versions_attachments_follow
    AFTER UPDATE OF is_active ON document_versions
    FOR EACH ROW WHEN (OLD.is_active IS DISTINCT FROM NEW.is_active)
    EXECUTE FUNCTION attachments_follow_message();
