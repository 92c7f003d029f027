-- Records imports (DESIGN.md "Records imports", records-data-contract.md): batches, their row
-- errors and staged rows, the production tables judgments / plaintiffs and their links, and the
-- run of a batch. Valid on Postgres 16+ with pgvector; needs no contrib extension (pg_trgm's
-- name-similarity index comes with the migration that can rely on it).
-- Append-only: once applied anywhere, this file never changes.

-- ── batches ─────────────────────────────────────────────────────────────────────────────────
CREATE TABLE import_batches (
    batch_id                UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id               UUID NOT NULL REFERENCES tenants(tenant_id),
    contract                TEXT NOT NULL,
    contract_version        TEXT NOT NULL,
    -- As the uploader named it (display only); the stored object's name is made safe.
    file_name               TEXT NOT NULL,
    -- SHA-256 of the whole file, lower-case hex (the spec's fileHash).
    file_hash               TEXT NOT NULL CHECK (file_hash ~ '^[0-9a-f]{64}$'),
    byte_size               BIGINT NOT NULL CHECK (byte_size > 0),
    upload_uri              TEXT NOT NULL,
    source                  TEXT NOT NULL CHECK (source IN ('simplicity', 'jbi', 'manual')),
    source_reference        TEXT CHECK (length(source_reference) <= 200),
    error_threshold_percent NUMERIC(5, 2) NOT NULL DEFAULT 10
                            CHECK (error_threshold_percent BETWEEN 0 AND 100),
    force_partial           BOOLEAN NOT NULL DEFAULT false,
    created_by              UUID REFERENCES users(user_id),
    status                  TEXT NOT NULL DEFAULT 'pending' CHECK (status IN (
                                'pending', 'processing', 'staging_complete', 'promoting',
                                'completed', 'partial', 'failed')),
    -- Counts the pipeline writes; invalid = rows with a critical error, duplicate = a natural
    -- key repeated within the file; inserted / updated / unchanged = what promotion did.
    rows_total              INTEGER NOT NULL DEFAULT 0 CHECK (rows_total >= 0),
    rows_valid              INTEGER NOT NULL DEFAULT 0 CHECK (rows_valid >= 0),
    rows_invalid            INTEGER NOT NULL DEFAULT 0 CHECK (rows_invalid >= 0),
    rows_duplicate          INTEGER NOT NULL DEFAULT 0 CHECK (rows_duplicate >= 0),
    rows_inserted           INTEGER NOT NULL DEFAULT 0 CHECK (rows_inserted >= 0),
    rows_updated            INTEGER NOT NULL DEFAULT 0 CHECK (rows_updated >= 0),
    rows_unchanged          INTEGER NOT NULL DEFAULT 0 CHECK (rows_unchanged >= 0),
    -- The highest row number whose stage chunk committed: a takeover resumes after it.
    last_staged_row         INTEGER NOT NULL DEFAULT 0 CHECK (last_staged_row >= 0),
    rejection_reason        TEXT,
    parse_duration_ms       BIGINT CHECK (parse_duration_ms >= 0),
    db_duration_ms          BIGINT CHECK (db_duration_ms >= 0),
    created_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    started_at              TIMESTAMPTZ,
    updated_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    completed_at            TIMESTAMPTZ,
    -- One batch per tenant, contract and file content (docs/decisions/0091): intake's
    -- INSERT … ON CONFLICT DO NOTHING relies on it, so concurrent identical uploads make one.
    UNIQUE (tenant_id, contract, file_hash),
    -- Lets rows of other tables reference (tenant_id, batch_id) and so never cross tenants.
    UNIQUE (tenant_id, batch_id)
);
-- GET /v1/imports: newest first, optionally by status or contract (keyset on created_at, id).
CREATE INDEX idx_import_batches_tenant_created ON import_batches (tenant_id, created_at DESC, batch_id DESC);
CREATE INDEX idx_import_batches_tenant_status ON import_batches (tenant_id, status, created_at DESC);
-- Stale imports (ops views, the crash guard): only the few unfinished batches.
CREATE INDEX idx_import_batches_unfinished ON import_batches (status, updated_at)
    WHERE status IN ('pending', 'processing', 'staging_complete', 'promoting');

-- DESIGN.md "Records imports": pending → processing → staging_complete → promoting →
-- completed | partial | failed, and failed from every unfinished state. A status may be
-- written again while unfinished (heartbeat, a takeover resuming in processing or re-running
-- promotion). completed and partial are final. failed → pending is the explicit retry, allowed
-- only inside a transaction that declares it (SET LOCAL ingest.reopen_batch = '<batch_id>'),
-- like a run's reopen (0001_schema.sql).
CREATE FUNCTION guard_batch_transition() RETURNS trigger AS $$
BEGIN
    IF NEW.status = OLD.status THEN
        IF OLD.status IN ('completed', 'partial') THEN
            RAISE EXCEPTION 'import batch % is % and cannot change', OLD.batch_id, OLD.status
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF (OLD.status = 'pending'          AND NEW.status IN ('processing', 'failed'))
    OR (OLD.status = 'processing'       AND NEW.status IN ('staging_complete', 'failed'))
    OR (OLD.status = 'staging_complete' AND NEW.status IN ('promoting', 'failed'))
    OR (OLD.status = 'promoting'        AND NEW.status IN ('completed', 'partial', 'failed'))
    OR (OLD.status = 'failed'           AND NEW.status = 'pending'
        AND current_setting('ingest.reopen_batch', true) = OLD.batch_id::text) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'invalid import batch transition % -> % for batch %',
        OLD.status, NEW.status, OLD.batch_id USING ERRCODE = 'check_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trg_import_batches_transition
    BEFORE UPDATE OF status ON import_batches
    FOR EACH ROW EXECUTE FUNCTION guard_batch_transition();

-- ── the run of a batch (docs/decisions/0090) ────────────────────────────────────────────────
-- A records import is an ingestion_runs row with run_type records_import that belongs to a
-- batch instead of a document: the queue, lease, heartbeat, takeover, crash guard and retry
-- work on runs, the batch holds what the data did. doc_id was already optional; a run has
-- either a document (or none, for older rows) or a batch, never both.
ALTER TABLE ingestion_runs DROP CONSTRAINT ingestion_runs_run_type_check;
ALTER TABLE ingestion_runs ADD CONSTRAINT ingestion_runs_run_type_check
    CHECK (run_type IN ('manual_upload', 's3_sync', 'records_import'));
ALTER TABLE ingestion_runs ADD COLUMN batch_id UUID REFERENCES import_batches(batch_id);
ALTER TABLE ingestion_runs ADD CONSTRAINT ingestion_runs_batch_check
    CHECK ((run_type = 'records_import') = (batch_id IS NOT NULL)
           AND (batch_id IS NULL OR doc_id IS NULL));
-- One run per batch: a retry reopens that run, as for documents.
CREATE UNIQUE INDEX idx_ingestion_runs_batch ON ingestion_runs (batch_id) WHERE batch_id IS NOT NULL;

-- ── row errors and warnings ─────────────────────────────────────────────────────────────────
CREATE TABLE import_row_errors (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id  UUID NOT NULL,
    batch_id   UUID NOT NULL,
    -- 1 = the first data row; 0 = the file as a whole (BATCH_MISSING_COLUMN, BATCH_EMPTY_FILE).
    row_number INTEGER NOT NULL CHECK (row_number >= 0),
    -- The canonical field (snake_case), NULL for a file-level error.
    field      TEXT,
    code       TEXT NOT NULL,
    severity   TEXT NOT NULL CHECK (severity IN ('critical', 'warning')),
    message    TEXT NOT NULL,
    -- The row as the file had it, header → value; personal data (docs/decisions/0092).
    raw        JSONB,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, batch_id) REFERENCES import_batches (tenant_id, batch_id) ON DELETE CASCADE
);
-- GET /intake/batches/{id}/errors pages in (row_number, id) order, optionally by one code:
-- each filter has an index in that order, so a page and its count are index scans even on a
-- batch with 100,000 errors.
CREATE INDEX idx_import_row_errors_page ON import_row_errors (batch_id, row_number, id);
CREATE INDEX idx_import_row_errors_code ON import_row_errors (batch_id, code, row_number, id);
-- Cleanup (row errors after 90 days) and the 7-day error distribution.
CREATE INDEX idx_import_row_errors_created ON import_row_errors (created_at);

