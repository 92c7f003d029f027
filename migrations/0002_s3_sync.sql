-- Admin S3 sources: soft deletion of sources, sync records, and what each sync saw per key.
-- Append-only: once applied anywhere, this file never changes.

-- ── sources are soft-deleted (docs/decisions/0020-s3-source-deletion.md) ────────────────────
ALTER TABLE ingestion_sources ADD COLUMN deleted_at TIMESTAMPTZ;
-- A name is unique among live sources only, so a deleted source's name can be reused.
ALTER TABLE ingestion_sources DROP CONSTRAINT ingestion_sources_tenant_id_name_key;
CREATE UNIQUE INDEX idx_ingestion_sources_live_name ON ingestion_sources (tenant_id, name)
    WHERE deleted_at IS NULL;

-- ── one row per sync of a source ────────────────────────────────────────────────────────────
CREATE TABLE source_syncs (
    sync_id          UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id        UUID NOT NULL REFERENCES tenants(tenant_id),
    source_id        UUID NOT NULL REFERENCES ingestion_sources(source_id),
    status           TEXT NOT NULL
        CHECK (status IN ('running', 'succeeded', 'completed_with_errors', 'failed')),
    initiated_by     UUID REFERENCES users(user_id),
    -- host:pid of the gateway running it, for operators reading a stuck sync.
    runner           TEXT,
    listed_count     INTEGER NOT NULL DEFAULT 0,
    excluded_count   INTEGER NOT NULL DEFAULT 0,
    new_count        INTEGER NOT NULL DEFAULT 0,
    changed_count    INTEGER NOT NULL DEFAULT 0,
    unchanged_count  INTEGER NOT NULL DEFAULT 0,
    deleted_count    INTEGER NOT NULL DEFAULT 0,
    skipped_count    INTEGER NOT NULL DEFAULT 0,
    failed_count     INTEGER NOT NULL DEFAULT 0,
    bytes_downloaded BIGINT NOT NULL DEFAULT 0,
    -- Deletions are applied only after a complete listing; false means none were.
    listing_complete BOOLEAN NOT NULL DEFAULT false,
    -- {"skipped": {reason: count}, "failed": {reason: count}}
    reasons          JSONB NOT NULL DEFAULT '{}',
    -- The first objects skipped or failed, with their keys: [{key, outcome, reason}].
    issues           JSONB NOT NULL DEFAULT '[]',
    -- Seconds spent listing, in the database and downloading; the benchmark reads them.
    timings          JSONB NOT NULL DEFAULT '{}',
    error            TEXT,
    started_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Written by the running gateway every SYNC_HEARTBEAT_S; the crash guard fails stale ones.
    heartbeat_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at      TIMESTAMPTZ
);
CREATE INDEX idx_source_syncs_source ON source_syncs (tenant_id, source_id, started_at DESC);
-- Besides the advisory lock: a second running row for one source cannot even be written.
CREATE UNIQUE INDEX idx_source_syncs_one_running ON source_syncs (source_id)
    WHERE status = 'running';
CREATE INDEX idx_source_syncs_stale ON source_syncs (heartbeat_at) WHERE status = 'running';

-- ── per-key state ───────────────────────────────────────────────────────────────────────────
-- The last sync whose listing contained the key: after a complete listing, every key of the
-- source not stamped with that sync's id is gone from the bucket.
ALTER TABLE source_objects ADD COLUMN last_sync_id UUID;
ALTER TABLE source_objects ADD COLUMN deleted_at TIMESTAMPTZ;
CREATE INDEX idx_source_objects_doc ON source_objects (tenant_id, doc_id);
