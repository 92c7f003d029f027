-- Buckets an operator granted a tenant for its S3 sources (docs/decisions/0065): a tenant admin
-- may register a source only inside a live grant of its tenant. `prefix` '' is the whole bucket;
-- otherwise it ends with '/' and confines the source's prefix to that folder. A revoked grant
-- keeps its row (who granted, who revoked, when) and stops the syncs that relied on it.
CREATE TABLE source_grants (
    grant_id   UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id  UUID NOT NULL REFERENCES tenants (tenant_id),
    bucket     TEXT NOT NULL,
    prefix     TEXT NOT NULL DEFAULT '',
    granted_by TEXT NOT NULL,
    granted_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_by TEXT,
    revoked_at TIMESTAMPTZ,
    CHECK (prefix = '' OR right(prefix, 1) = '/'),
    CHECK ((revoked_at IS NULL) = (revoked_by IS NULL))
);

-- One live grant per tenant, bucket and prefix; granting again is a no-op.
CREATE UNIQUE INDEX source_grants_live ON source_grants (tenant_id, bucket, prefix)
    WHERE revoked_at IS NULL;
