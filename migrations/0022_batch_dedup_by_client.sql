-- One batch per tenant, contract, file content, platform and client (docs/decisions/0146):
-- the same ad-platform export uploaded for two advertiser clients (or read as two platforms)
-- is two imports, never one client's batch answered to the other. The records contracts
-- carry no platform and no client (0020's checks), and NULLS NOT DISTINCT keeps their key
-- exactly what it was: one batch per tenant, contract and file.
-- Append-only: once applied anywhere, this file never changes.

ALTER TABLE import_batches DROP CONSTRAINT import_batches_tenant_id_contract_file_hash_key;
ALTER TABLE import_batches ADD CONSTRAINT import_batches_file_key
    UNIQUE NULLS NOT DISTINCT (tenant_id, contract, file_hash, platform, client_id);
