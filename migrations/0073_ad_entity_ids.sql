-- The references of a group of ad-metrics rows, resolved once per entity (docs/decisions/0275,
-- 0276): written once here, called by both facts statements of worker/records/ad_metrics.sql
-- (upsert_daily_metrics, upsert_period_metrics), which held one copy each.
-- The arguments are the group's columns as arrays, row by row (NULLs kept, so an id and its
-- path stay paired): each distinct id is looked up through lookup_key (its unique index), each
-- distinct path of a row without an id through path_lookup (one entity of that path, else none:
-- several is ambiguous). The result is one JSON object keyed by a level letter and the id ('c',
-- 's', 'a') or the path ('C', 'S', 'A'); an entity not found has a null value. The caller reads
-- it through an InitPlan, once per statement: no join for the planner to turn into a nested
-- loop over the group when the stage's statistics are missing or stale.
-- Append-only: once applied anywhere, this file never changes.

CREATE FUNCTION ad_entity_ids(key_prefix text,
                              campaign_ids text[], campaign_paths text[],
                              ad_set_ids text[], ad_set_paths text[],
                              ad_ids text[], ad_paths text[]) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT COALESCE(jsonb_object_agg(k, id), '{}') FROM (
        SELECT 'c' || x, (SELECT id FROM campaigns WHERE lookup_key = key_prefix || x)
        FROM (SELECT DISTINCT x FROM unnest(campaign_ids) x WHERE x IS NOT NULL) d (x)
        UNION ALL
        SELECT 'C' || x, (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END
                          FROM campaigns WHERE path_lookup = key_prefix || x)
        FROM (SELECT DISTINCT p FROM unnest(campaign_ids, campaign_paths) u (i, p)
              WHERE i IS NULL AND p IS NOT NULL) d (x)
        UNION ALL
        SELECT 's' || x, (SELECT id FROM ad_sets WHERE lookup_key = key_prefix || x)
        FROM (SELECT DISTINCT x FROM unnest(ad_set_ids) x WHERE x IS NOT NULL) d (x)
        UNION ALL
        SELECT 'S' || x, (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END
                          FROM ad_sets WHERE path_lookup = key_prefix || x)
        FROM (SELECT DISTINCT p FROM unnest(ad_set_ids, ad_set_paths) u (i, p)
              WHERE i IS NULL AND p IS NOT NULL) d (x)
        UNION ALL
        SELECT 'a' || x, (SELECT id FROM ads WHERE lookup_key = key_prefix || x)
        FROM (SELECT DISTINCT x FROM unnest(ad_ids) x WHERE x IS NOT NULL) d (x)
        UNION ALL
        SELECT 'A' || x, (SELECT CASE WHEN count(*) = 1 THEN (array_agg(id))[1] END
                          FROM ads WHERE path_lookup = key_prefix || x)
        FROM (SELECT DISTINCT p FROM unnest(ad_ids, ad_paths) u (i, p)
              WHERE i IS NULL AND p IS NOT NULL) d (x)) r (k, id)
$$;
