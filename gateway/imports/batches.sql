-- Reads of import batches and their row errors (gateway/imports/batches.py).
-- Every query filters by tenant_id; the row-error queries through their batch's row, so the
-- errors themselves are read by (batch_id, …) indexes alone.

-- name: get_batch
SELECT b.batch_id, b.contract, b.contract_version, b.file_name, b.file_hash, b.byte_size,
       b.source, b.source_reference, b.error_threshold_percent, b.force_partial, b.created_by,
       b.status, b.rows_total, b.rows_valid, b.rows_invalid, b.rows_duplicate, b.rows_inserted,
       b.rows_updated, b.rows_unchanged, b.rejection_reason, b.parse_duration_ms,
       -- ad metrics (migrations/0021): the batch page's per-entity counts
       b.platform, b.client_id, b.campaigns_upserted, b.ad_sets_upserted, b.ads_upserted,
       b.daily_metrics_upserted, b.affected_dates,
       -- how the file was read (migrations/0030)
       b.decimal_separator, b.file_encoding, b.file_delimiter, b.decimal_separator_read,
       b.rows_skipped, b.skipped_reasons, b.entity_keys, b.report_grain,
       b.report_period_start, b.report_period_end, b.period_metrics_upserted,
       b.db_duration_ms, b.created_at, b.started_at, b.completed_at, r.run_id
FROM import_batches b
LEFT JOIN ingestion_runs r ON r.batch_id = b.batch_id AND r.tenant_id = b.tenant_id
WHERE b.tenant_id = %(tenant_id)s AND b.batch_id = %(batch_id)s;

-- name: list_batches
-- Newest first, by page (OFFSET) or after a cursor's row (gateway/paging.py); total counts the
-- whole filtered listing.
SELECT b.batch_id, b.contract, b.contract_version, b.file_name, b.file_hash, b.byte_size,
       b.source, b.source_reference, b.error_threshold_percent, b.force_partial, b.created_by,
       b.status, b.rows_total, b.rows_valid, b.rows_invalid, b.rows_duplicate, b.rows_inserted,
       b.rows_updated, b.rows_unchanged, b.rejection_reason, b.parse_duration_ms,
       -- ad metrics (migrations/0021): the batch page's per-entity counts
       b.platform, b.client_id, b.campaigns_upserted, b.ad_sets_upserted, b.ads_upserted,
       b.daily_metrics_upserted, b.affected_dates,
       -- how the file was read (migrations/0030)
       b.decimal_separator, b.file_encoding, b.file_delimiter, b.decimal_separator_read,
       b.rows_skipped, b.skipped_reasons, b.entity_keys, b.report_grain,
       b.report_period_start, b.report_period_end, b.period_metrics_upserted,
       b.db_duration_ms, b.created_at, b.started_at, b.completed_at, r.run_id,
       (SELECT count(*) FROM import_batches c WHERE c.tenant_id = %(tenant_id)s
          AND (%(status)s::text IS NULL OR c.status = %(status)s)
          AND (%(contract)s::text IS NULL OR c.contract = %(contract)s)) AS total
