-- Promotion of an ad-metrics batch (worker/records/ad_promote.py, docs/decisions/0149, 0173–0175):
-- staged rows into campaigns → ad_sets → ads → daily_metrics | period_metrics (migrations/0021,
-- 0030), inside the batch's one promotion transaction: the dimension statements once over the
-- whole batch (after 0, upto its last row), the facts one group of staged rows at a time
-- (docs/decisions/0274). A group is the batch's non-duplicate staged rows with row_number in
-- (after, upto].
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
-- name: facts_to_prepare
-- Whether prepare has anything to do: a fact of several rows (a repeat or slices: a repeat
-- shares its natural key, so its fact too) or whose figures no fact holds. A daily export has
-- one row per fact, so one aggregate over the batch answers "nothing" instead of the three
-- window passes below (docs/decisions/0510). Same filter and partition as those passes.
SELECT EXISTS (
    SELECT 1 FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
    GROUP BY split_part(natural_key, chr(30), 1)
    HAVING count(*) > 1 OR ad_fact_overflows(sum(spend), sum(impressions), sum(clicks),
                                             sum(conversions), sum(results))) AS found;

-- name: repeated_facts
-- Rows of one fact and one breakdown (the natural key: day or period, campaign, ad set, ad,
-- breakdown) cannot be told apart: every one of them is an error, none is promoted (never the
-- first one's spend for all of them). Counted as invalid with the budget, so run before it.
-- One window over the batch; the worker rejects the rows it returns (reject_rows). Joined to
-- the stage in the same statement instead, a stage whose statistics had not met the batch was
-- read once per repeated row (issue 21, docs/decisions/0187).
SELECT row_number FROM (
    SELECT row_number, count(*) OVER (PARTITION BY natural_key) AS n
    FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate) w
WHERE n > 1;

-- name: overflowing_facts
-- A fact whose slices sum beyond what a fact holds (ad_fact_overflows, migrations/0290): its
-- rows are errors (reject_rows, field spend).
SELECT row_number FROM (
    SELECT row_number,
           sum(spend) OVER w AS spend,
           sum(impressions) OVER w AS impressions,
           sum(clicks) OVER w AS clicks,
           sum(conversions) OVER w AS conversions,
           sum(results) OVER w AS results
    FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
    WINDOW w AS (PARTITION BY split_part(natural_key, chr(30), 1))) facts
WHERE ad_fact_overflows(spend, impressions, clicks, conversions, results);

-- name: reject_rows
-- The rows found above leave the stage and become critical errors with their values. Each row
-- of the list the worker passes is looked up by primary key (LATERAL … OFFSET 0: a nested loop
-- over the list, by shape), and the rows found are deleted by their ctid (a TID scan). Joined
-- to the stage by row_number instead, a stage without statistics ("the batch is one row") read
-- the whole list once per staged row (docs/decisions/0187).
WITH gone AS (
    DELETE FROM import_staged_ad_metrics s
    WHERE s.ctid = ANY (ARRAY(
        SELECT x.ctid
        FROM unnest(%(rows)s::int[]) AS r (row_number)
        CROSS JOIN LATERAL (
            SELECT x.ctid FROM import_staged_ad_metrics x
            WHERE x.batch_id = %(batch_id)s AND x.row_number = r.row_number
              AND x.tenant_id = %(tenant_id)s
            OFFSET 0) x))
    RETURNING s.row_number, staged_values(to_jsonb(s)) AS raw
)
INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity, message, raw)
SELECT %(tenant_id)s, %(batch_id)s, row_number, %(field)s, %(code)s, 'critical', %(message)s, raw
FROM gone;

-- name: slice_sums
-- Rows of one fact that differ in their breakdown (Age, Gender, Placement…) are slices of it:
-- the first row takes their sums and the others are set aside (is_duplicate, not counted as
-- duplicates), so promotion sees one row per fact whatever group the slices fell in. A metric
-- no slice has stays NULL; indicators that differ become "mixed". One window and one aggregate
-- over the batch; merge_slices writes what it returns. Run once, before the budget; running it
-- again finds one row per fact and returns nothing.
SELECT first_row, sum(spend) AS spend, sum(impressions) AS impressions, sum(clicks) AS clicks,
       sum(conversions) AS conversions, sum(results) AS results,
       CASE WHEN count(DISTINCT result_indicator) > 1 THEN 'mixed'
            ELSE min(result_indicator) END AS result_indicator,
       count(*) AS slices,
       array_agg(row_number) FILTER (WHERE row_number <> first_row) AS others
