-- Operations views of records imports (import-runs-state-machine.md §2.4 and §6, issue 12 item 6):
-- what failed in the last 7 days by code and contract, and the imports that stopped moving.
-- Read by gateway/imports/ops.py (operators across tenants, tenant admins filtered to theirs),
-- the housekeeping alerts and `ingest verify`. Plain views: the data stays in the tables of
-- migrations/0009, and Postgres 16+ without contrib runs them. See docs/decisions/0129.
-- Append-only: once applied anywhere, this file never changes.

CREATE SCHEMA IF NOT EXISTS ops;

-- Row errors and warnings of the last 7 days, per tenant, contract, code and severity: the
-- error-code distribution. Counts and ids only: no raw row, no message text.
CREATE VIEW ops.v_import_error_distribution AS
SELECT e.tenant_id,
       b.contract,
       e.code,
       e.severity,
       count(*)                   AS error_count,
       count(DISTINCT e.batch_id) AS batch_count,
       min(e.created_at)          AS first_seen_at,
       max(e.created_at)          AS last_seen_at
FROM import_row_errors e
JOIN import_batches b ON b.tenant_id = e.tenant_id AND b.batch_id = e.batch_id
WHERE e.created_at > now() - interval '7 days'
GROUP BY e.tenant_id, b.contract, e.code, e.severity;

COMMENT ON VIEW ops.v_import_error_distribution IS
    'Import row errors and warnings of the last 7 days by tenant, contract, code and severity.';

-- Unfinished batches that neither the batch nor its run has touched for over an hour (the
-- spec's PROCESSING_TIMEOUT_HOURS): the worker writes the batch per chunk and heartbeats the
-- run, so a live import never shows here. Pending ones count too: never picked up.
CREATE VIEW ops.v_stale_imports AS
SELECT b.tenant_id,
       b.batch_id,
       r.run_id,
       b.contract,
       b.status,
       r.status AS run_status,
       b.created_at,
       b.started_at,
       GREATEST(b.updated_at, r.updated_at) AS last_activity_at,
       EXTRACT(EPOCH FROM now() - GREATEST(b.updated_at, r.updated_at)) / 3600 AS hours_stale,
       b.file_hash
FROM import_batches b
LEFT JOIN ingestion_runs r ON r.batch_id = b.batch_id AND r.tenant_id = b.tenant_id
WHERE b.status IN ('pending', 'processing', 'staging_complete', 'promoting')
  AND GREATEST(b.updated_at, COALESCE(r.updated_at, b.updated_at)) < now() - interval '1 hour';

COMMENT ON VIEW ops.v_stale_imports IS
    'Import batches unfinished and silent for over 1 hour (potential crash victims).';
