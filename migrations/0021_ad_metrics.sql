-- Ad-platform metrics (staging-promotion-runtime.md §3.4–§3.5, issue 13): the production tables
-- campaigns → ad sets → ads → daily metrics, the per-entity counts of a batch, and what the
-- spec's staging contract needs on the one stage every contract shares (docs/decisions/0148).
-- The spec's workspace is the tenant; every unique key starts with tenant_id, and every
-- reference carries tenant_id, so no row can point into another tenant.
-- Append-only: once applied anywhere, this file never changes.

-- ── staging: the spec's contract on import_staged_rows ─────────────────────────────────────
-- One stage for every contract. The spec's fields it lacked: the entity type, the SHA-256 of
-- the natural key, the row's warnings, when it was staged, and whether an earlier row of the
-- same file had its key (a duplicate: kept for review, never promoted).
ALTER TABLE import_staged_rows
    ADD COLUMN entity_type       TEXT NOT NULL DEFAULT 'record',
    ADD COLUMN natural_key_hash  TEXT CHECK (natural_key_hash ~ '^[0-9a-f]{64}$'),
    ADD COLUMN validation_errors JSONB,
    ADD COLUMN is_duplicate      BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN created_at        TIMESTAMPTZ NOT NULL DEFAULT now();

-- The spec's staging_rows under its own names (read-only): a staged row is valid (its
-- warnings are its validation_errors); a row with a critical error was never staged, and shows
-- here as invalid with its errors, from import_row_errors. row_index is 0-based, as the spec's.
CREATE VIEW staging_rows AS
SELECT s.batch_id AS upload_id, s.tenant_id AS workspace_id, s.row_number - 1 AS row_index,
       s.entity_type, s.natural_key_hash, s.data AS raw_data,
       'valid'::text AS validation_status, s.validation_errors, s.created_at
FROM import_staged_rows s
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

COMMENT ON VIEW staging_rows IS
    'The staging contract of staging-promotion-runtime.md §3.4 over import_staged_rows and '
    'import_row_errors (docs/decisions/0148).';