FROM (
    SELECT row_number, spend, impressions, clicks, conversions, results, result_indicator,
           min(row_number) OVER w AS first_row, count(*) OVER w AS n
    FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
    WINDOW w AS (PARTITION BY split_part(natural_key, chr(30), 1))) slices
WHERE n > 1
GROUP BY first_row
ORDER BY first_row;

-- name: merge_slices
-- What slice_sums returned: each fact's first row takes its sums, the other slices are set
-- aside. The rows are found as in reject_rows (a probe of the primary key per listed row) and
-- written by ctid: the sums join their row on the ctid (a TID probe, or one hash over the
-- stage), never the list read once per staged row.
WITH merged AS (
    UPDATE import_staged_ad_metrics s
    SET spend = m.spend, impressions = m.impressions, clicks = m.clicks,
        conversions = m.conversions, results = m.results, result_indicator = m.result_indicator,
        breakdown = NULL, slices = m.slices
    FROM (SELECT x.ctid AS tid, m.*
          FROM unnest(%(firsts)s::int[], %(spend)s::numeric[], %(impressions)s::numeric[],
                      %(clicks)s::numeric[], %(conversions)s::numeric[], %(results)s::numeric[],
                      %(indicators)s::text[], %(slices)s::int[])
               AS m (row_number, spend, impressions, clicks, conversions, results,
                     result_indicator, slices)
          CROSS JOIN LATERAL (
              SELECT x.ctid FROM import_staged_ad_metrics x
              WHERE x.batch_id = %(batch_id)s AND x.row_number = m.row_number
                AND x.tenant_id = %(tenant_id)s
              OFFSET 0) x
          OFFSET 0) m
    WHERE s.ctid = m.tid
    RETURNING 1
), aside AS (
    UPDATE import_staged_ad_metrics s SET is_duplicate = true
    WHERE s.ctid = ANY (ARRAY(
        SELECT x.ctid
        FROM unnest(%(aside)s::int[]) AS r (row_number)
        CROSS JOIN LATERAL (
            SELECT x.ctid FROM import_staged_ad_metrics x
            WHERE x.batch_id = %(batch_id)s AND x.row_number = r.row_number
              AND x.tenant_id = %(tenant_id)s
            OFFSET 0) x))
    RETURNING 1
)
SELECT (SELECT count(*) FROM merged) AS facts, (SELECT count(*) FROM aside) AS slices;

-- name: groups
-- The last row number of each group of %(group_rows)s staged rows, in order.
SELECT max(row_number) AS upto
FROM (SELECT row_number, (row_number() OVER (ORDER BY row_number) - 1) / %(group_rows)s AS g
      FROM import_staged_ad_metrics
      WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate) s
GROUP BY g ORDER BY g;

