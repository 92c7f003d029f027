-- Promotion of an ad-metrics batch (worker/records/ad_promote.py, docs/decisions/0149, 0173–0175):
-- staged rows into campaigns → ad_sets → ads → daily_metrics | period_metrics (migrations/0021,
-- 0030), one group of staged rows at a time, every group inside the batch's one promotion
-- transaction. A group is the batch's non-duplicate staged rows with row_number in (after, upto].
-- Every query names the tenant; references resolve through (tenant, client, platform, id or name
-- path), a client-less upload finding the tenant's client-less rows.
-- References resolve through the dimensions' lookup_key (migrations/0021): "<tenant>|<platform>|
-- <client or empty>|" (the key_prefix the caller builds) followed by the external id, an
-- equality on a unique index of its own; a row without an id resolves through path_lookup, the
-- same prefix followed by the name path the contract hashed (migrations/0030). Joined on
-- (tenant_id, platform, external_id, client NOT DISTINCT) instead, the planner — whose
-- statistics describe other tenants, or none — took any index starting with tenant_id and
-- scanned the tenant's rows once per looked-up row.
-- worker/ledger/ad_events.py runs the dimension and daily statements over one event's row: their
-- `WITH grp AS (…)` opening and the `warned` part of upsert_daily_metrics keep their shape.

-- ── before the budget: what the whole staged file says (prepare) ─────────────────────────────
-- name: reject_repeats
-- Rows of one fact and one breakdown (the natural key: day or period, campaign, ad set, ad,
-- breakdown) cannot be told apart: every one of them is an error, none is promoted (never the
-- first one's spend for all of them). Counted as invalid with the budget, so run before it.
WITH repeated AS (
    SELECT row_number, data FROM (
        SELECT row_number, data, count(*) OVER (PARTITION BY natural_key) AS n
        FROM import_staged_rows
        WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate) w
    WHERE n > 1
), gone AS (
    DELETE FROM import_staged_rows s USING repeated r
    WHERE s.batch_id = %(batch_id)s AND s.row_number = r.row_number
    RETURNING s.row_number
)
INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity, message, raw)
SELECT %(tenant_id)s, %(batch_id)s, r.row_number, NULL, %(code)s, 'critical', %(message)s, r.data
FROM repeated r JOIN gone g USING (row_number);

-- name: reject_overflowing_facts
-- A fact whose slices sum beyond what a fact holds (NUMERIC(18,4), bigint): its rows are errors.
WITH facts AS (
    SELECT row_number, data,
           sum((data->>'spend')::numeric) OVER w AS spend,
           sum((data->>'impressions')::numeric) OVER w AS impressions,
           sum((data->>'clicks')::numeric) OVER w AS clicks,
           sum((data->>'conversions')::numeric) OVER w AS conversions,
           sum((data->>'results')::numeric) OVER w AS results
    FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
    WINDOW w AS (PARTITION BY split_part(natural_key, chr(30), 1))
), over AS (
    SELECT row_number, data FROM facts
    WHERE spend >= 1e13 OR impressions >= 9e18 OR clicks >= 9e18 OR conversions >= 1e13
       OR results >= 1e13
), gone AS (
    DELETE FROM import_staged_rows s USING over o
    WHERE s.batch_id = %(batch_id)s AND s.row_number = o.row_number
    RETURNING s.row_number
)
INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity, message, raw)
SELECT %(tenant_id)s, %(batch_id)s, o.row_number, 'spend', %(code)s, 'critical', %(message)s, o.data
FROM over o JOIN gone g USING (row_number);

