-- `ingest verify` (cli/verify.py): the SQL checks of import-runs-state-machine.md §4.3 against
-- this schema, and the removal of the tool's own rows. Read-only except remove_*.

-- name: judgments_with_case
SELECT count(*) AS n FROM judgments
WHERE tenant_id = %(tenant_id)s AND case_number_normalized = %(key)s;

-- name: unique_keys
-- §4.3 check 3, for this schema: the unique indexes idempotency relies on (a UNIQUE constraint
-- is one too), named by table and column list.
SELECT c.relname AS table_name,
       array_agg(a.attname ORDER BY k.ord)::text[] AS columns
FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema()
CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
WHERE i.indisunique AND i.indisvalid
  AND c.relname IN ('judgments', 'plaintiffs', 'import_batches', 'ingestion_runs')
GROUP BY c.relname, i.indexrelid;

-- name: stale_imports
SELECT count(*) AS n FROM ops.v_stale_imports;

-- name: batch_tenant
SELECT tenant_id FROM import_batches WHERE batch_id = %(batch_id)s;

-- name: remove_own_rows
-- Everything the verification import wrote, children first; staged rows and row errors go
-- with the batch (ON DELETE CASCADE), attempts with the run.
WITH runs AS (
    SELECT run_id FROM ingestion_runs WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s
), j AS (
    DELETE FROM judgments WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s
      AND case_number_normalized = %(key)s
    RETURNING 1
), o AS (
    DELETE FROM job_outbox WHERE run_id IN (SELECT run_id FROM runs)
), a AS (
    DELETE FROM run_actions WHERE run_id IN (SELECT run_id FROM runs)
), events AS (
    -- The completion event (worker/records/completion.py) and its webhook deliveries: one
    -- statement, so the deliveries' foreign key is checked once both are gone.
    DELETE FROM event_outbox WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s
    RETURNING event_id
), d AS (
    DELETE FROM webhook_deliveries WHERE tenant_id = %(tenant_id)s
      AND event_id IN (SELECT event_id FROM events)
)
SELECT (SELECT count(*) FROM j) AS judgments;

-- name: remove_run
DELETE FROM ingestion_runs WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s;

-- name: remove_batch
DELETE FROM import_batches WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s;

-- name: own_rows_left
SELECT (SELECT count(*) FROM import_batches WHERE batch_id = %(batch_id)s)
     + (SELECT count(*) FROM ingestion_runs WHERE batch_id = %(batch_id)s)
     + (SELECT count(*) FROM event_outbox WHERE batch_id = %(batch_id)s)
     + (SELECT count(*) FROM judgments WHERE tenant_id = %(tenant_id)s
          AND case_number_normalized = %(key)s) AS n;
