-- A records row's batch is checked once per statement, not once per row (docs/decisions/0490).
-- The typed stages (import_staged_judgments, _plaintiffs, _ad_metrics) and the records tables
-- (judgments, plaintiffs) each had a foreign key (tenant_id, batch_id) → import_batches: an RI
-- trigger queued and run per row a COPY staged or a promotion slice inserted, although every
-- such statement names one batch. The bench's bare script's table has no key at all.
--
-- The same guarantees, by triggers (the shape of docs/decisions/0480 for the ad facts):
-- - writing a row: after each INSERT statement (a COPY is one), the statement's distinct
--   (tenant_id, batch_id) pairs must each be a batch, locked FOR KEY SHARE as the RI check
--   locks it (so it is neither deleted nor renumbered before the writer commits); SQLSTATE
--   23503 if not. A NULL batch is not checked (the keys were MATCH SIMPLE; a judgment or
--   plaintiff with no batch keeps 0190's tenant trigger). Judgments and plaintiffs check every
--   UPDATE statement's rows too (the flip's upsert sets batch_id); the stages, whose updates
--   only set flags, check a row whose tenant_id or batch_id an UPDATE names.
-- - deleting a batch takes its staged rows with it (the stages' keys were ON DELETE CASCADE),
--   and is refused (23503) while judgments or plaintiffs name it; renumbering a batch that
--   staged rows, judgments or plaintiffs name is refused (NO ACTION: checked after the row, at
--   the statement's end; so are these, AFTER ROW). Writers run READ COMMITTED (0480).
-- - TRUNCATE import_batches empties the typed stages too (CASCADE did), and is refused while
--   a judgment or plaintiff names a batch (it needed CASCADE, which emptied them).
-- import_staged_rows itself (rows staged as JSON before 0070) keeps its key, as do the row
-- errors: few rows a batch.
-- Append-only: once applied anywhere, this file never changes.

ALTER TABLE import_staged_judgments DROP CONSTRAINT import_staged_judgments_tenant_id_batch_id_fkey;
ALTER TABLE import_staged_plaintiffs DROP CONSTRAINT import_staged_plaintiffs_tenant_id_batch_id_fkey;
ALTER TABLE import_staged_ad_metrics DROP CONSTRAINT import_staged_ad_metrics_tenant_id_batch_id_fkey;
ALTER TABLE judgments DROP CONSTRAINT judgments_tenant_batch_fkey;
ALTER TABLE plaintiffs DROP CONSTRAINT plaintiffs_tenant_batch_fkey;

-- A statement's new rows (transition table new_rows): each distinct batch they name must be a
-- batch of the row's tenant. The NOT EXISTS is a SubPlan with its own row lock (a locking
-- subquery is never turned into a join): one primary-key probe per distinct pair.
CREATE FUNCTION records_batches_exist() RETURNS trigger AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM (SELECT DISTINCT tenant_id, batch_id FROM new_rows
                       WHERE batch_id IS NOT NULL) r
        WHERE NOT EXISTS (SELECT 1 FROM import_batches b
                          WHERE b.batch_id = r.batch_id AND b.tenant_id = r.tenant_id
                          FOR KEY SHARE)) THEN
        RAISE EXCEPTION 'insert or update on table "%" violates foreign key constraint "%"',
            TG_TABLE_NAME, TG_NAME
            USING ERRCODE = 'foreign_key_violation', TABLE = TG_TABLE_NAME,
                  CONSTRAINT = TG_NAME,
                  DETAIL = 'A row names a batch that is not its tenant''s (import_batches).';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

-- One row whose tenant_id or batch_id an UPDATE names (the stages: never, in practice).
CREATE FUNCTION records_row_batch_exists() RETURNS trigger AS $$
BEGIN
    PERFORM 1 FROM import_batches b
    WHERE b.batch_id = NEW.batch_id AND b.tenant_id = NEW.tenant_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'insert or update on table "%" violates foreign key constraint "%"',
            TG_TABLE_NAME, TG_NAME
            USING ERRCODE = 'foreign_key_violation', TABLE = TG_TABLE_NAME,
                  CONSTRAINT = TG_NAME,
                  DETAIL = 'A row names a batch that is not its tenant''s (import_batches).';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

-- Transition tables need one trigger per event.
CREATE TRIGGER import_staged_judgments_batch_inserted AFTER INSERT ON import_staged_judgments
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION records_batches_exist();
CREATE TRIGGER import_staged_judgments_batch_updated
    AFTER UPDATE OF tenant_id, batch_id ON import_staged_judgments
    FOR EACH ROW EXECUTE FUNCTION records_row_batch_exists();