-- name: merge_slices
-- Rows of one fact that differ in their breakdown (Age, Gender, Placement…) are slices of it:
-- the first row takes their sums and the others are set aside (is_duplicate, not counted as
-- duplicates), so promotion sees one row per fact whatever group the slices fell in. A metric
-- no slice has stays NULL; indicators that differ become "mixed". Run once, before the budget;
-- running it again finds one row per fact and changes nothing.
WITH slices AS (
    SELECT row_number, data,
           min(row_number) OVER w AS first, count(*) OVER w AS n
    FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
    WINDOW w AS (PARTITION BY split_part(natural_key, chr(30), 1))
), sums AS (
    SELECT first, count(*) AS n,
           sum((data->>'spend')::numeric) AS spend,
           sum((data->>'impressions')::numeric) AS impressions,
           sum((data->>'clicks')::numeric) AS clicks,
           sum((data->>'conversions')::numeric) AS conversions,
           sum((data->>'results')::numeric) AS results,
           CASE WHEN count(DISTINCT data->>'result_indicator') > 1 THEN 'mixed'
                ELSE min(data->>'result_indicator') END AS result_indicator
    FROM slices WHERE n > 1 GROUP BY first
), merged AS (
    UPDATE import_staged_rows s
    SET data = s.data || jsonb_build_object(
        'spend', m.spend::text, 'impressions', m.impressions, 'clicks', m.clicks,
        'conversions', m.conversions::text, 'results', m.results::text,
        'result_indicator', m.result_indicator, 'breakdown', NULL, 'slices', m.n)
    FROM sums m
    WHERE s.batch_id = %(batch_id)s AND s.row_number = m.first
    RETURNING 1
), aside AS (
    UPDATE import_staged_rows s SET is_duplicate = true
    FROM slices x
    WHERE s.batch_id = %(batch_id)s AND s.row_number = x.row_number AND x.n > 1
      AND x.row_number <> x.first
    RETURNING 1
)
SELECT (SELECT count(*) FROM merged) AS facts, (SELECT count(*) FROM aside) AS slices;

-- name: groups
-- The last row number of each group of %(group_rows)s staged rows, in order.
SELECT max(row_number) AS upto
FROM (SELECT row_number, (row_number() OVER (ORDER BY row_number) - 1) / %(group_rows)s AS g
      FROM import_staged_rows
      WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate) s
GROUP BY g ORDER BY g;

