-- Web UI honesty (issue 11): reactivation of a document, and scheduled syncs of a source.
-- Append-only: once applied anywhere, this file never changes.

-- ── reactivation is recorded like deactivation (docs/decisions/0116) ────────────────────────
-- deactivated_at keeps when the version was last taken down; reactivated_at when an admin put
-- it back, so the page can say both.
ALTER TABLE document_versions ADD COLUMN reactivated_at TIMESTAMPTZ;

-- ── an optional schedule per source (docs/decisions/0118) ───────────────────────────────────
-- NULL: synced only when someone presses Sync now. Bounded so a typo cannot turn a source into
-- a busy loop (5 minutes) nor into a schedule nobody notices is off (a week).
ALTER TABLE ingestion_sources ADD COLUMN sync_every_minutes INTEGER
    CHECK (sync_every_minutes BETWEEN 5 AND 10080);

-- ── objects whose last ingest failed and did not change (docs/decisions/0117) ───────────────
-- Not fetched again; each sync counts and lists them until they change or their run is retried.
ALTER TABLE source_syncs ADD COLUMN still_failed_count INTEGER NOT NULL DEFAULT 0;
