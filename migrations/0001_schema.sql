-- Dragonfly Ingest: the whole ingestion schema (gateway-worker-ingestion.md §9 plus DESIGN.md).
-- Append-only: once applied anywhere, this file never changes; add 0002_… instead.

CREATE EXTENSION IF NOT EXISTS vector;

-- ── identity ────────────────────────────────────────────────────────────────────────────────
CREATE TABLE tenants (
    tenant_id  UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    name       TEXT NOT NULL UNIQUE,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE users (
    user_id       UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id     UUID NOT NULL REFERENCES tenants(tenant_id),
    -- Login is by e-mail alone, so an address belongs to exactly one tenant.
    email         TEXT NOT NULL UNIQUE CHECK (email = lower(email)),
    password_hash TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('admin', 'user')),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX idx_users_tenant ON users(tenant_id);

-- ── admin S3 sources (gateway-owned; credentials never stored here) ─────────────────────────
CREATE TABLE ingestion_sources (
    source_id        UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id        UUID NOT NULL REFERENCES tenants(tenant_id),
    name             TEXT NOT NULL,
    bucket           TEXT NOT NULL,
    prefix           TEXT NOT NULL DEFAULT '',
    endpoint_url     TEXT,
    region           TEXT,
    include_patterns TEXT[] NOT NULL DEFAULT '{}',
    exclude_patterns TEXT[] NOT NULL DEFAULT '{}',
    enabled          BOOLEAN NOT NULL DEFAULT true,
    created_by       UUID REFERENCES users(user_id),
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);

CREATE TABLE documents (
    doc_id      UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id   UUID NOT NULL REFERENCES tenants(tenant_id),
    source_type TEXT NOT NULL,
    source_uri  TEXT NOT NULL,
    title       TEXT NOT NULL,
    source_id   UUID REFERENCES ingestion_sources(source_id),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX idx_documents_tenant ON documents(tenant_id, created_at DESC);
-- Document identity; the INSERT … ON CONFLICT get-or-create in intake depends on it.
CREATE UNIQUE INDEX idx_documents_source_uri ON documents(tenant_id, source_uri);

CREATE TABLE source_objects (
    source_id     UUID NOT NULL REFERENCES ingestion_sources(source_id),
    tenant_id     UUID NOT NULL REFERENCES tenants(tenant_id),
    key           TEXT NOT NULL,
    etag          TEXT,
    size_bytes    BIGINT,
    last_modified TIMESTAMPTZ,
    content_hash  TEXT,
    doc_id        UUID REFERENCES documents(doc_id),
    status        TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'deleted')),
    last_seen_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (source_id, key)
);
CREATE INDEX idx_source_objects_tenant ON source_objects(tenant_id, source_id);

-- ── runs ────────────────────────────────────────────────────────────────────────────────────
CREATE TABLE ingestion_runs (
    run_id         UUID PRIMARY KEY,
    tenant_id      UUID NOT NULL REFERENCES tenants(tenant_id),
    doc_id         UUID REFERENCES documents(doc_id),
    status         TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    run_type       TEXT NOT NULL DEFAULT 'manual_upload' CHECK (run_type IN ('manual_upload', 's3_sync')),
    source_id      UUID REFERENCES ingestion_sources(source_id),
    initiated_by   UUID REFERENCES users(user_id),
    config         JSONB NOT NULL DEFAULT '{}',
    stats          JSONB NOT NULL DEFAULT '{}',
    error          TEXT,
    -- Where a running job is, for people watching it: extract, chunk, embed, index.
    stage          TEXT,
    progress       REAL NOT NULL DEFAULT 0 CHECK (progress >= 0 AND progress <= 1),
    -- Every receive of the run's message, by any worker; a climbing count means redeliveries.
    delivery_count INTEGER NOT NULL DEFAULT 0,
    takeover_count INTEGER NOT NULL DEFAULT 0,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    started_at     TIMESTAMPTZ,
    -- The worker's heartbeat while running; the crash guard and takeovers read it.
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at    TIMESTAMPTZ
);
CREATE INDEX idx_ingestion_runs_tenant_status ON ingestion_runs(tenant_id, status);
CREATE INDEX idx_ingestion_runs_tenant_created ON ingestion_runs(tenant_id, created_at DESC);
CREATE INDEX idx_ingestion_runs_doc ON ingestion_runs(tenant_id, doc_id);
CREATE INDEX idx_ingestion_runs_stale ON ingestion_runs(status, updated_at)
    WHERE status IN ('queued', 'running');