-- ── staging (worker-owned) ──────────────────────────────────────────────────────────────────
-- Validated rows of a batch before promotion, one per data row. UNLOGGED: written once and read
-- once, and a Postgres crash empties it; then the stage holds fewer rows than last_staged_row
-- says, and the worker must restage from the stage's own max(row_number), not trust the counter.
CREATE UNLOGGED TABLE import_staged_rows (
    batch_id    UUID NOT NULL,
    row_number  INTEGER NOT NULL CHECK (row_number >= 1),
    tenant_id   UUID NOT NULL,
    -- The contract's natural key, normalised (judgments: the case number's A–Z0–9): a key
    -- repeated within the file is a duplicate, found set-based at promotion.
    natural_key TEXT,
    -- The normalised values, canonical column → value, as the contract produced them.
    data        JSONB NOT NULL,
    PRIMARY KEY (batch_id, row_number),
    FOREIGN KEY (tenant_id, batch_id) REFERENCES import_batches (tenant_id, batch_id) ON DELETE CASCADE
);
CREATE INDEX idx_import_staged_rows_key ON import_staged_rows (batch_id, natural_key);

-- ── production records (worker-owned; every unique key starts with tenant_id) ──────────────
-- records-data-contract.md "Canonical Schema", per tenant. case_number is kept as given for
-- display; the key is its normalised form (upper-case, only A–Z and 0–9, leading zeros kept).
CREATE TABLE judgments (
    id                        UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id                 UUID NOT NULL REFERENCES tenants(tenant_id),
    case_number               TEXT NOT NULL CHECK (length(case_number) <= 100),
    plaintiff_name            TEXT NOT NULL,
    defendant_name            TEXT NOT NULL,
    amount                    NUMERIC(12, 2) NOT NULL CHECK (amount >= 0),
    filed_date                DATE NOT NULL,
    court                     TEXT,
    county                    TEXT,
    source                    TEXT NOT NULL DEFAULT 'simplicity'
                              CHECK (source IN ('simplicity', 'jbi', 'manual')),
    source_reference          TEXT,
    -- The batch that last inserted or changed the row.
    batch_id                  UUID REFERENCES import_batches(batch_id),
    created_at                TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at                TIMESTAMPTZ NOT NULL DEFAULT now(),
    case_number_normalized    TEXT GENERATED ALWAYS AS (
        regexp_replace(upper(trim(case_number)), '[^A-Z0-9]', '', 'g')) STORED,
    plaintiff_name_normalized TEXT GENERATED ALWAYS AS (
        upper(trim(regexp_replace(plaintiff_name, '\s+', ' ', 'g')))) STORED,
    defendant_name_normalized TEXT GENERATED ALWAYS AS (
        upper(trim(regexp_replace(defendant_name, '\s+', ' ', 'g')))) STORED,
    -- A case number of no letters or digits would collide with every other such one.
    CHECK (case_number_normalized <> ''),
    UNIQUE (tenant_id, case_number_normalized),
    UNIQUE (tenant_id, id)
);
CREATE INDEX idx_judgments_filed_date ON judgments (tenant_id, filed_date);
CREATE INDEX idx_judgments_amount ON judgments (tenant_id, amount DESC);
CREATE INDEX idx_judgments_created ON judgments (tenant_id, created_at DESC, id DESC);

