-- Ad-platform metrics imports (staging-promotion-runtime.md §3.2, issue 13): the advertiser
-- accounts ("clients") of a tenant, and the batch fields an ad-metrics upload carries: the
-- platform whose export it is and the client it belongs to. The workspace of the spec is the
-- tenant. The production tables (campaigns → ad sets → ads → daily metrics) come with the
-- migration that builds their promotion.
-- Append-only: once applied anywhere, this file never changes.

-- An advertiser account of the tenant, created by its admins. client_id is optional on an
-- upload: facts without one are the tenant's own (and UNIQUE NULLS NOT DISTINCT keeps them
-- unique, docs/decisions).
CREATE TABLE ad_clients (
    client_id  UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id  UUID NOT NULL REFERENCES tenants(tenant_id),
    name       TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_by UUID REFERENCES users(user_id),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name),
    -- Lets batches and production rows reference (tenant_id, client_id): never another tenant's.
    UNIQUE (tenant_id, client_id)
);

ALTER TABLE import_batches
    ADD COLUMN platform  TEXT CHECK (platform IN ('meta', 'google', 'tiktok')),
    ADD COLUMN client_id UUID,
    ADD CONSTRAINT import_batches_client_fk FOREIGN KEY (tenant_id, client_id)
        REFERENCES ad_clients (tenant_id, client_id),
    -- Only ad-metrics batches name a platform, and every one of them does.
    ADD CONSTRAINT import_batches_platform_contract_check
        CHECK ((contract = 'ad_metrics') = (platform IS NOT NULL)),
    ADD CONSTRAINT import_batches_client_contract_check
        CHECK (client_id IS NULL OR contract = 'ad_metrics');

-- The spec's source of an ad-metrics upload (manual | api | webhook) beside the records
-- sources (simplicity | jbi | manual).
ALTER TABLE import_batches DROP CONSTRAINT import_batches_source_check;
ALTER TABLE import_batches ADD CONSTRAINT import_batches_source_check
    CHECK (source IN ('simplicity', 'jbi', 'manual', 'api', 'webhook'));
