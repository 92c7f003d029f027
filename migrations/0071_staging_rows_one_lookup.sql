-- The spec's staging_rows view (docs/decisions/0148, 0272) read each typed stage in a branch of
-- its own, each with the same correlated subquery for a row's warnings (issue 31's review: three
-- copies of one lookup). The typed stages are one union now, and a staged row's warnings are
-- looked up once, below it (a probe of import_row_errors by batch and row, as before). Same
-- columns, same rows: only the view's text changes.
-- Append-only: once applied anywhere, this file never changes.

CREATE OR REPLACE VIEW staging_rows AS
SELECT s.batch_id AS upload_id, s.tenant_id AS workspace_id, s.row_number - 1 AS row_index,
       s.entity_type, s.natural_key_hash, s.data AS raw_data, 'valid'::text AS validation_status,
       s.validation_errors, s.created_at
FROM ONLY import_staged_rows s
UNION ALL
SELECT t.batch_id, t.tenant_id, t.row_number - 1, t.entity_type, t.natural_key_hash,
       t.raw_data, 'valid', w.warnings, t.created_at
FROM (SELECT s.batch_id, s.tenant_id, s.row_number, s.entity_type, s.natural_key_hash,
             staged_values(to_jsonb(s)) AS raw_data, s.created_at
      FROM import_staged_judgments s
      UNION ALL
      SELECT s.batch_id, s.tenant_id, s.row_number, s.entity_type, s.natural_key_hash,
             staged_values(to_jsonb(s)), s.created_at
      FROM import_staged_plaintiffs s
      UNION ALL
      SELECT s.batch_id, s.tenant_id, s.row_number, s.entity_type, s.natural_key_hash,
             staged_values(to_jsonb(s)), s.created_at
      FROM import_staged_ad_metrics s) t
LEFT JOIN LATERAL (
    SELECT jsonb_agg(jsonb_build_object('field', e.field, 'code', e.code,
                                        'severity', e.severity, 'message', e.message)
                     ORDER BY e.id) AS warnings
    FROM import_row_errors e
    WHERE e.batch_id = t.batch_id AND e.row_number = t.row_number) w ON true
UNION ALL
SELECT e.batch_id, e.tenant_id, e.row_number - 1,
       CASE b.contract WHEN 'ad_metrics' THEN 'daily_metric' ELSE b.contract END,
       NULL, (array_agg(e.raw ORDER BY e.id))[1], 'invalid',
       jsonb_agg(jsonb_build_object('field', e.field, 'code', e.code, 'severity', e.severity,
                                    'message', e.message) ORDER BY e.id),
       min(e.created_at)
FROM import_row_errors e
JOIN import_batches b ON b.batch_id = e.batch_id AND b.tenant_id = e.tenant_id
WHERE e.row_number > 0
  AND EXISTS (SELECT 1 FROM import_row_errors c WHERE c.batch_id = e.batch_id
              AND c.row_number = e.row_number AND c.severity = 'critical')
GROUP BY e.batch_id, e.tenant_id, e.row_number, b.contract;
