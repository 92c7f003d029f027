-- The ad facts' references are checked once per statement and distinct entity, not once per
-- row and key (docs/decisions/0480). daily_metrics and period_metrics had six foreign keys each
-- (tenant; tenant + client, campaign, ad set, ad, batch): six RI triggers queued and run per
-- written row, 272 ms of a 10,000-row insert of 371 ms (EXPLAIN ANALYZE), although a group of
-- 10,000 facts names one tenant, one batch, at most one client and ~5,550 entities.
--
-- The same guarantees, by triggers:
-- - writing a fact: after each INSERT or UPDATE statement, its new rows' distinct (tenant_id,
--   x) pairs must each be a row of the parent, locked FOR KEY SHARE as the RI check locks it
--   (so it cannot be deleted or renumbered before the writer commits); SQLSTATE 23503 if not.
--   NULL references are not checked (the keys were MATCH SIMPLE); the tenant is checked for
--   every row, as its key did.
-- - removing a parent: deleting, or changing the key of, a tenant, client, campaign, ad set, ad
--   or batch that a fact still names fails with 23503 (the keys were NO ACTION: checked after
--   the row, at the statement's end; so are these, AFTER ROW). Writers run READ COMMITTED, so
--   the check's fresh snapshot sees a concurrent writer's facts once its lock is released; a
--   deleter under REPEATABLE READ would not (the RI crosscheck snapshot): none exists.
-- - TRUNCATE of a parent while facts exist is refused (the keys refused it without CASCADE).
-- Append-only: once applied anywhere, this file never changes.

ALTER TABLE daily_metrics
    DROP CONSTRAINT daily_metrics_tenant_id_fkey,
    DROP CONSTRAINT daily_metrics_tenant_id_client_id_fkey,
    DROP CONSTRAINT daily_metrics_tenant_id_campaign_id_fkey,
    DROP CONSTRAINT daily_metrics_tenant_id_ad_set_id_fkey,
    DROP CONSTRAINT daily_metrics_tenant_id_ad_id_fkey,
    DROP CONSTRAINT daily_metrics_tenant_id_batch_id_fkey;

ALTER TABLE period_metrics
    DROP CONSTRAINT period_metrics_tenant_id_fkey,
    DROP CONSTRAINT period_metrics_tenant_id_client_id_fkey,
    DROP CONSTRAINT period_metrics_tenant_id_campaign_id_fkey,
    DROP CONSTRAINT period_metrics_tenant_id_ad_set_id_fkey,
    DROP CONSTRAINT period_metrics_tenant_id_ad_id_fkey,
    DROP CONSTRAINT period_metrics_tenant_id_batch_id_fkey;

-- A statement's new facts (transition table new_facts): each distinct reference must exist.
-- Each NOT EXISTS is a SubPlan with its own row lock (a locking subquery is never turned into
-- a join): one unique-index probe per distinct pair, whatever the statistics say.
CREATE FUNCTION ad_facts_references_exist() RETURNS trigger AS $$
DECLARE
    missing TEXT;
BEGIN
    SELECT m INTO missing FROM (
        SELECT 'tenants' FROM (SELECT DISTINCT tenant_id FROM new_facts) r
        WHERE NOT EXISTS (SELECT 1 FROM tenants p WHERE p.tenant_id = r.tenant_id
                          FOR KEY SHARE)
        UNION ALL
        SELECT 'ad_clients' FROM (SELECT DISTINCT tenant_id, client_id FROM new_facts
                                  WHERE client_id IS NOT NULL) r
        WHERE NOT EXISTS (SELECT 1 FROM ad_clients p WHERE p.tenant_id = r.tenant_id
                          AND p.client_id = r.client_id FOR KEY SHARE)
        UNION ALL
        SELECT 'campaigns' FROM (SELECT DISTINCT tenant_id, campaign_id FROM new_facts
                                 WHERE campaign_id IS NOT NULL) r
        WHERE NOT EXISTS (SELECT 1 FROM campaigns p WHERE p.tenant_id = r.tenant_id
                          AND p.id = r.campaign_id FOR KEY SHARE)
        UNION ALL
        SELECT 'ad_sets' FROM (SELECT DISTINCT tenant_id, ad_set_id FROM new_facts
                               WHERE ad_set_id IS NOT NULL) r
        WHERE NOT EXISTS (SELECT 1 FROM ad_sets p WHERE p.tenant_id = r.tenant_id
                          AND p.id = r.ad_set_id FOR KEY SHARE)
        UNION ALL
        SELECT 'ads' FROM (SELECT DISTINCT tenant_id, ad_id FROM new_facts
                           WHERE ad_id IS NOT NULL) r
        WHERE NOT EXISTS (SELECT 1 FROM ads p WHERE p.tenant_id = r.tenant_id
                          AND p.id = r.ad_id FOR KEY SHARE)
        UNION ALL
        SELECT 'import_batches' FROM (SELECT DISTINCT tenant_id, batch_id FROM new_facts
                                      WHERE batch_id IS NOT NULL) r
        WHERE NOT EXISTS (SELECT 1 FROM import_batches p WHERE p.tenant_id = r.tenant_id
                          AND p.batch_id = r.batch_id FOR KEY SHARE)
    ) AS x (m)
    LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'insert or update on table "%" violates foreign key constraint "%"',
            TG_TABLE_NAME, TG_NAME
            USING ERRCODE = 'foreign_key_violation', TABLE = TG_TABLE_NAME,
                  CONSTRAINT = TG_NAME,
                  DETAIL = format('A reference is not present in table "%s".', missing);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

-- Transition tables need one trigger per event.
CREATE TRIGGER daily_metrics_references_inserted AFTER INSERT ON daily_metrics
    REFERENCING NEW TABLE AS new_facts
    FOR EACH STATEMENT EXECUTE FUNCTION ad_facts_references_exist();
CREATE TRIGGER daily_metrics_references_updated AFTER UPDATE ON daily_metrics
    REFERENCING NEW TABLE AS new_facts
    FOR EACH STATEMENT EXECUTE FUNCTION ad_facts_references_exist();
CREATE TRIGGER period_metrics_references_inserted AFTER INSERT ON period_metrics
    REFERENCING NEW TABLE AS new_facts
    FOR EACH STATEMENT EXECUTE FUNCTION ad_facts_references_exist();
CREATE TRIGGER period_metrics_references_updated AFTER UPDATE ON period_metrics
    REFERENCING NEW TABLE AS new_facts
    FOR EACH STATEMENT EXECUTE FUNCTION ad_facts_references_exist();

-- The keys' other half: a parent that facts still name keeps its key. Each lookup walks an
-- index of the facts that starts with tenant_id, as the RI check's query did.
CREATE FUNCTION ad_facts_parent_kept() RETURNS trigger AS $$
DECLARE
    named BOOLEAN;
BEGIN
    CASE TG_TABLE_NAME
    WHEN 'tenants' THEN
        IF TG_OP = 'UPDATE' AND NEW.tenant_id = OLD.tenant_id THEN RETURN NULL; END IF;
        named := EXISTS (SELECT 1 FROM daily_metrics WHERE tenant_id = OLD.tenant_id)
              OR EXISTS (SELECT 1 FROM period_metrics WHERE tenant_id = OLD.tenant_id);
    WHEN 'ad_clients' THEN
        IF TG_OP = 'UPDATE' AND (NEW.tenant_id, NEW.client_id) = (OLD.tenant_id, OLD.client_id)
        THEN RETURN NULL; END IF;
        named := EXISTS (SELECT 1 FROM daily_metrics WHERE tenant_id = OLD.tenant_id
                         AND client_id = OLD.client_id)
              OR EXISTS (SELECT 1 FROM period_metrics WHERE tenant_id = OLD.tenant_id
                         AND client_id = OLD.client_id);
    WHEN 'campaigns' THEN
        IF TG_OP = 'UPDATE' AND (NEW.tenant_id, NEW.id) = (OLD.tenant_id, OLD.id)
        THEN RETURN NULL; END IF;
        named := EXISTS (SELECT 1 FROM daily_metrics WHERE tenant_id = OLD.tenant_id
                         AND campaign_id = OLD.id)
              OR EXISTS (SELECT 1 FROM period_metrics WHERE tenant_id = OLD.tenant_id
                         AND campaign_id = OLD.id);
    WHEN 'ad_sets' THEN
        IF TG_OP = 'UPDATE' AND (NEW.tenant_id, NEW.id) = (OLD.tenant_id, OLD.id)
        THEN RETURN NULL; END IF;
        named := EXISTS (SELECT 1 FROM daily_metrics WHERE tenant_id = OLD.tenant_id
                         AND ad_set_id = OLD.id)
              OR EXISTS (SELECT 1 FROM period_metrics WHERE tenant_id = OLD.tenant_id
                         AND ad_set_id = OLD.id);
    WHEN 'ads' THEN
        IF TG_OP = 'UPDATE' AND (NEW.tenant_id, NEW.id) = (OLD.tenant_id, OLD.id)
        THEN RETURN NULL; END IF;
        named := EXISTS (SELECT 1 FROM daily_metrics WHERE tenant_id = OLD.tenant_id
                         AND ad_id = OLD.id)
              OR EXISTS (SELECT 1 FROM period_metrics WHERE tenant_id = OLD.tenant_id
                         AND ad_id = OLD.id);
    WHEN 'import_batches' THEN
        IF TG_OP = 'UPDATE' AND (NEW.tenant_id, NEW.batch_id) = (OLD.tenant_id, OLD.batch_id)
        THEN RETURN NULL; END IF;
        named := EXISTS (SELECT 1 FROM daily_metrics WHERE tenant_id = OLD.tenant_id
                         AND batch_id = OLD.batch_id)
              OR EXISTS (SELECT 1 FROM period_metrics WHERE tenant_id = OLD.tenant_id
                         AND batch_id = OLD.batch_id);
    END CASE;
    IF named THEN
        RAISE EXCEPTION 'update or delete on table "%" violates foreign key constraint "%"',
            TG_TABLE_NAME, TG_NAME
            USING ERRCODE = 'foreign_key_violation', TABLE = TG_TABLE_NAME,
                  CONSTRAINT = TG_NAME, DETAIL = 'Ad metrics still name the row.';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER tenants_keep_ad_facts AFTER DELETE OR UPDATE OF tenant_id ON tenants
    FOR EACH ROW EXECUTE FUNCTION ad_facts_parent_kept();
CREATE TRIGGER ad_clients_keep_ad_facts AFTER DELETE OR UPDATE OF tenant_id, client_id
    ON ad_clients FOR EACH ROW EXECUTE FUNCTION ad_facts_parent_kept();
CREATE TRIGGER campaigns_keep_ad_facts AFTER DELETE OR UPDATE OF tenant_id, id ON campaigns
    FOR EACH ROW EXECUTE FUNCTION ad_facts_parent_kept();
CREATE TRIGGER ad_sets_keep_ad_facts AFTER DELETE OR UPDATE OF tenant_id, id ON ad_sets
    FOR EACH ROW EXECUTE FUNCTION ad_facts_parent_kept();
CREATE TRIGGER ads_keep_ad_facts AFTER DELETE OR UPDATE OF tenant_id, id ON ads
    FOR EACH ROW EXECUTE FUNCTION ad_facts_parent_kept();
CREATE TRIGGER import_batches_keep_ad_facts AFTER DELETE OR UPDATE OF tenant_id, batch_id
    ON import_batches FOR EACH ROW EXECUTE FUNCTION ad_facts_parent_kept();

-- TRUNCATE skips row triggers: a parent is truncated only while no fact exists.
CREATE FUNCTION ad_facts_parent_not_truncated() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM daily_metrics) OR EXISTS (SELECT 1 FROM period_metrics) THEN
        RAISE EXCEPTION 'cannot truncate table "%": ad metrics may name its rows', TG_TABLE_NAME
            USING ERRCODE = 'feature_not_supported';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER tenants_truncate_keeps_ad_facts BEFORE TRUNCATE ON tenants
    FOR EACH STATEMENT EXECUTE FUNCTION ad_facts_parent_not_truncated();
CREATE TRIGGER ad_clients_truncate_keeps_ad_facts BEFORE TRUNCATE ON ad_clients
    FOR EACH STATEMENT EXECUTE FUNCTION ad_facts_parent_not_truncated();
CREATE TRIGGER campaigns_truncate_keeps_ad_facts BEFORE TRUNCATE ON campaigns
    FOR EACH STATEMENT EXECUTE FUNCTION ad_facts_parent_not_truncated();
CREATE TRIGGER ad_sets_truncate_keeps_ad_facts BEFORE TRUNCATE ON ad_sets
    FOR EACH STATEMENT EXECUTE FUNCTION ad_facts_parent_not_truncated();
CREATE TRIGGER ads_truncate_keeps_ad_facts BEFORE TRUNCATE ON ads
    FOR EACH STATEMENT EXECUTE FUNCTION ad_facts_parent_not_truncated();
CREATE TRIGGER import_batches_truncate_keeps_ad_facts BEFORE TRUNCATE ON import_batches
    FOR EACH STATEMENT EXECUTE FUNCTION ad_facts_parent_not_truncated();