-- ── batches: what an ad-metrics promotion did ──────────────────────────────────────────────
-- Rows each upsert inserted or changed (an unchanged row is not counted), and the dates the
-- promoted rows carry (the IngestionCompleteEvent's affected_dates).
ALTER TABLE import_batches
    ADD COLUMN campaigns_upserted     INTEGER NOT NULL DEFAULT 0 CHECK (campaigns_upserted >= 0),
    ADD COLUMN ad_sets_upserted       INTEGER NOT NULL DEFAULT 0 CHECK (ad_sets_upserted >= 0),
    ADD COLUMN ads_upserted           INTEGER NOT NULL DEFAULT 0 CHECK (ads_upserted >= 0),
    ADD COLUMN daily_metrics_upserted INTEGER NOT NULL DEFAULT 0
                                      CHECK (daily_metrics_upserted >= 0),
    ADD COLUMN affected_dates         DATE[] NOT NULL DEFAULT '{}';

-- ── production: dimensions ─────────────────────────────────────────────────────────────────
-- Keyed (tenant, client, platform, external id). client_id is optional: NULLS NOT DISTINCT
-- keeps the tenant's own (client-less) rows unique too. lookup_key is the same key as one text
-- (the tenant's id first, so it never matches across tenants), with an index of its own:
-- promotion resolves references by it, one probe per row, whatever the planner's statistics
-- say about the tenant (docs/decisions/0149). The (tenant_id, client_id) reference is MATCH
-- SIMPLE: a NULL client is not checked, any other must be the tenant's.
CREATE TABLE campaigns (
    id          UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id   UUID NOT NULL REFERENCES tenants(tenant_id),
    client_id   UUID,
    platform    TEXT NOT NULL CHECK (platform IN ('meta', 'google', 'tiktok')),
    external_id TEXT NOT NULL CHECK (length(external_id) BETWEEN 1 AND 200),
    name        TEXT,
    batch_id    UUID,  -- the batch that last inserted or changed the row
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    lookup_key  TEXT NOT NULL GENERATED ALWAYS AS (
        tenant_id::text || '|' || platform || '|' || COALESCE(client_id::text, '') || '|' ||
        external_id) STORED,
    CONSTRAINT campaigns_natural_key
        UNIQUE NULLS NOT DISTINCT (tenant_id, client_id, platform, external_id),
    CONSTRAINT campaigns_lookup_key UNIQUE (lookup_key),
    UNIQUE (tenant_id, id),
    FOREIGN KEY (tenant_id, client_id) REFERENCES ad_clients (tenant_id, client_id),
    FOREIGN KEY (tenant_id, batch_id) REFERENCES import_batches (tenant_id, batch_id)
);

CREATE TABLE ad_sets (
    id          UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id   UUID NOT NULL REFERENCES tenants(tenant_id),
    client_id   UUID,
    platform    TEXT NOT NULL CHECK (platform IN ('meta', 'google', 'tiktok')),
    external_id TEXT NOT NULL CHECK (length(external_id) BETWEEN 1 AND 200),
    name        TEXT,
    campaign_id UUID,
    batch_id    UUID,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    lookup_key  TEXT NOT NULL GENERATED ALWAYS AS (
        tenant_id::text || '|' || platform || '|' || COALESCE(client_id::text, '') || '|' ||
        external_id) STORED,
    CONSTRAINT ad_sets_natural_key
        UNIQUE NULLS NOT DISTINCT (tenant_id, client_id, platform, external_id),
    CONSTRAINT ad_sets_lookup_key UNIQUE (lookup_key),
    UNIQUE (tenant_id, id),
    FOREIGN KEY (tenant_id, client_id) REFERENCES ad_clients (tenant_id, client_id),
    FOREIGN KEY (tenant_id, campaign_id) REFERENCES campaigns (tenant_id, id),
    FOREIGN KEY (tenant_id, batch_id) REFERENCES import_batches (tenant_id, batch_id)
);

CREATE TABLE ads (
    id          UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id   UUID NOT NULL REFERENCES tenants(tenant_id),
    client_id   UUID,
    platform    TEXT NOT NULL CHECK (platform IN ('meta', 'google', 'tiktok')),
    external_id TEXT NOT NULL CHECK (length(external_id) BETWEEN 1 AND 200),
    name        TEXT,
    campaign_id UUID,
    ad_set_id   UUID,
    batch_id    UUID,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    lookup_key  TEXT NOT NULL GENERATED ALWAYS AS (
        tenant_id::text || '|' || platform || '|' || COALESCE(client_id::text, '') || '|' ||
        external_id) STORED,
    CONSTRAINT ads_natural_key
        UNIQUE NULLS NOT DISTINCT (tenant_id, client_id, platform, external_id),
    CONSTRAINT ads_lookup_key UNIQUE (lookup_key),
    UNIQUE (tenant_id, id),
    FOREIGN KEY (tenant_id, client_id) REFERENCES ad_clients (tenant_id, client_id),
    FOREIGN KEY (tenant_id, campaign_id) REFERENCES campaigns (tenant_id, id),
    FOREIGN KEY (tenant_id, ad_set_id) REFERENCES ad_sets (tenant_id, id),
    FOREIGN KEY (tenant_id, batch_id) REFERENCES import_batches (tenant_id, batch_id)
);

-- ── production: facts ──────────────────────────────────────────────────────────────────────
-- One row per (tenant, client, platform, day, campaign, ad set, ad); a reference whose parent
-- could not be resolved is NULL (spec §6.1), and NULLS NOT DISTINCT keeps such facts unique.
CREATE TABLE daily_metrics (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   UUID NOT NULL REFERENCES tenants(tenant_id),
    client_id   UUID,
    platform    TEXT NOT NULL CHECK (platform IN ('meta', 'google', 'tiktok')),
    metric_date DATE NOT NULL,
    campaign_id UUID,
    ad_set_id   UUID,
    ad_id       UUID,
    spend       NUMERIC(18, 4) NOT NULL DEFAULT 0,
    impressions BIGINT NOT NULL DEFAULT 0 CHECK (impressions >= 0),
    clicks      BIGINT NOT NULL DEFAULT 0 CHECK (clicks >= 0),
    conversions NUMERIC(18, 4) NOT NULL DEFAULT 0,
    currency    TEXT CHECK (currency ~ '^[A-Z]{3}$'),
    batch_id    UUID,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT daily_metrics_natural_key UNIQUE NULLS NOT DISTINCT
        (tenant_id, client_id, platform, metric_date, campaign_id, ad_set_id, ad_id),
    FOREIGN KEY (tenant_id, client_id) REFERENCES ad_clients (tenant_id, client_id),
    FOREIGN KEY (tenant_id, campaign_id) REFERENCES campaigns (tenant_id, id),
    FOREIGN KEY (tenant_id, ad_set_id) REFERENCES ad_sets (tenant_id, id),
    FOREIGN KEY (tenant_id, ad_id) REFERENCES ads (tenant_id, id),
    FOREIGN KEY (tenant_id, batch_id) REFERENCES import_batches (tenant_id, batch_id)
);
CREATE INDEX idx_daily_metrics_date ON daily_metrics (tenant_id, metric_date);
CREATE INDEX idx_daily_metrics_batch ON daily_metrics (tenant_id, batch_id);