-- The dedupe key is DESIGN.md's: name | address line 1 | ZIP, upper-cased and trimmed. E-mail
-- and phone are duplicate-candidate signals, not the key.
CREATE TABLE plaintiffs (
    id               UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id        UUID NOT NULL REFERENCES tenants(tenant_id),
    name             TEXT NOT NULL,
    address_line1    TEXT,
    address_line2    TEXT,
    city             TEXT,
    state            TEXT CHECK (state ~ '^[A-Z]{2}$'),
    zip              TEXT CHECK (zip ~ '^[0-9]{5}(-?[0-9]{4})?$'),
    phone            TEXT,  -- E.164, e.g. +12125551234
    email            TEXT CHECK (email = lower(email)),
    contact_name     TEXT,
    -- The contract maps the file's status onto its enum (shared/contracts/plaintiffs).
    status           TEXT NOT NULL DEFAULT 'active',
    source           TEXT NOT NULL CHECK (source IN ('simplicity', 'jbi', 'manual')),
    source_reference TEXT,  -- the vendor's batch id
    batch_id         UUID REFERENCES import_batches(batch_id),
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    name_normalized  TEXT GENERATED ALWAYS AS (
        upper(trim(regexp_replace(name, '\s+', ' ', 'g')))) STORED,
    email_normalized TEXT GENERATED ALWAYS AS (lower(trim(email))) STORED,
    dedupe_key       TEXT GENERATED ALWAYS AS (md5(
        coalesce(upper(trim(name)), '') || '|' ||
        coalesce(upper(trim(address_line1)), '') || '|' ||
        coalesce(upper(trim(zip)), ''))) STORED,
    UNIQUE (tenant_id, dedupe_key),
    UNIQUE (tenant_id, id)
);
CREATE INDEX idx_plaintiffs_name_normalized ON plaintiffs (tenant_id, name_normalized);
CREATE INDEX idx_plaintiffs_status ON plaintiffs (tenant_id, status);
CREATE INDEX idx_plaintiffs_created ON plaintiffs (tenant_id, created_at DESC, id DESC);

-- A plaintiff row's case number links it to its judgment. The composite keys make a link
-- between two tenants' rows impossible, whatever the code above does.
CREATE TABLE plaintiff_judgments (
    tenant_id    UUID NOT NULL,
    plaintiff_id UUID NOT NULL,
    judgment_id  UUID NOT NULL,
    batch_id     UUID REFERENCES import_batches(batch_id),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, plaintiff_id, judgment_id),
    FOREIGN KEY (tenant_id, plaintiff_id) REFERENCES plaintiffs (tenant_id, id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, judgment_id) REFERENCES judgments (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX idx_plaintiff_judgments_judgment ON plaintiff_judgments (tenant_id, judgment_id);
