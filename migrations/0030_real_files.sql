-- Records imports take real files as people download them (issue 20, docs/decisions/0170–0176).
-- Append-only: once applied anywhere, this file never changes.
--
-- 1. Keys fold Unicode as the contracts do: NFKC, full case folding, upper case (Postgres 18's
--    builtin PG_UNICODE_FAST collation does full case mapping whatever the database's locale).
--    One SQL function per key, used by the generated columns AND by every statement that
--    computes the key from staged JSON, so the two can never disagree again (a case number
--    `ß-1` once keyed `SS1` in Python and `1` in SQL).
-- 2. Batches record how their file was read, take the decimal separator as an option, and
--    their processing options are part of the batch's key (a re-upload with other options is a
--    new batch, never the old one with the new options ignored).
-- 3. Ad metrics: campaigns, ad sets and ads keyed by name path when an export has no ids; a
--    metric the export lacks is NULL; Meta's results and result indicator; reports over a
--    period (no Day column) stored as periods.
-- 4. Row-error totals by severity, for `totalErrors` (errors) beside `totalWarnings`.

-- ── 1. Unicode keys ───────────────────────────────────────────────────────────────────────────
-- A text as compared: NFKC, full case folding, then upper case (`ß` → SS, `ﬃ` → FFI, `ı` → I,
-- `Ｃ` → C). The Python twin is shared/contracts/normalise.py `fold`.
CREATE FUNCTION records_fold(t text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT
    RETURN btrim(upper(casefold(normalize(t, NFKC) COLLATE pg_unicode_fast)));

-- A judgment's key: the folded case number's A–Z and 0–9 (`ＣＶ-１２` = `cv 12` = `CV12`).
CREATE FUNCTION records_case_key(t text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT
    RETURN regexp_replace(records_fold(t), '[^A-Z0-9]', '', 'g');

-- A plaintiff's key (DESIGN.md): name | address line 1 | ZIP, each folded.
CREATE FUNCTION plaintiff_dedupe_key(name text, address_line1 text, zip text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN md5(coalesce(records_fold(name), '') || '|' || coalesce(records_fold(address_line1), '')
               || '|' || coalesce(records_fold(zip), ''));

-- Stored rows whose new keys would collide are two records the old ASCII-only key kept apart
-- (`Café` and `CAFÉ`): refuse, with the way out, rather than merge them behind anyone's back.
DO $$
DECLARE judgments_clash bigint; plaintiffs_clash bigint;
BEGIN
    SELECT count(*) INTO judgments_clash FROM (
        SELECT 1 FROM judgments GROUP BY tenant_id, records_case_key(case_number)
        HAVING count(*) > 1) c;
    SELECT count(*) INTO plaintiffs_clash FROM (
        SELECT 1 FROM plaintiffs GROUP BY tenant_id, plaintiff_dedupe_key(name, address_line1, zip)
        HAVING count(*) > 1) c;
    IF judgments_clash > 0 OR plaintiffs_clash > 0 THEN
        RAISE EXCEPTION 'migration 0030: % judgment key(s) and % plaintiff key(s) would hold two '
            'stored records once keys fold Unicode case; merge them first (docs/operations.md, '
            '"Unicode keys: records that collide")', judgments_clash, plaintiffs_clash;
    END IF;
END $$;

ALTER TABLE judgments ALTER COLUMN case_number_normalized
    SET EXPRESSION AS (records_case_key(case_number));
ALTER TABLE plaintiffs ALTER COLUMN dedupe_key
    SET EXPRESSION AS (plaintiff_dedupe_key(name, address_line1, zip));

-- ── 2. batches: how the file was read, and its options ─────────────────────────────────────────
ALTER TABLE import_batches
    -- The upload's choice; NULL: detected from the file (docs/decisions/0172).
    ADD COLUMN decimal_separator      TEXT CHECK (decimal_separator IN ('.', ',')),
    -- What the worker read (NULL until it did).
    ADD COLUMN file_encoding          TEXT,
    ADD COLUMN file_delimiter         TEXT,
    ADD COLUMN decimal_separator_read TEXT,
    -- Export furniture (title lines aside): total and summary rows, notes, blank lines.
    ADD COLUMN rows_skipped           INTEGER NOT NULL DEFAULT 0 CHECK (rows_skipped >= 0),
    ADD COLUMN skipped_reasons        JSONB,
    -- Ad metrics: whether entities were keyed by the platform's ids, by name path, or both;
    -- and a report over a period: its first and last day (both NULL: "All time").
    ADD COLUMN entity_keys            TEXT CHECK (entity_keys IN ('ids', 'names', 'ids_and_names')),
    ADD COLUMN report_grain           TEXT CHECK (report_grain IN ('day', 'period', 'all_time')),
    ADD COLUMN report_period_start    DATE,
    ADD COLUMN report_period_end      DATE,
    ADD COLUMN options_key            TEXT GENERATED ALWAYS AS (
        error_threshold_percent::text || '|' || force_partial::text || '|'
        || COALESCE(decimal_separator, 'auto')) STORED;

ALTER TABLE import_batches DROP CONSTRAINT import_batches_file_key;
ALTER TABLE import_batches ADD CONSTRAINT import_batches_file_key
    UNIQUE NULLS NOT DISTINCT (tenant_id, contract, file_hash, platform, client_id, options_key);

-- ── 3. ad metrics ─────────────────────────────────────────────────────────────────────────────
-- An entity is known by the platform's id, or, when exports carry none, by its name path
-- (campaign / ad set / ad names, folded, as a SHA-256 the contract computes: names may be long).
-- path_lookup is that path prefixed like lookup_key, so it never matches across tenants,
-- platforms or clients. One name-only entity per path; an id seen later for the same path
-- attaches to it (docs/decisions/0173).
-- The (tenant, client, platform, external id) key with NULLS NOT DISTINCT would make every
-- name-only campaign of a client one row: lookup_key (unique, NULL without an id) is the key.
ALTER TABLE campaigns DROP CONSTRAINT campaigns_natural_key;
ALTER TABLE campaigns ALTER COLUMN external_id DROP NOT NULL,
    ALTER COLUMN lookup_key DROP NOT NULL,
    ADD COLUMN path_key TEXT CHECK (path_key ~ '^[0-9a-f]{64}$'),
    ADD CONSTRAINT campaigns_known_by CHECK (external_id IS NOT NULL OR path_key IS NOT NULL);
ALTER TABLE campaigns ADD COLUMN path_lookup TEXT GENERATED ALWAYS AS (
    tenant_id::text || '|' || platform || '|' || COALESCE(client_id::text, '') || '|' || path_key)
    STORED;
CREATE INDEX idx_campaigns_path ON campaigns (path_lookup);
CREATE UNIQUE INDEX idx_campaigns_path_only ON campaigns (path_lookup) WHERE external_id IS NULL;
-- The (tenant, client, platform, external id) key with NULLS NOT DISTINCT would make every
-- name-only ad set of a client one row: lookup_key (unique, NULL without an id) is the key.
ALTER TABLE ad_sets DROP CONSTRAINT ad_sets_natural_key;
ALTER TABLE ad_sets ALTER COLUMN external_id DROP NOT NULL,
    ALTER COLUMN lookup_key DROP NOT NULL,
    ADD COLUMN path_key TEXT CHECK (path_key ~ '^[0-9a-f]{64}$'),
    ADD CONSTRAINT ad_sets_known_by CHECK (external_id IS NOT NULL OR path_key IS NOT NULL);
ALTER TABLE ad_sets ADD COLUMN path_lookup TEXT GENERATED ALWAYS AS (
    tenant_id::text || '|' || platform || '|' || COALESCE(client_id::text, '') || '|' || path_key)
    STORED;
CREATE INDEX idx_ad_sets_path ON ad_sets (path_lookup);
CREATE UNIQUE INDEX idx_ad_sets_path_only ON ad_sets (path_lookup) WHERE external_id IS NULL;
-- The (tenant, client, platform, external id) key with NULLS NOT DISTINCT would make every
-- name-only ad of a client one row: lookup_key (unique, NULL without an id) is the key.
ALTER TABLE ads DROP CONSTRAINT ads_natural_key;
ALTER TABLE ads ALTER COLUMN external_id DROP NOT NULL,
    ALTER COLUMN lookup_key DROP NOT NULL,
    ADD COLUMN path_key TEXT CHECK (path_key ~ '^[0-9a-f]{64}$'),
    ADD CONSTRAINT ads_known_by CHECK (external_id IS NOT NULL OR path_key IS NOT NULL);
ALTER TABLE ads ADD COLUMN path_lookup TEXT GENERATED ALWAYS AS (
    tenant_id::text || '|' || platform || '|' || COALESCE(client_id::text, '') || '|' || path_key)
    STORED;
CREATE INDEX idx_ads_path ON ads (path_lookup);
CREATE UNIQUE INDEX idx_ads_path_only ON ads (path_lookup) WHERE external_id IS NULL;

-- A metric column the export does not have is NULL, not 0; Meta's results are kept with their
-- indicator, and count as conversions only for a conversion objective (docs/decisions/0174).
ALTER TABLE daily_metrics
    ALTER COLUMN impressions DROP NOT NULL, ALTER COLUMN impressions DROP DEFAULT,
    ALTER COLUMN clicks DROP NOT NULL, ALTER COLUMN clicks DROP DEFAULT,
    ALTER COLUMN conversions DROP NOT NULL, ALTER COLUMN conversions DROP DEFAULT,
    ADD COLUMN results NUMERIC(18, 4) CHECK (results >= 0),
    ADD COLUMN result_indicator TEXT CHECK (length(result_indicator) <= 200);

-- A report over a range of days without a Day column is a period, never a day: its figures
-- are stored for the period (both ends NULL: Google's "All time").
CREATE TABLE period_metrics (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id        UUID NOT NULL REFERENCES tenants(tenant_id),
    client_id        UUID,
    platform         TEXT NOT NULL CHECK (platform IN ('meta', 'google', 'tiktok')),
    period_start     DATE,
    period_end       DATE,
    campaign_id      UUID,
    ad_set_id        UUID,
    ad_id            UUID,
    spend            NUMERIC(18, 4) NOT NULL DEFAULT 0,
    impressions      BIGINT CHECK (impressions >= 0),
    clicks           BIGINT CHECK (clicks >= 0),
    conversions      NUMERIC(18, 4),
    results          NUMERIC(18, 4) CHECK (results >= 0),
    result_indicator TEXT CHECK (length(result_indicator) <= 200),
    currency         TEXT CHECK (currency ~ '^[A-Z]{3}$'),
    batch_id         UUID,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((period_start IS NULL) = (period_end IS NULL) AND period_start <= period_end),
    CONSTRAINT period_metrics_natural_key UNIQUE NULLS NOT DISTINCT
        (tenant_id, client_id, platform, period_start, period_end, campaign_id, ad_set_id, ad_id),
    FOREIGN KEY (tenant_id, client_id) REFERENCES ad_clients (tenant_id, client_id),
    FOREIGN KEY (tenant_id, campaign_id) REFERENCES campaigns (tenant_id, id),
    FOREIGN KEY (tenant_id, ad_set_id) REFERENCES ad_sets (tenant_id, id),
    FOREIGN KEY (tenant_id, ad_id) REFERENCES ads (tenant_id, id),
    FOREIGN KEY (tenant_id, batch_id) REFERENCES import_batches (tenant_id, batch_id)
);
CREATE INDEX idx_period_metrics_batch ON period_metrics (tenant_id, batch_id);
ALTER TABLE import_batches
    ADD COLUMN period_metrics_upserted INTEGER NOT NULL DEFAULT 0
        CHECK (period_metrics_upserted >= 0);

-- ── 4. error totals by severity ───────────────────────────────────────────────────────────────
-- {"critical": {code: n}, "warning": {code: n}}, taken with error_totals (0027) when a batch
-- finishes and cleared with it.
ALTER TABLE import_batches ADD COLUMN error_severity_totals JSONB;

CREATE FUNCTION import_batch_error_severity_totals(p_batch_id UUID) RETURNS JSONB AS $$
    SELECT jsonb_build_object(
        'critical', COALESCE(jsonb_object_agg(code, n) FILTER (WHERE severity = 'critical'), '{}'),
        'warning', COALESCE(jsonb_object_agg(code, n) FILTER (WHERE severity = 'warning'), '{}'))
    FROM (SELECT code, severity, count(*) AS n FROM import_row_errors
          WHERE batch_id = p_batch_id GROUP BY code, severity) c;
$$ LANGUAGE sql STABLE;

CREATE OR REPLACE FUNCTION keep_batch_error_totals() RETURNS trigger AS $$
BEGIN
    IF NEW.status IN ('completed', 'partial', 'failed') THEN
        IF OLD.status IS DISTINCT FROM NEW.status THEN
            NEW.error_totals := import_batch_error_totals(NEW.batch_id);
            NEW.error_severity_totals := import_batch_error_severity_totals(NEW.batch_id);
        END IF;
    ELSE
        NEW.error_totals := NULL;
        NEW.error_severity_totals := NULL;
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

UPDATE import_batches SET error_severity_totals = import_batch_error_severity_totals(batch_id)
WHERE error_totals IS NOT NULL;
