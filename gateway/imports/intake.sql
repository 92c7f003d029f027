-- Intake of records files: the batch, its run and its job, in one transaction (gateway/imports/intake.py).
-- Every query on tenant data filters by tenant_id.

-- name: client_of_tenant
-- An ad-metrics upload's client must be one of the tenant's own advertiser clients.
SELECT 1 FROM ad_clients WHERE tenant_id = %(tenant_id)s AND client_id = %(client_id)s;

-- name: insert_batch
-- DO NOTHING on the (tenant, contract, file hash, platform, client, options) key (NULLS NOT
-- DISTINCT, docs/decisions/0146, 0176): of concurrent identical uploads exactly one gets a row
-- back; the others wait for its commit here, then get none (a duplicate). The same file with
-- other options (error budget, force_partial, decimal separator) is another batch.
INSERT INTO import_batches (tenant_id, contract, contract_version, file_name, file_hash,
                            byte_size, upload_uri, source, source_reference,
                            error_threshold_percent, force_partial, created_by,
                            platform, client_id, decimal_separator)
VALUES (%(tenant_id)s, %(contract)s, %(contract_version)s, %(file_name)s, %(file_hash)s,
        %(byte_size)s, %(upload_uri)s, %(source)s, %(source_reference)s,
        %(error_threshold_percent)s, %(force_partial)s, %(created_by)s,
        %(platform)s, %(client_id)s, %(decimal_separator)s)
ON CONFLICT (tenant_id, contract, file_hash, platform, client_id, options_key) DO NOTHING
RETURNING batch_id;

-- name: existing_batch
-- The batch of the same file and options: options_key as migrations/0030 generates it.
SELECT batch_id, status FROM import_batches
WHERE tenant_id = %(tenant_id)s AND contract = %(contract)s AND file_hash = %(file_hash)s
  AND platform IS NOT DISTINCT FROM %(platform)s
  AND client_id IS NOT DISTINCT FROM %(client_id)s
  AND options_key = %(error_threshold_percent)s::numeric(5, 2)::text || '|'
                    || %(force_partial)s::boolean::text || '|'
                    || COALESCE(%(decimal_separator)s::text, 'auto');

-- name: same_file_other_options
-- The latest other batch of the same file (other options), for the answer to say so.
SELECT batch_id FROM import_batches
WHERE tenant_id = %(tenant_id)s AND contract = %(contract)s AND file_hash = %(file_hash)s
  AND platform IS NOT DISTINCT FROM %(platform)s
  AND client_id IS NOT DISTINCT FROM %(client_id)s AND batch_id <> %(batch_id)s
ORDER BY created_at DESC LIMIT 1;

-- name: insert_run
-- The batch's run (docs/decisions/0090): the lease, heartbeat and crash guard work on it.
INSERT INTO ingestion_runs (run_id, tenant_id, batch_id, status, run_type, initiated_by, config)
VALUES (%(run_id)s, %(tenant_id)s, %(batch_id)s, 'queued', 'records_import', %(initiated_by)s,
        %(config)s);

-- name: insert_outbox
-- The same outbox row a document upload writes (gateway/queries.sql): the relay publishes it.
INSERT INTO job_outbox (run_id, tenant_id, payload) VALUES (%(run_id)s, %(tenant_id)s, %(payload)s);