CREATE TRIGGER import_staged_plaintiffs_batch_inserted AFTER INSERT ON import_staged_plaintiffs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION records_batches_exist();
CREATE TRIGGER import_staged_plaintiffs_batch_updated
    AFTER UPDATE OF tenant_id, batch_id ON import_staged_plaintiffs
    FOR EACH ROW EXECUTE FUNCTION records_row_batch_exists();
CREATE TRIGGER import_staged_ad_metrics_batch_inserted AFTER INSERT ON import_staged_ad_metrics
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION records_batches_exist();
CREATE TRIGGER import_staged_ad_metrics_batch_updated
    AFTER UPDATE OF tenant_id, batch_id ON import_staged_ad_metrics
    FOR EACH ROW EXECUTE FUNCTION records_row_batch_exists();
CREATE TRIGGER judgments_batch_inserted AFTER INSERT ON judgments
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION records_batches_exist();
CREATE TRIGGER judgments_batch_updated AFTER UPDATE ON judgments
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION records_batches_exist();
CREATE TRIGGER plaintiffs_batch_inserted AFTER INSERT ON plaintiffs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION records_batches_exist();
CREATE TRIGGER plaintiffs_batch_updated AFTER UPDATE ON plaintiffs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION records_batches_exist();

-- The keys' other half, on the batch. Each lookup walks an index that starts with the batch
-- (the stages' primary keys) or with (tenant_id, batch_id) (idx_judgments_batch,
-- idx_plaintiffs_batch), as the RI queries did.
CREATE FUNCTION import_batch_records_follow() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND (NEW.tenant_id, NEW.batch_id) = (OLD.tenant_id, OLD.batch_id) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        DELETE FROM import_staged_judgments
        WHERE batch_id = OLD.batch_id AND tenant_id = OLD.tenant_id;
        DELETE FROM import_staged_plaintiffs
        WHERE batch_id = OLD.batch_id AND tenant_id = OLD.tenant_id;
        DELETE FROM import_staged_ad_metrics
        WHERE batch_id = OLD.batch_id AND tenant_id = OLD.tenant_id;
    ELSIF EXISTS (SELECT 1 FROM import_staged_judgments
                  WHERE batch_id = OLD.batch_id AND tenant_id = OLD.tenant_id)
       OR EXISTS (SELECT 1 FROM import_staged_plaintiffs
                  WHERE batch_id = OLD.batch_id AND tenant_id = OLD.tenant_id)
       OR EXISTS (SELECT 1 FROM import_staged_ad_metrics
                  WHERE batch_id = OLD.batch_id AND tenant_id = OLD.tenant_id) THEN
        RAISE EXCEPTION 'update or delete on table "import_batches" violates foreign key constraint "%"',
            TG_NAME
            USING ERRCODE = 'foreign_key_violation', TABLE = 'import_batches',
                  CONSTRAINT = TG_NAME, DETAIL = 'Staged rows still name the batch.';
    END IF;
    IF EXISTS (SELECT 1 FROM judgments
               WHERE tenant_id = OLD.tenant_id AND batch_id = OLD.batch_id)
       OR EXISTS (SELECT 1 FROM plaintiffs
                  WHERE tenant_id = OLD.tenant_id AND batch_id = OLD.batch_id) THEN
        RAISE EXCEPTION 'update or delete on table "import_batches" violates foreign key constraint "%"',
            TG_NAME
            USING ERRCODE = 'foreign_key_violation', TABLE = 'import_batches',
                  CONSTRAINT = TG_NAME, DETAIL = 'Judgments or plaintiffs still name the batch.';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER import_batches_keep_records AFTER DELETE OR UPDATE OF tenant_id, batch_id
    ON import_batches FOR EACH ROW EXECUTE FUNCTION import_batch_records_follow();

-- TRUNCATE skips row triggers: the batches go only while no judgment or plaintiff names one,
-- and their staged rows go with them.
CREATE FUNCTION import_batches_truncated() RETURNS trigger AS $$
BEGIN
    IF TG_WHEN = 'BEFORE' THEN
        IF EXISTS (SELECT 1 FROM judgments WHERE batch_id IS NOT NULL)
           OR EXISTS (SELECT 1 FROM plaintiffs WHERE batch_id IS NOT NULL) THEN
            RAISE EXCEPTION 'cannot truncate table "import_batches": judgments or plaintiffs may name its rows'
                USING ERRCODE = 'feature_not_supported';
        END IF;
    ELSE
        TRUNCATE import_staged_judgments, import_staged_plaintiffs, import_staged_ad_metrics;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER import_batches_truncate_keeps_records BEFORE TRUNCATE ON import_batches
    FOR EACH STATEMENT EXECUTE FUNCTION import_batches_truncated();
CREATE TRIGGER import_batches_truncate_takes_staged_rows AFTER TRUNCATE ON import_batches
    FOR EACH STATEMENT EXECUTE FUNCTION import_batches_truncated();
