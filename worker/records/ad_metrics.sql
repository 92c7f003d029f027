-- Promotion of an ad-metrics batch (worker/records/ad_promote.py, docs/decisions/0149): staged
-- rows into campaigns → ad_sets → ads → daily_metrics (migrations/0021_ad_metrics.sql), one
-- group of staged rows at a time, every group inside the batch's one promotion transaction.
-- A group is the batch's non-duplicate staged rows with row_number in (after, upto]. Every
-- query names the tenant; references resolve through (tenant, client, platform, external id),
-- a client-less upload finding the tenant's client-less rows.
-- References resolve through the dimensions' lookup_key (migrations/0021): "<tenant>|<platform>|
-- <client or empty>|" (the key_prefix the caller builds) followed by the external id, an
-- equality on a unique index of its own. Joined on (tenant_id, platform, external_id, client NOT
-- DISTINCT) instead, the planner — whose statistics describe other tenants, or none — took any
-- index starting with tenant_id and scanned the tenant's rows once per looked-up row.

-- name: groups
-- The last row number of each group of %(group_rows)s staged rows, in order.
SELECT max(row_number) AS upto
FROM (SELECT row_number, (row_number() OVER (ORDER BY row_number) - 1) / %(group_rows)s AS g
      FROM import_staged_rows
      WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate) s
GROUP BY g ORDER BY g;

