-- Reads of the web UI that the JSON API does not already have. Every query filters by tenant_id.

-- name: document_runs
-- The runs that ingested (or tried to ingest) this document, newest first.
SELECT run_id, status, run_type, created_at, finished_at, error
FROM ingestion_runs
WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s
ORDER BY created_at DESC
LIMIT %(limit)s;

-- name: signed_in_email
-- The header shows who is signed in; the token carries ids only, never the e-mail.
SELECT email FROM users WHERE tenant_id = %(tenant_id)s AND user_id = %(user_id)s;

-- ── records imports (the Imports and batch pages, docs/decisions/0125) ──────────────────────

-- name: my_batches
-- The signed-in user's latest imports for the Imports page (idx_import_batches_tenant_created
-- narrows to the tenant; a tenant's users upload a few batches a day).
SELECT b.batch_id, b.contract, b.contract_version, b.file_name, b.file_hash, b.byte_size,
       b.source, b.source_reference, b.error_threshold_percent, b.force_partial, b.created_by,
       b.status, b.rows_total, b.rows_valid, b.rows_invalid, b.rows_duplicate, b.rows_inserted,
       b.rows_updated, b.rows_unchanged, b.rejection_reason, b.parse_duration_ms,
       -- ad metrics (migrations/0021): the batch page's per-entity counts
       b.platform, b.client_id, b.campaigns_upserted, b.ad_sets_upserted, b.ads_upserted,
       b.daily_metrics_upserted, b.affected_dates,
       b.db_duration_ms, b.created_at, b.started_at, b.completed_at
FROM import_batches b
WHERE b.tenant_id = %(tenant_id)s AND b.created_by = %(user_id)s
ORDER BY b.created_at DESC, b.batch_id DESC
LIMIT %(limit)s;

-- name: batch_error_codes
-- The batch page's chart: row errors and warnings per code, most frequent first. Through the
-- batch's row for the tenant; idx_import_row_errors_code serves the grouping.
SELECT e.code, e.severity, count(*) AS n
FROM import_row_errors e
JOIN import_batches b ON b.batch_id = e.batch_id
WHERE b.tenant_id = %(tenant_id)s AND b.batch_id = %(batch_id)s AND e.batch_id = %(batch_id)s
GROUP BY e.code, e.severity
ORDER BY n DESC, e.code;