FROM import_batches b
LEFT JOIN ingestion_runs r ON r.batch_id = b.batch_id AND r.tenant_id = b.tenant_id
WHERE b.tenant_id = %(tenant_id)s
  AND (%(status)s::text IS NULL OR b.status = %(status)s)
  AND (%(contract)s::text IS NULL OR b.contract = %(contract)s)
  AND (%(after_at)s::timestamptz IS NULL
       OR (b.created_at, b.batch_id) < (%(after_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY b.created_at DESC, b.batch_id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- Two queries per read, with and without the code filter, rather than one with
-- "(code IS NULL OR code = …)": a generic plan of that form cannot pick the code index.

-- name: count_errors
-- A finished batch's totals were taken when it finished (migrations/0027, 0030); an unfinished
-- one's are counted (the SubPlans run only in that branch). n: errors and warnings (the pages);
-- errors and warnings apart (`totalErrors`, `totalWarnings`).
SELECT CASE WHEN b.error_totals IS NOT NULL
            THEN (SELECT COALESCE(sum(value::bigint), 0)::bigint
                  FROM jsonb_each_text(b.error_totals))
            ELSE (SELECT count(*) FROM import_row_errors e WHERE e.batch_id = b.batch_id)
       END AS n,
       CASE WHEN b.error_totals IS NOT NULL AND b.error_severity_totals IS NOT NULL
            THEN (SELECT COALESCE(sum(value::bigint), 0)::bigint
                  FROM jsonb_each_text(b.error_severity_totals -> 'critical'))
            ELSE (SELECT count(*) FROM import_row_errors e
                  WHERE e.batch_id = b.batch_id AND e.severity = 'critical')
       END AS errors,
       CASE WHEN b.error_totals IS NOT NULL AND b.error_severity_totals IS NOT NULL
            THEN (SELECT COALESCE(sum(value::bigint), 0)::bigint
                  FROM jsonb_each_text(b.error_severity_totals -> 'warning'))
            ELSE (SELECT count(*) FROM import_row_errors e
                  WHERE e.batch_id = b.batch_id AND e.severity = 'warning')
       END AS warnings,
       b.error_totals IS NOT NULL AS settled
FROM import_batches b
WHERE b.tenant_id = %(tenant_id)s AND b.batch_id = %(batch_id)s;

-- name: count_errors_by_code
SELECT CASE WHEN b.error_totals IS NOT NULL
            THEN COALESCE((b.error_totals ->> %(code)s)::bigint, 0)
            ELSE (SELECT count(*) FROM import_row_errors e
                  WHERE e.batch_id = b.batch_id AND e.code = %(code)s)
       END AS n,
       CASE WHEN b.error_totals IS NOT NULL AND b.error_severity_totals IS NOT NULL
            THEN COALESCE((b.error_severity_totals -> 'critical' ->> %(code)s)::bigint, 0)
            ELSE (SELECT count(*) FROM import_row_errors e
                  WHERE e.batch_id = b.batch_id AND e.code = %(code)s AND e.severity = 'critical')
       END AS errors,
       CASE WHEN b.error_totals IS NOT NULL AND b.error_severity_totals IS NOT NULL
            THEN COALESCE((b.error_severity_totals -> 'warning' ->> %(code)s)::bigint, 0)
            ELSE (SELECT count(*) FROM import_row_errors e
                  WHERE e.batch_id = b.batch_id AND e.code = %(code)s AND e.severity = 'warning')
       END AS warnings,
       b.error_totals IS NOT NULL AS settled
FROM import_batches b
WHERE b.tenant_id = %(tenant_id)s AND b.batch_id = %(batch_id)s;

-- name: page_errors
-- A page by number: `first` finds the page's first error by an index-only walk of
-- idx_import_row_errors_page (12 bytes an entry, no heap while the visibility map is set: the
-- worker vacuums the table once a batch that wrote errors is final,
-- worker/records/error_pages.py), then
-- the page is read from that key. Skipping 50,000 errors this way is ~6 ms; an OFFSET over the
-- full rows visited every skipped row's heap tuple (~12-18 ms, docs/decisions/0335).
WITH first AS (
    SELECT e.row_number, e.id FROM import_row_errors e
    JOIN import_batches b ON b.batch_id = e.batch_id
    WHERE b.tenant_id = %(tenant_id)s AND b.batch_id = %(batch_id)s AND e.batch_id = %(batch_id)s
    ORDER BY e.row_number, e.id
    OFFSET %(offset)s LIMIT 1)
SELECT e.id, e.row_number, e.field, e.code, e.severity, e.message, e.raw
FROM import_row_errors e
JOIN import_batches b ON b.batch_id = e.batch_id
WHERE b.tenant_id = %(tenant_id)s AND b.batch_id = %(batch_id)s AND e.batch_id = %(batch_id)s
  AND (e.row_number, e.id) >= (SELECT row_number, id FROM first)
ORDER BY e.row_number, e.id
LIMIT %(limit)s;

-- name: page_errors_by_code
-- The same through idx_import_row_errors_code: (batch_id, code) then (row_number, id).
WITH first AS (
    SELECT e.row_number, e.id FROM import_row_errors e
    JOIN import_batches b ON b.batch_id = e.batch_id
    WHERE b.tenant_id = %(tenant_id)s AND b.batch_id = %(batch_id)s AND e.batch_id = %(batch_id)s
      AND e.code = %(code)s
    ORDER BY e.row_number, e.id
    OFFSET %(offset)s LIMIT 1)
SELECT e.id, e.row_number, e.field, e.code, e.severity, e.message, e.raw
FROM import_row_errors e
JOIN import_batches b ON b.batch_id = e.batch_id
WHERE b.tenant_id = %(tenant_id)s AND b.batch_id = %(batch_id)s AND e.batch_id = %(batch_id)s
  AND e.code = %(code)s
  AND (e.row_number, e.id) >= (SELECT row_number, id FROM first)
ORDER BY e.row_number, e.id
LIMIT %(limit)s;

-- name: export_errors
-- The CSV export reads the errors in keyset chunks after (row_number, id), so a slow client
-- never holds a connection, and deep chunks cost what the first does.
SELECT e.id, e.row_number, e.field, e.code, e.severity, e.message, e.raw
FROM import_row_errors e
JOIN import_batches b ON b.batch_id = e.batch_id
WHERE b.tenant_id = %(tenant_id)s AND b.batch_id = %(batch_id)s AND e.batch_id = %(batch_id)s
  AND (e.row_number, e.id) > (%(after_row)s, %(after_id)s)
ORDER BY e.row_number, e.id
LIMIT %(limit)s;