-- name: upsert_campaigns
-- Every row names its campaign (campaign_external_id is required), so every campaign is
-- upserted. De-duplicated first (ON CONFLICT DO UPDATE cannot touch one key twice in a
-- statement): per external id the group's last row that names it wins; a row without a name
-- never erases a stored one. Only a row whose name changes is written, and counted.
WITH grp AS (
    SELECT row_number, data FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (data->>'campaign_external_id')
           data->>'campaign_external_id' AS external_id, data->>'campaign_name' AS name
    FROM grp
    ORDER BY data->>'campaign_external_id', (data->>'campaign_name') IS NULL, row_number DESC
), written AS (
    INSERT INTO campaigns AS c (tenant_id, client_id, platform, external_id, name, batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, external_id, name,
           %(batch_id)s::uuid
    FROM src
    ON CONFLICT ON CONSTRAINT campaigns_natural_key DO UPDATE
    SET name = COALESCE(EXCLUDED.name, c.name), batch_id = EXCLUDED.batch_id, updated_at = now()
    WHERE c.name IS DISTINCT FROM COALESCE(EXCLUDED.name, c.name)
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- name: upsert_ad_sets
-- An ad set is created or renamed only by a row that names it (id and name): a row with only
-- the id refers to an ad set that must already exist (else the warning below).
WITH grp AS (
    SELECT row_number, data FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (data->>'ad_set_external_id')
           data->>'ad_set_external_id' AS external_id, data->>'ad_set_name' AS name,
           data->>'campaign_external_id' AS campaign_external_id
    FROM grp
    WHERE data->>'ad_set_external_id' IS NOT NULL AND data->>'ad_set_name' IS NOT NULL
    ORDER BY data->>'ad_set_external_id', row_number DESC
), written AS (
    INSERT INTO ad_sets AS a (tenant_id, client_id, platform, external_id, name, campaign_id,
                              batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, src.external_id,
           src.name, c.id, %(batch_id)s::uuid
    FROM src
    LEFT JOIN campaigns c ON c.lookup_key = %(key_prefix)s::text || src.campaign_external_id
    ON CONFLICT ON CONSTRAINT ad_sets_natural_key DO UPDATE
    SET name = EXCLUDED.name, campaign_id = COALESCE(EXCLUDED.campaign_id, a.campaign_id),
        batch_id = EXCLUDED.batch_id, updated_at = now()
    WHERE (a.name, a.campaign_id)
          IS DISTINCT FROM (EXCLUDED.name, COALESCE(EXCLUDED.campaign_id, a.campaign_id))
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- name: upsert_ads
WITH grp AS (
    SELECT row_number, data FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (data->>'ad_external_id')
           data->>'ad_external_id' AS external_id, data->>'ad_name' AS name,
           data->>'campaign_external_id' AS campaign_external_id,
           data->>'ad_set_external_id' AS ad_set_external_id
    FROM grp
    WHERE data->>'ad_external_id' IS NOT NULL AND data->>'ad_name' IS NOT NULL
    ORDER BY data->>'ad_external_id', row_number DESC
), written AS (
    INSERT INTO ads AS a (tenant_id, client_id, platform, external_id, name, campaign_id,
                          ad_set_id, batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, src.external_id,
           src.name, c.id, s.id, %(batch_id)s::uuid
    FROM src
    LEFT JOIN campaigns c ON c.lookup_key = %(key_prefix)s::text || src.campaign_external_id
    LEFT JOIN ad_sets s ON s.lookup_key = %(key_prefix)s::text || src.ad_set_external_id
    ON CONFLICT ON CONSTRAINT ads_natural_key DO UPDATE
    SET name = EXCLUDED.name, campaign_id = COALESCE(EXCLUDED.campaign_id, a.campaign_id),
        ad_set_id = COALESCE(EXCLUDED.ad_set_id, a.ad_set_id), batch_id = EXCLUDED.batch_id,
        updated_at = now()
    WHERE (a.name, a.campaign_id, a.ad_set_id)
          IS DISTINCT FROM (EXCLUDED.name, COALESCE(EXCLUDED.campaign_id, a.campaign_id),
                            COALESCE(EXCLUDED.ad_set_id, a.ad_set_id))
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- name: upsert_daily_metrics
-- Facts with their references resolved through the dimensions' lookup keys. A row naming an ad
-- set or ad by id that neither it nor anything before created keeps its fact with a NULL
-- reference, and the row gets a warning (spec §6.1 "FK not found"), in the same statement.
-- Two rows that resolve to one key (e.g. two unknown ads of one ad set on one day) would hit
-- one key twice: the first row of the group wins. Only a fact whose figures change is
-- written; xmax = 0 marks an insert.
WITH grp AS (
    SELECT row_number, data FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), looked AS (
    SELECT g.row_number, (g.data->>'metric_date')::date AS metric_date,
           c.id AS campaign_id, s.id AS ad_set_id, a.id AS ad_id, g.data
    FROM grp g
    LEFT JOIN campaigns c ON c.lookup_key = %(key_prefix)s::text || (g.data->>'campaign_external_id')
    LEFT JOIN ad_sets s ON s.lookup_key = %(key_prefix)s::text || (g.data->>'ad_set_external_id')
    LEFT JOIN ads a ON a.lookup_key = %(key_prefix)s::text || (g.data->>'ad_external_id')
), warned AS (
    INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity,
                                   message, raw)
    SELECT %(tenant_id)s, %(batch_id)s, l.row_number, x.field, x.code, 'warning', x.message,
           l.data
    FROM looked l
    CROSS JOIN LATERAL (VALUES
        ('ad_set_external_id', %(ad_set_code)s::text, %(ad_set_message)s::text,
         l.data->>'ad_set_external_id' IS NOT NULL AND l.ad_set_id IS NULL),
        ('ad_external_id', %(ad_code)s::text, %(ad_message)s::text,
         l.data->>'ad_external_id' IS NOT NULL AND l.ad_id IS NULL))
        AS x(field, code, message, missing)
    WHERE x.missing
), resolved AS (
    SELECT DISTINCT ON (metric_date, campaign_id, ad_set_id, ad_id) *
    FROM looked
    ORDER BY metric_date, campaign_id, ad_set_id, ad_id, row_number
), written AS (
    INSERT INTO daily_metrics AS m (tenant_id, client_id, platform, metric_date, campaign_id,
                                    ad_set_id, ad_id, spend, impressions, clicks, conversions,
                                    currency, batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, metric_date,
           campaign_id, ad_set_id, ad_id, COALESCE((data->>'spend')::numeric, 0),
           COALESCE((data->>'impressions')::bigint, 0), COALESCE((data->>'clicks')::bigint, 0),
           COALESCE((data->>'conversions')::numeric, 0), data->>'currency', %(batch_id)s::uuid
    FROM resolved
    ON CONFLICT ON CONSTRAINT daily_metrics_natural_key DO UPDATE
    SET spend = EXCLUDED.spend, impressions = EXCLUDED.impressions, clicks = EXCLUDED.clicks,
        conversions = EXCLUDED.conversions, currency = EXCLUDED.currency,
        batch_id = EXCLUDED.batch_id, updated_at = now()
    WHERE (m.spend, m.impressions, m.clicks, m.conversions, m.currency)
          IS DISTINCT FROM (EXCLUDED.spend, EXCLUDED.impressions, EXCLUDED.clicks,
                            EXCLUDED.conversions, EXCLUDED.currency)
    RETURNING (xmax = 0) AS inserted
)
SELECT (SELECT count(*) FROM resolved) AS distinct_rows,
       count(*) FILTER (WHERE inserted) AS inserted,
       count(*) FILTER (WHERE NOT inserted) AS updated
FROM written;

-- name: affected_dates
-- The days the batch's promoted rows carry: the event's affected_dates.
SELECT COALESCE(array_agg(DISTINCT (data->>'metric_date')::date ORDER BY (data->>'metric_date')::date),
                '{}') AS dates
FROM import_staged_rows
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate;

-- name: finish_batch
UPDATE import_batches
SET status = %(status)s, rows_inserted = %(inserted)s, rows_updated = %(updated)s,
    rows_unchanged = %(unchanged)s, campaigns_upserted = %(campaigns)s,
    ad_sets_upserted = %(ad_sets)s, ads_upserted = %(ads)s,
    daily_metrics_upserted = %(daily_metrics)s, affected_dates = %(dates)s,
    db_duration_ms = %(db_ms)s, parse_duration_ms = COALESCE(parse_duration_ms, 0),
    completed_at = now(), updated_at = now()
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND status = 'promoting';