-- DESIGN.md "Run lifecycle": queued → running → succeeded | failed; queued → failed (crash guard,
-- unrecoverable publish); running → running (heartbeat, takeover). failed → queued is an
-- operator's reopen, allowed only inside a transaction that declares it (ingest.reopen_run).
CREATE FUNCTION guard_run_transition() RETURNS trigger AS $$
BEGIN
    IF NEW.status = OLD.status THEN
        IF OLD.status = 'succeeded' THEN
            RAISE EXCEPTION 'run % has succeeded and cannot change', OLD.run_id
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF (OLD.status = 'queued'  AND NEW.status IN ('running', 'failed'))
    OR (OLD.status = 'running' AND NEW.status IN ('succeeded', 'failed'))
    OR (OLD.status = 'failed'  AND NEW.status = 'queued'
        AND current_setting('ingest.reopen_run', true) = OLD.run_id::text) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'invalid run transition % -> % for run %', OLD.status, NEW.status, OLD.run_id
        USING ERRCODE = 'check_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trg_ingestion_runs_transition
    BEFORE UPDATE OF status ON ingestion_runs
    FOR EACH ROW EXECUTE FUNCTION guard_run_transition();

-- Transactional outbox: the run and its job commit together, a relay publishes afterwards.
CREATE TABLE job_outbox (
    run_id          UUID PRIMARY KEY REFERENCES ingestion_runs(run_id),
    tenant_id       UUID NOT NULL REFERENCES tenants(tenant_id),
    payload         JSONB NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_at    TIMESTAMPTZ,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_error      TEXT
);
CREATE INDEX idx_job_outbox_pending ON job_outbox(next_attempt_at) WHERE published_at IS NULL;

-- ── content (worker-owned) ──────────────────────────────────────────────────────────────────
CREATE TABLE document_versions (
    doc_version_id  UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id       UUID NOT NULL REFERENCES tenants(tenant_id),
    doc_id          UUID NOT NULL REFERENCES documents(doc_id),
    run_id          UUID REFERENCES ingestion_runs(run_id),
    version_number  INTEGER NOT NULL,
    content_hash    TEXT NOT NULL,
    is_active       BOOLEAN NOT NULL DEFAULT true,
    -- Which model made this version's vectors: vectors of different models never mix.
    embedding_model TEXT NOT NULL,
    embedding_dim   INTEGER NOT NULL,
    chunk_count     INTEGER NOT NULL DEFAULT 0,
    char_count      INTEGER NOT NULL DEFAULT 0,
    page_count      INTEGER,
    artifact_uri    TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    deactivated_at  TIMESTAMPTZ,
    UNIQUE (doc_id, version_number)
);
CREATE UNIQUE INDEX idx_doc_versions_one_active ON document_versions (tenant_id, doc_id)
    WHERE is_active = true;
CREATE INDEX idx_doc_versions_dedup ON document_versions (tenant_id, doc_id, content_hash)
    WHERE is_active = true;
-- One version per run: a redelivered job can never write its content twice.
CREATE UNIQUE INDEX idx_doc_versions_run ON document_versions (run_id);

CREATE TABLE chunks (
    chunk_id       UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id      UUID NOT NULL REFERENCES tenants(tenant_id),
    doc_version_id UUID NOT NULL REFERENCES document_versions(doc_version_id),
    ordinal        INTEGER NOT NULL,
    text           TEXT NOT NULL,
    token_count    INTEGER NOT NULL,
    char_start     INTEGER NOT NULL,
    char_end       INTEGER NOT NULL,
    page           INTEGER,
    UNIQUE (doc_version_id, ordinal)
);
CREATE INDEX idx_chunks_tenant_version ON chunks(tenant_id, doc_version_id);

-- vector(384) is the dimension of the default model (all-MiniLM-L6-v2). Another dimension is a
-- new migration, not a silent mix: see docs/decisions/0004-embedding-model-per-version.md.
CREATE TABLE chunk_embeddings (
    chunk_id       UUID PRIMARY KEY REFERENCES chunks(chunk_id),
    tenant_id      UUID NOT NULL REFERENCES tenants(tenant_id),
    doc_version_id UUID NOT NULL REFERENCES document_versions(doc_version_id),
    embedding      vector(384) NOT NULL
);
CREATE INDEX idx_chunk_embeddings_hnsw ON chunk_embeddings
    USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64);
CREATE INDEX idx_chunk_embeddings_tenant ON chunk_embeddings(tenant_id, doc_version_id);

CREATE TABLE chunk_fts (
    chunk_id       UUID PRIMARY KEY REFERENCES chunks(chunk_id),
    tenant_id      UUID NOT NULL REFERENCES tenants(tenant_id),
    doc_version_id UUID NOT NULL REFERENCES document_versions(doc_version_id),
    tsv            TSVECTOR NOT NULL
);
CREATE INDEX idx_chunk_fts_gin ON chunk_fts USING gin(tsv);
CREATE INDEX idx_chunk_fts_tenant ON chunk_fts(tenant_id, doc_version_id);