-- ── campaigns ────────────────────────────────────────────────────────────────────────────────
-- name: adopt_campaign_ids
-- An id seen later attaches to the entity the names made: a name-only campaign whose path a
-- row names together with an id no campaign has yet takes that id. Each id and each path once.
WITH grp AS (
    SELECT row_number, data FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (path_key) external_id, path_key FROM (
        SELECT DISTINCT ON (data->>'campaign_external_id')
               data->>'campaign_external_id' AS external_id, data->>'campaign_path' AS path_key
        FROM grp
        WHERE data->>'campaign_external_id' IS NOT NULL AND data->>'campaign_path' IS NOT NULL
        ORDER BY data->>'campaign_external_id', data->>'campaign_path') by_id
    ORDER BY path_key, external_id
), written AS (
    UPDATE campaigns c SET external_id = src.external_id, batch_id = %(batch_id)s::uuid,
           updated_at = now()
    FROM src
    WHERE c.path_lookup = %(key_prefix)s::text || src.path_key AND c.external_id IS NULL
      AND NOT EXISTS (SELECT 1 FROM campaigns x
                      WHERE x.lookup_key = %(key_prefix)s::text || src.external_id)
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- name: upsert_campaigns
-- A row naming its campaign by id: upserted on the id. De-duplicated first (ON CONFLICT DO
-- UPDATE cannot touch one key twice in a statement): per id the group's last row that names it
-- wins; a row without a name never erases a stored one. Only a campaign whose name or path
-- changes is written, and counted.
WITH grp AS (
    SELECT row_number, data FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (data->>'campaign_external_id')
           data->>'campaign_external_id' AS external_id, data->>'campaign_name' AS name,
           data->>'campaign_path' AS path_key
    FROM grp
    WHERE data->>'campaign_external_id' IS NOT NULL
    ORDER BY data->>'campaign_external_id', (data->>'campaign_name') IS NULL, row_number DESC
), written AS (
    INSERT INTO campaigns AS c (tenant_id, client_id, platform, external_id, name, path_key,
                                batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, external_id, name,
           path_key, %(batch_id)s::uuid
    FROM src
    ON CONFLICT ON CONSTRAINT campaigns_lookup_key DO UPDATE
    SET name = COALESCE(EXCLUDED.name, c.name), path_key = COALESCE(EXCLUDED.path_key, c.path_key),
        batch_id = EXCLUDED.batch_id, updated_at = now()
    WHERE (c.name, c.path_key) IS DISTINCT FROM (COALESCE(EXCLUDED.name, c.name),
                                                 COALESCE(EXCLUDED.path_key, c.path_key))
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- name: insert_named_campaigns
-- A row naming its campaign by name only: the campaign of that name path, made now (without an
-- id) when no campaign, with an id or not, has the path yet.
WITH grp AS (
    SELECT row_number, data FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (data->>'campaign_path')
           data->>'campaign_path' AS path_key, data->>'campaign_name' AS name
    FROM grp
    WHERE data->>'campaign_external_id' IS NULL AND data->>'campaign_path' IS NOT NULL
    ORDER BY data->>'campaign_path', row_number DESC
), written AS (
    INSERT INTO campaigns (tenant_id, client_id, platform, external_id, name, path_key, batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, NULL, name, path_key,
           %(batch_id)s::uuid
    FROM src
    WHERE NOT EXISTS (SELECT 1 FROM campaigns x
                      WHERE x.path_lookup = %(key_prefix)s::text || src.path_key)
    ON CONFLICT (path_lookup) WHERE external_id IS NULL DO NOTHING
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- ── ad sets ──────────────────────────────────────────────────────────────────────────────────
-- name: adopt_ad_set_ids
WITH grp AS (
    SELECT row_number, data FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (path_key) external_id, path_key FROM (
        SELECT DISTINCT ON (data->>'ad_set_external_id')
               data->>'ad_set_external_id' AS external_id, data->>'ad_set_path' AS path_key
        FROM grp
        WHERE data->>'ad_set_external_id' IS NOT NULL AND data->>'ad_set_path' IS NOT NULL
        ORDER BY data->>'ad_set_external_id', data->>'ad_set_path') by_id
    ORDER BY path_key, external_id
), written AS (
    UPDATE ad_sets a SET external_id = src.external_id, batch_id = %(batch_id)s::uuid,
           updated_at = now()
    FROM src
    WHERE a.path_lookup = %(key_prefix)s::text || src.path_key AND a.external_id IS NULL
      AND NOT EXISTS (SELECT 1 FROM ad_sets x
                      WHERE x.lookup_key = %(key_prefix)s::text || src.external_id)
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- name: upsert_ad_sets
-- An ad set is created or renamed by id only by a row that names it (id and name): a row with
-- only the id refers to an ad set that must already exist (else the warning below). Its
-- campaign resolves by id, else by name path (one campaign of that path, else none).
WITH grp AS (
    SELECT row_number, data FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (data->>'ad_set_external_id')
           data->>'ad_set_external_id' AS external_id, data->>'ad_set_name' AS name,
           data->>'ad_set_path' AS path_key, data->>'campaign_external_id' AS campaign_id_text,
           data->>'campaign_path' AS campaign_path
    FROM grp
    WHERE data->>'ad_set_external_id' IS NOT NULL AND data->>'ad_set_name' IS NOT NULL
    ORDER BY data->>'ad_set_external_id', row_number DESC
), written AS (
    INSERT INTO ad_sets AS a (tenant_id, client_id, platform, external_id, name, path_key,
                              campaign_id, batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, src.external_id,
           src.name, src.path_key, c.id, %(batch_id)s::uuid
    FROM src
    LEFT JOIN LATERAL (
        SELECT CASE WHEN src.campaign_id_text IS NOT NULL THEN
                    (SELECT id FROM campaigns
                     WHERE lookup_key = %(key_prefix)s::text || src.campaign_id_text)
               ELSE (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END FROM campaigns
                     WHERE path_lookup = %(key_prefix)s::text || src.campaign_path) END AS id
    ) c ON true
    ON CONFLICT ON CONSTRAINT ad_sets_lookup_key DO UPDATE
    SET name = EXCLUDED.name, path_key = COALESCE(EXCLUDED.path_key, a.path_key),
        campaign_id = COALESCE(EXCLUDED.campaign_id, a.campaign_id),
        batch_id = EXCLUDED.batch_id, updated_at = now()
    WHERE (a.name, a.path_key, a.campaign_id)
          IS DISTINCT FROM (EXCLUDED.name, COALESCE(EXCLUDED.path_key, a.path_key),
                            COALESCE(EXCLUDED.campaign_id, a.campaign_id))
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- name: insert_named_ad_sets
WITH grp AS (
    SELECT row_number, data FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (data->>'ad_set_path')
           data->>'ad_set_path' AS path_key, data->>'ad_set_name' AS name,
           data->>'campaign_external_id' AS campaign_id_text,
           data->>'campaign_path' AS campaign_path
    FROM grp
    WHERE data->>'ad_set_external_id' IS NULL AND data->>'ad_set_path' IS NOT NULL
    ORDER BY data->>'ad_set_path', row_number DESC
), written AS (
    INSERT INTO ad_sets (tenant_id, client_id, platform, external_id, name, path_key,
                         campaign_id, batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, NULL, src.name,
           src.path_key, c.id, %(batch_id)s::uuid
    FROM src
    LEFT JOIN LATERAL (
        SELECT CASE WHEN src.campaign_id_text IS NOT NULL THEN
                    (SELECT id FROM campaigns
                     WHERE lookup_key = %(key_prefix)s::text || src.campaign_id_text)
               ELSE (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END FROM campaigns
                     WHERE path_lookup = %(key_prefix)s::text || src.campaign_path) END AS id
    ) c ON true
    WHERE NOT EXISTS (SELECT 1 FROM ad_sets x
                      WHERE x.path_lookup = %(key_prefix)s::text || src.path_key)
    ON CONFLICT (path_lookup) WHERE external_id IS NULL DO NOTHING
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- ── ads ──────────────────────────────────────────────────────────────────────────────────────
-- name: adopt_ad_ids
WITH grp AS (
    SELECT row_number, data FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (path_key) external_id, path_key FROM (
        SELECT DISTINCT ON (data->>'ad_external_id')
               data->>'ad_external_id' AS external_id, data->>'ad_path' AS path_key
        FROM grp
        WHERE data->>'ad_external_id' IS NOT NULL AND data->>'ad_path' IS NOT NULL
        ORDER BY data->>'ad_external_id', data->>'ad_path') by_id
    ORDER BY path_key, external_id
), written AS (
    UPDATE ads a SET external_id = src.external_id, batch_id = %(batch_id)s::uuid,
           updated_at = now()
    FROM src
    WHERE a.path_lookup = %(key_prefix)s::text || src.path_key AND a.external_id IS NULL
      AND NOT EXISTS (SELECT 1 FROM ads x WHERE x.lookup_key = %(key_prefix)s::text || src.external_id)
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
           data->>'ad_path' AS path_key, data->>'campaign_external_id' AS campaign_id_text,
           data->>'campaign_path' AS campaign_path,
           data->>'ad_set_external_id' AS ad_set_id_text, data->>'ad_set_path' AS ad_set_path
    FROM grp
    WHERE data->>'ad_external_id' IS NOT NULL AND data->>'ad_name' IS NOT NULL
    ORDER BY data->>'ad_external_id', row_number DESC
), written AS (
    INSERT INTO ads AS a (tenant_id, client_id, platform, external_id, name, path_key,
                          campaign_id, ad_set_id, batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, src.external_id,
           src.name, src.path_key, c.id, s.id, %(batch_id)s::uuid
    FROM src
    LEFT JOIN LATERAL (
        SELECT CASE WHEN src.campaign_id_text IS NOT NULL THEN
                    (SELECT id FROM campaigns
                     WHERE lookup_key = %(key_prefix)s::text || src.campaign_id_text)
               ELSE (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END FROM campaigns
                     WHERE path_lookup = %(key_prefix)s::text || src.campaign_path) END AS id
    ) c ON true
    LEFT JOIN LATERAL (
        SELECT CASE WHEN src.ad_set_id_text IS NOT NULL THEN
                    (SELECT id FROM ad_sets
                     WHERE lookup_key = %(key_prefix)s::text || src.ad_set_id_text)
               ELSE (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END FROM ad_sets
                     WHERE path_lookup = %(key_prefix)s::text || src.ad_set_path) END AS id
    ) s ON true
    ON CONFLICT ON CONSTRAINT ads_lookup_key DO UPDATE
    SET name = EXCLUDED.name, path_key = COALESCE(EXCLUDED.path_key, a.path_key),
        campaign_id = COALESCE(EXCLUDED.campaign_id, a.campaign_id),
        ad_set_id = COALESCE(EXCLUDED.ad_set_id, a.ad_set_id), batch_id = EXCLUDED.batch_id,
        updated_at = now()
    WHERE (a.name, a.path_key, a.campaign_id, a.ad_set_id)
          IS DISTINCT FROM (EXCLUDED.name, COALESCE(EXCLUDED.path_key, a.path_key),
                            COALESCE(EXCLUDED.campaign_id, a.campaign_id),
                            COALESCE(EXCLUDED.ad_set_id, a.ad_set_id))
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- name: insert_named_ads
WITH grp AS (
    SELECT row_number, data FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (data->>'ad_path')
           data->>'ad_path' AS path_key, data->>'ad_name' AS name,
           data->>'campaign_external_id' AS campaign_id_text,
           data->>'campaign_path' AS campaign_path,
           data->>'ad_set_external_id' AS ad_set_id_text, data->>'ad_set_path' AS ad_set_path
    FROM grp
    WHERE data->>'ad_external_id' IS NULL AND data->>'ad_path' IS NOT NULL
    ORDER BY data->>'ad_path', row_number DESC
), written AS (
    INSERT INTO ads (tenant_id, client_id, platform, external_id, name, path_key, campaign_id,
                     ad_set_id, batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, NULL, src.name,
           src.path_key, c.id, s.id, %(batch_id)s::uuid
    FROM src
    LEFT JOIN LATERAL (
        SELECT CASE WHEN src.campaign_id_text IS NOT NULL THEN
                    (SELECT id FROM campaigns
                     WHERE lookup_key = %(key_prefix)s::text || src.campaign_id_text)
               ELSE (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END FROM campaigns
                     WHERE path_lookup = %(key_prefix)s::text || src.campaign_path) END AS id
    ) c ON true
    LEFT JOIN LATERAL (
        SELECT CASE WHEN src.ad_set_id_text IS NOT NULL THEN
                    (SELECT id FROM ad_sets
                     WHERE lookup_key = %(key_prefix)s::text || src.ad_set_id_text)
               ELSE (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END FROM ad_sets
                     WHERE path_lookup = %(key_prefix)s::text || src.ad_set_path) END AS id
    ) s ON true
    WHERE NOT EXISTS (SELECT 1 FROM ads x WHERE x.path_lookup = %(key_prefix)s::text || src.path_key)
    ON CONFLICT (path_lookup) WHERE external_id IS NULL DO NOTHING
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- ── facts ────────────────────────────────────────────────────────────────────────────────────
-- name: upsert_daily_metrics
-- The group's day rows with their references resolved: by id through lookup_key, else by name
-- path through path_lookup (one entity of that path; several with ids: ambiguous). A row naming
-- an ad set or ad by id that nothing created keeps its fact with a NULL reference and gets a
-- warning (spec §6.1 "FK not found"); a row whose name is ambiguous, or whose references
-- resolve to a fact another row of the group already gives, is an error and not promoted (a
-- file's slices were merged before, so two rows of one fact are never a breakdown). Only a
-- fact whose figures change is written; xmax = 0 marks an insert. A metric the export lacks
-- stays NULL.
WITH grp AS (
    SELECT row_number, data FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), looked AS (
    SELECT g.row_number, (g.data->>'metric_date')::date AS metric_date,
           c.id AS campaign_id, s.id AS ad_set_id, a.id AS ad_id, g.data,
           (g.data->>'campaign_external_id' IS NULL AND g.data->>'campaign_path' IS NOT NULL
            AND c.id IS NULL)
           OR (g.data->>'ad_set_external_id' IS NULL AND g.data->>'ad_set_path' IS NOT NULL
               AND s.id IS NULL)
           OR (g.data->>'ad_external_id' IS NULL AND g.data->>'ad_path' IS NOT NULL
               AND a.id IS NULL) AS ambiguous,
           row_number() OVER (PARTITION BY (g.data->>'metric_date')::date, c.id, s.id, a.id
                              ORDER BY g.row_number) AS nth
    FROM grp g
    LEFT JOIN LATERAL (
        SELECT CASE WHEN g.data->>'campaign_external_id' IS NOT NULL THEN
                    (SELECT id FROM campaigns
                     WHERE lookup_key = %(key_prefix)s::text || (g.data->>'campaign_external_id'))
               WHEN g.data->>'campaign_path' IS NOT NULL THEN
                    (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END FROM campaigns
                     WHERE path_lookup = %(key_prefix)s::text || (g.data->>'campaign_path'))
               END AS id
    ) c ON true
    LEFT JOIN LATERAL (
        SELECT CASE WHEN g.data->>'ad_set_external_id' IS NOT NULL THEN
                    (SELECT id FROM ad_sets
                     WHERE lookup_key = %(key_prefix)s::text || (g.data->>'ad_set_external_id'))
               WHEN g.data->>'ad_set_path' IS NOT NULL THEN
                    (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END FROM ad_sets
                     WHERE path_lookup = %(key_prefix)s::text || (g.data->>'ad_set_path'))
               END AS id
    ) s ON true
    LEFT JOIN LATERAL (
        SELECT CASE WHEN g.data->>'ad_external_id' IS NOT NULL THEN
                    (SELECT id FROM ads
                     WHERE lookup_key = %(key_prefix)s::text || (g.data->>'ad_external_id'))
               WHEN g.data->>'ad_path' IS NOT NULL THEN
                    (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END FROM ads
                     WHERE path_lookup = %(key_prefix)s::text || (g.data->>'ad_path'))
               END AS id
    ) a ON true
    WHERE COALESCE(g.data->>'grain', 'day') = 'day'
), warned AS (
    INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity,
                                   message, raw)
    SELECT %(tenant_id)s, %(batch_id)s, l.row_number, x.field, x.code, x.severity, x.message,
           l.data
    FROM looked l
    CROSS JOIN LATERAL (VALUES
        ('ad_set_external_id', %(ad_set_code)s::text, 'warning', %(ad_set_message)s::text,
         l.data->>'ad_set_external_id' IS NOT NULL AND l.ad_set_id IS NULL),
        ('ad_external_id', %(ad_code)s::text, 'warning', %(ad_message)s::text,
         l.data->>'ad_external_id' IS NOT NULL AND l.ad_id IS NULL),
        (NULL, %(ambiguous_code)s::text, 'critical', %(ambiguous_message)s::text, l.ambiguous),
        (NULL, %(repeated_code)s::text, 'critical', %(repeated_message)s::text,
         NOT l.ambiguous AND l.nth > 1))
        AS x(field, code, severity, message, missing)
    WHERE x.missing
    RETURNING severity
), resolved AS (
    SELECT * FROM looked WHERE NOT ambiguous AND nth = 1
), written AS (
    INSERT INTO daily_metrics AS m (tenant_id, client_id, platform, metric_date, campaign_id,
                                    ad_set_id, ad_id, spend, impressions, clicks, conversions,
                                    results, result_indicator, currency, batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, metric_date,
           campaign_id, ad_set_id, ad_id, COALESCE((data->>'spend')::numeric, 0),
           (data->>'impressions')::bigint, (data->>'clicks')::bigint,
           (data->>'conversions')::numeric, (data->>'results')::numeric,
           data->>'result_indicator', data->>'currency', %(batch_id)s::uuid
    FROM resolved
    ON CONFLICT ON CONSTRAINT daily_metrics_natural_key DO UPDATE
    SET spend = EXCLUDED.spend, impressions = EXCLUDED.impressions, clicks = EXCLUDED.clicks,
        conversions = EXCLUDED.conversions, results = EXCLUDED.results,
        result_indicator = EXCLUDED.result_indicator, currency = EXCLUDED.currency,
        batch_id = EXCLUDED.batch_id, updated_at = now()
    WHERE (m.spend, m.impressions, m.clicks, m.conversions, m.results, m.result_indicator,
           m.currency)
          IS DISTINCT FROM (EXCLUDED.spend, EXCLUDED.impressions, EXCLUDED.clicks,
                            EXCLUDED.conversions, EXCLUDED.results, EXCLUDED.result_indicator,
                            EXCLUDED.currency)
    RETURNING (xmax = 0) AS inserted
)
SELECT (SELECT count(*) FROM resolved) AS distinct_rows,
       count(*) FILTER (WHERE inserted) AS inserted,
       count(*) FILTER (WHERE NOT inserted) AS updated,
       (SELECT count(*) FROM looked WHERE ambiguous OR nth > 1) AS rejected
FROM written;

-- name: upsert_period_metrics
-- The group's rows of a period (a report without a Day column): as upsert_daily_metrics, keyed
-- by the period's first and last day (both NULL: "All time").
WITH grp AS (
    SELECT row_number, data FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), looked AS (
    SELECT g.row_number, (g.data->>'period_start')::date AS period_start,
           (g.data->>'period_end')::date AS period_end,
           c.id AS campaign_id, s.id AS ad_set_id, a.id AS ad_id, g.data,
           (g.data->>'campaign_external_id' IS NULL AND g.data->>'campaign_path' IS NOT NULL
            AND c.id IS NULL)
           OR (g.data->>'ad_set_external_id' IS NULL AND g.data->>'ad_set_path' IS NOT NULL
               AND s.id IS NULL)
           OR (g.data->>'ad_external_id' IS NULL AND g.data->>'ad_path' IS NOT NULL
               AND a.id IS NULL) AS ambiguous,
           row_number() OVER (PARTITION BY (g.data->>'period_start')::date,
                                           (g.data->>'period_end')::date, c.id, s.id, a.id
                              ORDER BY g.row_number) AS nth
    FROM grp g
    LEFT JOIN LATERAL (
        SELECT CASE WHEN g.data->>'campaign_external_id' IS NOT NULL THEN
                    (SELECT id FROM campaigns
                     WHERE lookup_key = %(key_prefix)s::text || (g.data->>'campaign_external_id'))
               WHEN g.data->>'campaign_path' IS NOT NULL THEN
                    (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END FROM campaigns
                     WHERE path_lookup = %(key_prefix)s::text || (g.data->>'campaign_path'))
               END AS id
    ) c ON true
    LEFT JOIN LATERAL (
        SELECT CASE WHEN g.data->>'ad_set_external_id' IS NOT NULL THEN
                    (SELECT id FROM ad_sets
                     WHERE lookup_key = %(key_prefix)s::text || (g.data->>'ad_set_external_id'))
               WHEN g.data->>'ad_set_path' IS NOT NULL THEN
                    (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END FROM ad_sets
                     WHERE path_lookup = %(key_prefix)s::text || (g.data->>'ad_set_path'))
               END AS id
    ) s ON true
    LEFT JOIN LATERAL (
        SELECT CASE WHEN g.data->>'ad_external_id' IS NOT NULL THEN
                    (SELECT id FROM ads
                     WHERE lookup_key = %(key_prefix)s::text || (g.data->>'ad_external_id'))
               WHEN g.data->>'ad_path' IS NOT NULL THEN
                    (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END FROM ads
                     WHERE path_lookup = %(key_prefix)s::text || (g.data->>'ad_path'))
               END AS id
    ) a ON true
    WHERE g.data->>'grain' IN ('period', 'all_time')
), warned AS (
    INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity,
                                   message, raw)
    SELECT %(tenant_id)s, %(batch_id)s, l.row_number, x.field, x.code, x.severity, x.message,
           l.data
    FROM looked l
    CROSS JOIN LATERAL (VALUES
        ('ad_set_external_id', %(ad_set_code)s::text, 'warning', %(ad_set_message)s::text,
         l.data->>'ad_set_external_id' IS NOT NULL AND l.ad_set_id IS NULL),
        ('ad_external_id', %(ad_code)s::text, 'warning', %(ad_message)s::text,
         l.data->>'ad_external_id' IS NOT NULL AND l.ad_id IS NULL),
        (NULL, %(ambiguous_code)s::text, 'critical', %(ambiguous_message)s::text, l.ambiguous),
        (NULL, %(repeated_code)s::text, 'critical', %(repeated_message)s::text,
         NOT l.ambiguous AND l.nth > 1))
        AS x(field, code, severity, message, missing)
    WHERE x.missing
    RETURNING severity
), resolved AS (
    SELECT * FROM looked WHERE NOT ambiguous AND nth = 1
), written AS (
    INSERT INTO period_metrics AS m (tenant_id, client_id, platform, period_start, period_end,
                                     campaign_id, ad_set_id, ad_id, spend, impressions, clicks,
                                     conversions, results, result_indicator, currency, batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, period_start,
           period_end, campaign_id, ad_set_id, ad_id, COALESCE((data->>'spend')::numeric, 0),
           (data->>'impressions')::bigint, (data->>'clicks')::bigint,
           (data->>'conversions')::numeric, (data->>'results')::numeric,
           data->>'result_indicator', data->>'currency', %(batch_id)s::uuid
    FROM resolved
    ON CONFLICT ON CONSTRAINT period_metrics_natural_key DO UPDATE
    SET spend = EXCLUDED.spend, impressions = EXCLUDED.impressions, clicks = EXCLUDED.clicks,
        conversions = EXCLUDED.conversions, results = EXCLUDED.results,
        result_indicator = EXCLUDED.result_indicator, currency = EXCLUDED.currency,
        batch_id = EXCLUDED.batch_id, updated_at = now()
    WHERE (m.spend, m.impressions, m.clicks, m.conversions, m.results, m.result_indicator,
           m.currency)
          IS DISTINCT FROM (EXCLUDED.spend, EXCLUDED.impressions, EXCLUDED.clicks,
                            EXCLUDED.conversions, EXCLUDED.results, EXCLUDED.result_indicator,
                            EXCLUDED.currency)
    RETURNING (xmax = 0) AS inserted
)
SELECT (SELECT count(*) FROM resolved) AS distinct_rows,
       count(*) FILTER (WHERE inserted) AS inserted,
       count(*) FILTER (WHERE NOT inserted) AS updated,
       (SELECT count(*) FROM looked WHERE ambiguous OR nth > 1) AS rejected
FROM written;

-- name: affected_dates
-- The days the batch's promoted day rows carry: the event's affected_dates.
SELECT COALESCE(array_agg(DISTINCT (data->>'metric_date')::date
                          ORDER BY (data->>'metric_date')::date), '{}') AS dates
FROM import_staged_rows
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
  AND data->>'metric_date' IS NOT NULL;

-- name: finish_batch
-- completed_at is the commit's time (the caller reads clock_timestamp() last thing before it
-- commits), not the transaction's start: a long promotion ends when it ends.
UPDATE import_batches
SET status = %(status)s, rows_inserted = %(inserted)s, rows_updated = %(updated)s,
    rows_unchanged = %(unchanged)s, campaigns_upserted = %(campaigns)s,
    ad_sets_upserted = %(ad_sets)s, ads_upserted = %(ads)s,
    daily_metrics_upserted = %(daily_metrics)s, period_metrics_upserted = %(period_metrics)s,
    affected_dates = %(dates)s, db_duration_ms = %(db_ms)s,
    parse_duration_ms = COALESCE(parse_duration_ms, 0),
    completed_at = %(finished_at)s, updated_at = %(finished_at)s
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND status = 'promoting';
