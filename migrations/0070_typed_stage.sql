-- Typed staging (issue 31, docs/decisions/0272): each contract's valid rows are staged into a
-- table of typed columns of its own, by binary COPY from the columns the worker validated
-- (worker/records/stage.py), instead of one JSON document per row that promotion cast back.
--
-- The three tables inherit import_staged_rows, which keeps what every contract's stage shares
-- (batch, row number, tenant, natural key, duplicate and amends flags, created_at): what works
-- on any batch — the resume check, removing rows past the counter, a retry starting over,
-- retention — still names import_staged_rows and reaches every contract's rows; what knows the
-- contract names its table. A row staged as JSON before this migration (a batch still
-- processing during the upgrade) stays in import_staged_rows itself: its resume check finds
-- its rows missing from the typed table's view of the batch and restages it from row 1.
-- Append-only: once applied anywhere, this file never changes.

ALTER TABLE import_staged_rows ALTER COLUMN data DROP NOT NULL;

-- Values as a contract gives them: text unbounded and numbers unconstrained, so that a value
-- the production table refuses is found (and becomes that row's error) at promotion, not a
-- failed COPY of its whole chunk (docs/decisions/0186).
CREATE UNLOGGED TABLE import_staged_judgments (
    case_number    TEXT NOT NULL,
    plaintiff_name TEXT NOT NULL,
    defendant_name TEXT NOT NULL,
    amount         NUMERIC NOT NULL,
    filed_date     DATE NOT NULL,
    court          TEXT,
    county         TEXT,
    PRIMARY KEY (batch_id, row_number),
    FOREIGN KEY (tenant_id, batch_id) REFERENCES import_batches (tenant_id, batch_id)
        ON DELETE CASCADE
) INHERITS (import_staged_rows);
ALTER TABLE import_staged_judgments ALTER COLUMN entity_type SET DEFAULT 'judgment';
CREATE INDEX idx_import_staged_judgments_amends ON import_staged_judgments (batch_id, row_number)
    WHERE amends;

CREATE UNLOGGED TABLE import_staged_plaintiffs (
    case_number   TEXT NOT NULL,
    name          TEXT NOT NULL,
    address_line1 TEXT,
    city          TEXT,
    state         TEXT,
    zip           TEXT,
    phone         TEXT,
    email         TEXT,
    contact_name  TEXT,
    status        TEXT,
    PRIMARY KEY (batch_id, row_number),
    FOREIGN KEY (tenant_id, batch_id) REFERENCES import_batches (tenant_id, batch_id)
        ON DELETE CASCADE
) INHERITS (import_staged_rows);
ALTER TABLE import_staged_plaintiffs ALTER COLUMN entity_type SET DEFAULT 'plaintiff';
CREATE INDEX idx_import_staged_plaintiffs_amends ON import_staged_plaintiffs (batch_id, row_number)
    WHERE amends;

-- An ad-metrics row: its entities (ids, names, hashed name paths), its day or period, figures
-- and the breakdown that makes it a slice (slices: how many were summed into it).
CREATE UNLOGGED TABLE import_staged_ad_metrics (
    campaign_external_id TEXT,
    campaign_name        TEXT,
    ad_set_external_id   TEXT,
    ad_set_name          TEXT,
    ad_external_id       TEXT,
    ad_name              TEXT,
    campaign_path        TEXT,
    ad_set_path          TEXT,
    ad_path              TEXT,
    grain                TEXT,
    metric_date          DATE,
    period_start         DATE,
    period_end           DATE,
    spend                NUMERIC,
    impressions          BIGINT,
    clicks               BIGINT,
    conversions          NUMERIC,
    results              NUMERIC,
    result_indicator     TEXT,
    currency             TEXT,
    breakdown            TEXT,
    slices               INTEGER,
    PRIMARY KEY (batch_id, row_number),
    FOREIGN KEY (tenant_id, batch_id) REFERENCES import_batches (tenant_id, batch_id)
        ON DELETE CASCADE
) INHERITS (import_staged_rows);
ALTER TABLE import_staged_ad_metrics ALTER COLUMN entity_type SET DEFAULT 'daily_metric';

-- A typed staged row as evidence beside a row error promotion writes (a duplicate, a refused
-- row, a repeated fact): its values, without the stage's bookkeeping.
CREATE FUNCTION staged_values(row_json jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN row_json - ARRAY['batch_id', 'tenant_id', 'row_number', 'natural_key',
                            'natural_key_hash', 'data', 'validation_errors', 'entity_type',
                            'is_duplicate', 'amends', 'created_at'];

-- The spec's staging_rows view (docs/decisions/0148) over the typed tables: a staged row's
-- values and its warnings (from import_row_errors, where the worker writes them).
CREATE OR REPLACE VIEW staging_rows AS
SELECT s.batch_id AS upload_id, s.tenant_id AS workspace_id, s.row_number - 1 AS row_index,
       s.entity_type, s.natural_key_hash, s.data AS raw_data, 'valid'::text AS validation_status,
       s.validation_errors, s.created_at
FROM ONLY import_staged_rows s
UNION ALL
SELECT s.batch_id, s.tenant_id, s.row_number - 1, s.entity_type, s.natural_key_hash,
       staged_values(to_jsonb(s)), 'valid', (
           SELECT jsonb_agg(jsonb_build_object('field', e.field, 'code', e.code,
                                               'severity', e.severity, 'message', e.message)
                            ORDER BY e.id)
           FROM import_row_errors e
           WHERE e.batch_id = s.batch_id AND e.row_number = s.row_number), s.created_at
FROM import_staged_judgments s
UNION ALL
SELECT s.batch_id, s.tenant_id, s.row_number - 1, s.entity_type, s.natural_key_hash,
       staged_values(to_jsonb(s)), 'valid', (
           SELECT jsonb_agg(jsonb_build_object('field', e.field, 'code', e.code,
                                               'severity', e.severity, 'message', e.message)
                            ORDER BY e.id)
           FROM import_row_errors e
           WHERE e.batch_id = s.batch_id AND e.row_number = s.row_number), s.created_at
FROM import_staged_plaintiffs s
UNION ALL
SELECT s.batch_id, s.tenant_id, s.row_number - 1, s.entity_type, s.natural_key_hash,
       staged_values(to_jsonb(s)), 'valid', (
           SELECT jsonb_agg(jsonb_build_object('field', e.field, 'code', e.code,
                                               'severity', e.severity, 'message', e.message)
                            ORDER BY e.id)
           FROM import_row_errors e
           WHERE e.batch_id = s.batch_id AND e.row_number = s.row_number), s.created_at
FROM import_staged_ad_metrics s
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
