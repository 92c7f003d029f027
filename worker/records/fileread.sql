-- How a batch's file was read (worker/records/fileread.py, migrations/0030): its encoding,
-- delimiter and decimal separator, the rows skipped as export furniture, and for ad metrics
-- whether entities were keyed by ids or names and the report's grain. Every query names the
-- tenant.

-- name: decimal_option
SELECT decimal_separator FROM import_batches
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s;

-- name: record_read
UPDATE import_batches
SET file_encoding = %(encoding)s, file_delimiter = %(delimiter)s,
    decimal_separator_read = %(decimal)s, entity_keys = %(entity_keys)s, updated_at = now()
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s
  AND status IN ('pending', 'processing');

-- name: record_skipped
-- Once the whole file was read: what was skipped (one warning on the batch, written once however
-- often a takeover reads the file again), and the grain of the rows staged.
WITH warned AS (
    INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity, message)
    SELECT %(tenant_id)s, %(batch_id)s, 0, NULL, %(code)s, 'warning', %(message)s
    WHERE %(skipped)s > 0 AND NOT EXISTS (
        SELECT 1 FROM import_row_errors
        WHERE batch_id = %(batch_id)s AND row_number = 0 AND code = %(code)s)
    RETURNING 1
), grain AS (
    SELECT mode() WITHIN GROUP (ORDER BY grain) AS grain, min(period_start) AS first,
           max(period_end) AS last
    FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s
)
UPDATE import_batches b
SET rows_skipped = %(skipped)s, skipped_reasons = %(reasons)s, report_grain = g.grain,
    report_period_start = g.first, report_period_end = g.last, updated_at = now()
FROM grain g
WHERE b.batch_id = %(batch_id)s AND b.tenant_id = %(tenant_id)s AND b.status = 'processing';
