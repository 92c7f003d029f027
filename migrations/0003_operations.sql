-- Operations: recorded operator actions on runs, alert windows, storage cleanup bookkeeping.
-- Append-only: once applied anywhere, this file never changes.

-- ── operator actions (docs/decisions/0010-dlq-redrive-and-retry.md) ─────────────────────────
-- Every explicit retry, DLQ redrive and DLQ purge that touches a run: who, when, what and why.
-- A failed run is final for the queue; only a row here explains why it ran again.
CREATE TABLE run_actions (
    action_id     BIGSERIAL PRIMARY KEY,
    tenant_id     UUID NOT NULL REFERENCES tenants(tenant_id),
    run_id        UUID NOT NULL REFERENCES ingestion_runs(run_id),
    action        TEXT NOT NULL CHECK (action IN ('retry', 'redrive', 'dlq_purge')),
    -- 'user:<user_id>' for the API, 'cli:<os user>' (or --actor) for the operator CLI.
    actor         TEXT NOT NULL,
    actor_user_id UUID REFERENCES users(user_id),
    reason        TEXT NOT NULL,
    -- What the action found and did: previous status and error, message id, reopened or not.
    details       JSONB NOT NULL DEFAULT '{}',
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX idx_run_actions_run ON run_actions (tenant_id, run_id, created_at);
CREATE INDEX idx_run_actions_action ON run_actions (action);

-- When the run last entered `queued`. A reopened run keeps its created_at (its history), so
-- the crash guard's never-picked-up TTL counts from here instead (NULL = created_at).
ALTER TABLE ingestion_runs ADD COLUMN queued_at TIMESTAMPTZ;

-- Cleanup finds the run that owns a stored upload by its URI.
CREATE INDEX idx_ingestion_runs_upload_uri ON ingestion_runs ((config ->> 'upload_uri'));
-- /api/metrics: failures of the last 24 h, the last failure, mean processing time.
CREATE INDEX idx_ingestion_runs_finished ON ingestion_runs (status, finished_at)
    WHERE finished_at IS NOT NULL;
-- /metrics: the fleet's takeovers, summed from the few runs that had one.
CREATE INDEX idx_ingestion_runs_takeovers ON ingestion_runs (takeover_count)
    WHERE takeover_count > 0;
-- Cleanup: versions deactivated long enough ago that their artifacts may go.
CREATE INDEX idx_doc_versions_deactivated ON document_versions (deactivated_at)
    WHERE NOT is_active;

-- ── alerts (docs/decisions/0012-alerts.md) ──────────────────────────────────────────────────
-- One row per incident key ('job_failed:extraction_error', 'dlq_depth', …): every process of
-- the fleet claims the window here, so one incident raises one alert per window in total.
CREATE TABLE alert_windows (
    key          TEXT PRIMARY KEY,
    last_sent_at TIMESTAMPTZ NOT NULL,
    -- Occurrences not alerted since last_sent_at, and those of the window before it (reported
    -- with the next alert).
    suppressed   INTEGER NOT NULL DEFAULT 0,
    carried      INTEGER NOT NULL DEFAULT 0
);

-- ── cleanup (docs/decisions/0013-storage-cleanup.md) ────────────────────────────────────────
-- Artifacts removed from the store. Versions belong to the worker, so cleanup records what it
-- deleted here instead of writing document_versions.
CREATE TABLE storage_purges (
    uri            TEXT PRIMARY KEY,
    tenant_id      UUID NOT NULL REFERENCES tenants(tenant_id),
    doc_version_id UUID REFERENCES document_versions(doc_version_id),
    purged_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