-- ── campaigns ────────────────────────────────────────────────────────────────────────────────
-- name: adopt_campaign_ids
-- An id seen later attaches to the entity the names made: a name-only campaign whose path a
-- row names together with an id no campaign has yet takes that id. Each id and each path once.
-- Only where the tenant has a name-only campaign at all (the EXISTS, uncorrelated: a one-time
-- filter over the batch's rows): a tenant whose exports all carry ids never reads its batch
-- here (docs/decisions/0510). The same in adopt_ad_set_ids and adopt_ad_ids.
WITH grp AS (
    SELECT * FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (path_key) external_id, path_key FROM (
        SELECT DISTINCT ON (campaign_external_id)
               campaign_external_id AS external_id, campaign_path AS path_key
        FROM grp
        WHERE campaign_external_id IS NOT NULL AND campaign_path IS NOT NULL
          AND EXISTS (SELECT 1 FROM campaigns n
                      WHERE n.tenant_id = %(tenant_id)s::uuid AND n.external_id IS NULL)
        ORDER BY campaign_external_id, campaign_path) by_id
    ORDER BY path_key, external_id
), written AS (
    UPDATE campaigns c SET external_id = hit.external_id, batch_id = %(batch_id)s::uuid,
           updated_at = now()
    FROM (SELECT src.external_id, x.id
          FROM src
          CROSS JOIN LATERAL (
              SELECT x.id FROM campaigns x
              WHERE x.path_lookup = %(key_prefix)s::text || src.path_key AND x.external_id IS NULL
              OFFSET 0) x
          LEFT JOIN LATERAL (
              SELECT true AS taken FROM campaigns t
              WHERE t.lookup_key = %(key_prefix)s::text || src.external_id
              OFFSET 0) t ON true
          WHERE t.taken IS NULL
          OFFSET 0) hit
    WHERE c.id = hit.id
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- name: upsert_campaigns
-- A row naming its campaign by id: upserted on the id. De-duplicated first (ON CONFLICT DO
-- UPDATE cannot touch one key twice in a statement): per id the group's last row that names it
-- wins; a row without a name never erases a stored one. Only a campaign whose name or path
-- changes is written, and counted. One stored as the row would leave it is dropped before the
-- INSERT (`same`, a probe of lookup_key): ON CONFLICT DO UPDATE locks every conflicting row,
-- a WAL record and a dirtied page each, even where its WHERE then writes nothing, and a Meta
-- export names every stored ad again (docs/decisions/0276). The same in the two upserts below.
WITH grp AS (
    SELECT * FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (campaign_external_id)
           campaign_external_id AS external_id, campaign_name AS name,
           campaign_path AS path_key
    FROM grp
    WHERE campaign_external_id IS NOT NULL
    ORDER BY campaign_external_id, campaign_name IS NULL, row_number DESC
), written AS (
    INSERT INTO campaigns AS c (tenant_id, client_id, platform, external_id, name, path_key,
                                batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, external_id, name,
           path_key, %(batch_id)s::uuid
    FROM src
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM campaigns x
        WHERE x.lookup_key = %(key_prefix)s::text || src.external_id
          AND (x.name, x.path_key) IS NOT DISTINCT FROM (COALESCE(src.name, x.name),
                                                        COALESCE(src.path_key, x.path_key))) same
    WHERE same.n = 0
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
    SELECT * FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (campaign_path)
           campaign_path AS path_key, campaign_name AS name
    FROM grp
    WHERE campaign_external_id IS NULL AND campaign_path IS NOT NULL
    ORDER BY campaign_path, row_number DESC
), written AS (
    INSERT INTO campaigns (tenant_id, client_id, platform, external_id, name, path_key, batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, NULL, name, path_key,
           %(batch_id)s::uuid
    FROM src
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM campaigns x
        WHERE x.path_lookup = %(key_prefix)s::text || src.path_key) x
    WHERE x.n = 0
    ON CONFLICT (path_lookup) WHERE external_id IS NULL DO NOTHING
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- ── ad sets ──────────────────────────────────────────────────────────────────────────────────
-- name: adopt_ad_set_ids
WITH grp AS (
    SELECT * FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (path_key) external_id, path_key FROM (
        SELECT DISTINCT ON (ad_set_external_id)
               ad_set_external_id AS external_id, ad_set_path AS path_key
        FROM grp
        WHERE ad_set_external_id IS NOT NULL AND ad_set_path IS NOT NULL
          AND EXISTS (SELECT 1 FROM ad_sets n
                      WHERE n.tenant_id = %(tenant_id)s::uuid AND n.external_id IS NULL)
        ORDER BY ad_set_external_id, ad_set_path) by_id
    ORDER BY path_key, external_id
), written AS (
    UPDATE ad_sets a SET external_id = hit.external_id, batch_id = %(batch_id)s::uuid,
           updated_at = now()
    FROM (SELECT src.external_id, x.id
          FROM src
          CROSS JOIN LATERAL (
              SELECT x.id FROM ad_sets x
              WHERE x.path_lookup = %(key_prefix)s::text || src.path_key AND x.external_id IS NULL
              OFFSET 0) x
          LEFT JOIN LATERAL (
              SELECT true AS taken FROM ad_sets t
              WHERE t.lookup_key = %(key_prefix)s::text || src.external_id
              OFFSET 0) t ON true
          WHERE t.taken IS NULL
          OFFSET 0) hit
    WHERE a.id = hit.id
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- name: upsert_ad_sets
-- An ad set is created or renamed by id only by a row that names it (id and name): a row with
-- only the id refers to an ad set that must already exist (else the warning below). Its
-- campaign resolves by id, else by name path (one campaign of that path, else none).
WITH grp AS (
    SELECT * FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (ad_set_external_id)
           ad_set_external_id AS external_id, ad_set_name AS name,
           ad_set_path AS path_key, campaign_external_id AS campaign_id_text,
           campaign_path AS campaign_path
    FROM grp
    WHERE ad_set_external_id IS NOT NULL AND ad_set_name IS NOT NULL
    ORDER BY ad_set_external_id, row_number DESC
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
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM ad_sets x
        WHERE x.lookup_key = %(key_prefix)s::text || src.external_id
          AND (x.name, x.path_key, x.campaign_id)
              IS NOT DISTINCT FROM (src.name, COALESCE(src.path_key, x.path_key),
                                    COALESCE(c.id, x.campaign_id))) same
    WHERE same.n = 0
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
    SELECT * FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (ad_set_path)
           ad_set_path AS path_key, ad_set_name AS name,
           campaign_external_id AS campaign_id_text,
           campaign_path AS campaign_path
    FROM grp
    WHERE ad_set_external_id IS NULL AND ad_set_path IS NOT NULL
    ORDER BY ad_set_path, row_number DESC
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
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM ad_sets x
        WHERE x.path_lookup = %(key_prefix)s::text || src.path_key) x
    WHERE x.n = 0
    ON CONFLICT (path_lookup) WHERE external_id IS NULL DO NOTHING
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- ── ads ──────────────────────────────────────────────────────────────────────────────────────
-- name: adopt_ad_ids
WITH grp AS (
    SELECT * FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (path_key) external_id, path_key FROM (
        SELECT DISTINCT ON (ad_external_id)
               ad_external_id AS external_id, ad_path AS path_key
        FROM grp
        WHERE ad_external_id IS NOT NULL AND ad_path IS NOT NULL
          AND EXISTS (SELECT 1 FROM ads n
                      WHERE n.tenant_id = %(tenant_id)s::uuid AND n.external_id IS NULL)
        ORDER BY ad_external_id, ad_path) by_id
    ORDER BY path_key, external_id
), written AS (
    UPDATE ads a SET external_id = hit.external_id, batch_id = %(batch_id)s::uuid,
           updated_at = now()
    FROM (SELECT src.external_id, x.id
          FROM src
          CROSS JOIN LATERAL (
              SELECT x.id FROM ads x
              WHERE x.path_lookup = %(key_prefix)s::text || src.path_key AND x.external_id IS NULL
              OFFSET 0) x
          LEFT JOIN LATERAL (
              SELECT true AS taken FROM ads t
              WHERE t.lookup_key = %(key_prefix)s::text || src.external_id
              OFFSET 0) t ON true
          WHERE t.taken IS NULL
          OFFSET 0) hit
    WHERE a.id = hit.id
    RETURNING 1
)
SELECT count(*) AS n FROM written;

-- name: upsert_ads
-- As upsert_ad_sets, one level down: an ad is created or renamed by a row that names it, its
-- parents resolve by id, else by name path; one stored as the row would leave it is not locked.
WITH grp AS (
    SELECT * FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (ad_external_id)
           ad_external_id AS external_id, ad_name AS name,
           ad_path AS path_key, campaign_external_id AS campaign_id_text,
           campaign_path AS campaign_path,
           ad_set_external_id AS ad_set_id_text, ad_set_path AS ad_set_path
    FROM grp
    WHERE ad_external_id IS NOT NULL AND ad_name IS NOT NULL
    ORDER BY ad_external_id, row_number DESC
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
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM ads x
        WHERE x.lookup_key = %(key_prefix)s::text || src.external_id
          AND (x.name, x.path_key, x.campaign_id, x.ad_set_id)
              IS NOT DISTINCT FROM (src.name, COALESCE(src.path_key, x.path_key),
                                    COALESCE(c.id, x.campaign_id),
                                    COALESCE(s.id, x.ad_set_id))) same
    WHERE same.n = 0
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
    SELECT * FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), src AS (
    SELECT DISTINCT ON (ad_path)
           ad_path AS path_key, ad_name AS name,
           campaign_external_id AS campaign_id_text,
           campaign_path AS campaign_path,
           ad_set_external_id AS ad_set_id_text, ad_set_path AS ad_set_path
    FROM grp
    WHERE ad_external_id IS NULL AND ad_path IS NOT NULL
    ORDER BY ad_path, row_number DESC
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
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM ads x
        WHERE x.path_lookup = %(key_prefix)s::text || src.path_key) x
    WHERE x.n = 0
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
-- A row's values become JSON (its evidence) only for a row warned, never for every row.
WITH grp AS (
    SELECT * FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), refs AS (
    -- The group's entities, each resolved once (migrations/0073, ADR 0275): the rows read
    -- their ids from this one JSON object through an InitPlan, `(SELECT ids FROM refs)`.
    SELECT ad_entity_ids(%(key_prefix)s::text,
                         array_agg(campaign_external_id), array_agg(campaign_path),
                         array_agg(ad_set_external_id), array_agg(ad_set_path),
                         array_agg(ad_external_id), array_agg(ad_path)) AS ids
    FROM grp
), looked AS (
    SELECT g.*, c.id AS campaign_id, s.id AS ad_set_id, a.id AS ad_id,
           (g.campaign_external_id IS NULL AND g.campaign_path IS NOT NULL
            AND c.id IS NULL)
           OR (g.ad_set_external_id IS NULL AND g.ad_set_path IS NOT NULL
               AND s.id IS NULL)
           OR (g.ad_external_id IS NULL AND g.ad_path IS NOT NULL
               AND a.id IS NULL) AS ambiguous,
           row_number() OVER (PARTITION BY g.metric_date, c.id, s.id, a.id
                              ORDER BY g.row_number) AS nth
    FROM grp g
    CROSS JOIN LATERAL (
        SELECT CASE WHEN g.campaign_external_id IS NOT NULL
                    THEN ((SELECT ids FROM refs) ->> ('c' || g.campaign_external_id))::uuid
                    ELSE ((SELECT ids FROM refs) ->> ('C' || g.campaign_path))::uuid END AS id
    ) c
    CROSS JOIN LATERAL (
        SELECT CASE WHEN g.ad_set_external_id IS NOT NULL
                    THEN ((SELECT ids FROM refs) ->> ('s' || g.ad_set_external_id))::uuid
                    ELSE ((SELECT ids FROM refs) ->> ('S' || g.ad_set_path))::uuid END AS id
    ) s
    CROSS JOIN LATERAL (
        SELECT CASE WHEN g.ad_external_id IS NOT NULL
                    THEN ((SELECT ids FROM refs) ->> ('a' || g.ad_external_id))::uuid
                    ELSE ((SELECT ids FROM refs) ->> ('A' || g.ad_path))::uuid END AS id
    ) a
    WHERE COALESCE(g.grain, 'day') = 'day'
), warned AS (
    INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity,
                                   message, raw)
    SELECT %(tenant_id)s, %(batch_id)s, l.row_number, x.field, x.code, x.severity, x.message,
           staged_values(to_jsonb(l)) - ARRAY['campaign_id', 'ad_set_id', 'ad_id', 'ambiguous', 'nth']
    FROM looked l
    CROSS JOIN LATERAL (VALUES
        ('ad_set_external_id', %(ad_set_code)s::text, 'warning', %(ad_set_message)s::text,
         l.ad_set_external_id IS NOT NULL AND l.ad_set_id IS NULL),
        ('ad_external_id', %(ad_code)s::text, 'warning', %(ad_message)s::text,
         l.ad_external_id IS NOT NULL AND l.ad_id IS NULL),
        (NULL, %(ambiguous_code)s::text, 'critical', %(ambiguous_message)s::text, l.ambiguous),
        (NULL, %(repeated_code)s::text, 'critical', %(repeated_message)s::text,
         NOT l.ambiguous AND l.nth > 1))
        AS x(field, code, severity, message, missing)
    -- A row none of the four applies to never meets the VALUES list (a qual on l alone is
    -- applied where looked is read): a file without warnings builds no 4 rows per row.
    WHERE x.missing
      AND ((l.ad_set_external_id IS NOT NULL AND l.ad_set_id IS NULL)
           OR (l.ad_external_id IS NOT NULL AND l.ad_id IS NULL) OR l.ambiguous OR l.nth > 1)
    RETURNING severity
), resolved AS (
    SELECT * FROM looked WHERE NOT ambiguous AND nth = 1
), written AS (
    INSERT INTO daily_metrics AS m (tenant_id, client_id, platform, metric_date, campaign_id,
                                    ad_set_id, ad_id, spend, impressions, clicks, conversions,
                                    results, result_indicator, currency, batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, metric_date,
           campaign_id, ad_set_id, ad_id, COALESCE(spend, 0), impressions, clicks, conversions,
           results, result_indicator, currency, %(batch_id)s::uuid
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
    SELECT * FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), refs AS (
    -- The group's entities, each resolved once (migrations/0073, ADR 0275): the rows read
    -- their ids from this one JSON object through an InitPlan, `(SELECT ids FROM refs)`.
    SELECT ad_entity_ids(%(key_prefix)s::text,
                         array_agg(campaign_external_id), array_agg(campaign_path),
                         array_agg(ad_set_external_id), array_agg(ad_set_path),
                         array_agg(ad_external_id), array_agg(ad_path)) AS ids
    FROM grp
), looked AS (
    SELECT g.*, c.id AS campaign_id, s.id AS ad_set_id, a.id AS ad_id,
           (g.campaign_external_id IS NULL AND g.campaign_path IS NOT NULL
            AND c.id IS NULL)
           OR (g.ad_set_external_id IS NULL AND g.ad_set_path IS NOT NULL
               AND s.id IS NULL)
           OR (g.ad_external_id IS NULL AND g.ad_path IS NOT NULL
               AND a.id IS NULL) AS ambiguous,
           row_number() OVER (PARTITION BY g.period_start,
                                           g.period_end, c.id, s.id, a.id
                              ORDER BY g.row_number) AS nth
    FROM grp g
    CROSS JOIN LATERAL (
        SELECT CASE WHEN g.campaign_external_id IS NOT NULL
                    THEN ((SELECT ids FROM refs) ->> ('c' || g.campaign_external_id))::uuid
                    ELSE ((SELECT ids FROM refs) ->> ('C' || g.campaign_path))::uuid END AS id
    ) c
    CROSS JOIN LATERAL (
        SELECT CASE WHEN g.ad_set_external_id IS NOT NULL
                    THEN ((SELECT ids FROM refs) ->> ('s' || g.ad_set_external_id))::uuid
                    ELSE ((SELECT ids FROM refs) ->> ('S' || g.ad_set_path))::uuid END AS id
    ) s
    CROSS JOIN LATERAL (
        SELECT CASE WHEN g.ad_external_id IS NOT NULL
                    THEN ((SELECT ids FROM refs) ->> ('a' || g.ad_external_id))::uuid
                    ELSE ((SELECT ids FROM refs) ->> ('A' || g.ad_path))::uuid END AS id
    ) a
    WHERE g.grain IN ('period', 'all_time')
), warned AS (
    INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity,
                                   message, raw)
    SELECT %(tenant_id)s, %(batch_id)s, l.row_number, x.field, x.code, x.severity, x.message,
           staged_values(to_jsonb(l)) - ARRAY['campaign_id', 'ad_set_id', 'ad_id', 'ambiguous', 'nth']
    FROM looked l
    CROSS JOIN LATERAL (VALUES
        ('ad_set_external_id', %(ad_set_code)s::text, 'warning', %(ad_set_message)s::text,
         l.ad_set_external_id IS NOT NULL AND l.ad_set_id IS NULL),
        ('ad_external_id', %(ad_code)s::text, 'warning', %(ad_message)s::text,
         l.ad_external_id IS NOT NULL AND l.ad_id IS NULL),
        (NULL, %(ambiguous_code)s::text, 'critical', %(ambiguous_message)s::text, l.ambiguous),
        (NULL, %(repeated_code)s::text, 'critical', %(repeated_message)s::text,
         NOT l.ambiguous AND l.nth > 1))
        AS x(field, code, severity, message, missing)
    -- A row none of the four applies to never meets the VALUES list (a qual on l alone is
    -- applied where looked is read): a file without warnings builds no 4 rows per row.
    WHERE x.missing
      AND ((l.ad_set_external_id IS NOT NULL AND l.ad_set_id IS NULL)
           OR (l.ad_external_id IS NOT NULL AND l.ad_id IS NULL) OR l.ambiguous OR l.nth > 1)
    RETURNING severity
), resolved AS (
    SELECT * FROM looked WHERE NOT ambiguous AND nth = 1
), written AS (
    INSERT INTO period_metrics AS m (tenant_id, client_id, platform, period_start, period_end,
                                     campaign_id, ad_set_id, ad_id, spend, impressions, clicks,
                                     conversions, results, result_indicator, currency, batch_id)
    SELECT %(tenant_id)s::uuid, %(client_id)s::uuid, %(platform)s::text, period_start,
           period_end, campaign_id, ad_set_id, ad_id, COALESCE(spend, 0),
           impressions, clicks,
           conversions, results,
           result_indicator, currency, %(batch_id)s::uuid
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
SELECT COALESCE(array_agg(DISTINCT metric_date ORDER BY metric_date), '{}') AS dates
FROM import_staged_ad_metrics
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
  AND metric_date IS NOT NULL;

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
