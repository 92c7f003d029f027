-- Advertiser clients of a tenant (gateway/imports/clients.py, migration 0020).
-- Every query filters by tenant_id.

-- name: insert_client
-- DO NOTHING on (tenant_id, name): a second client of the same name is a conflict, not a row.
INSERT INTO ad_clients (tenant_id, name, created_by)
VALUES (%(tenant_id)s, %(name)s, %(created_by)s)
ON CONFLICT (tenant_id, name) DO NOTHING
RETURNING client_id, name, created_by, created_at;

-- name: list_clients
SELECT client_id, name, created_by, created_at FROM ad_clients
WHERE tenant_id = %(tenant_id)s
ORDER BY lower(name), client_id;
