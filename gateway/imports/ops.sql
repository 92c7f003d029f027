-- The operations views of records imports (migrations/0016) for gateway/imports/ops.py:
-- tenant admins always with their tenant_id, operators with one or with NULL (every tenant).

-- name: error_distribution
SELECT tenant_id, contract, code, severity, error_count, batch_count, first_seen_at, last_seen_at
FROM ops.v_import_error_distribution
WHERE (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
  AND (%(contract)s::text IS NULL OR contract = %(contract)s)
ORDER BY error_count DESC, contract, code, tenant_id
LIMIT 500;

-- name: stale_imports
SELECT tenant_id, batch_id, run_id, contract, status, run_status, created_at, started_at,
       last_activity_at, round(hours_stale::numeric, 2)::float8 AS hours_stale
FROM ops.v_stale_imports
WHERE (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
ORDER BY last_activity_at
LIMIT 500;
