-- Judgments and plaintiffs check one foreign key per written row instead of two
-- (docs/decisions/0430). Each row paid a tenant check (tenant_id → tenants) and a batch check
-- (batch_id → import_batches), ≈ 40 ms each per 9,200-row promotion slice. One composite key
-- (tenant_id, batch_id) → import_batches (tenant_id, batch_id) now does both for a row of a
-- batch, and more: the batch must be the row's own tenant's (the old batch key let a row name
-- another tenant's batch). A batch's tenant is itself a key of tenants, so the row's tenant
-- exists too.
--
-- The composite key is MATCH SIMPLE: a row with no batch (the ledger's events write those,
-- worker/ledger/apply.py) is not checked by it. For those rows alone a trigger checks the
-- tenant as the old key did (the tenant row locked FOR KEY SHARE, so it cannot be deleted
-- before the writer commits); its WHEN clause is evaluated before anything is queued, so a
-- batch's row costs nothing. And a tenant that still holds rows cannot be deleted, which the
-- old key's other half did.
-- Append-only: once applied anywhere, this file never changes.

ALTER TABLE judgments
    ADD CONSTRAINT judgments_tenant_batch_fkey FOREIGN KEY (tenant_id, batch_id)
        REFERENCES import_batches (tenant_id, batch_id),
    DROP CONSTRAINT judgments_batch_id_fkey,
    DROP CONSTRAINT judgments_tenant_id_fkey;

ALTER TABLE plaintiffs
    ADD CONSTRAINT plaintiffs_tenant_batch_fkey FOREIGN KEY (tenant_id, batch_id)
        REFERENCES import_batches (tenant_id, batch_id),
    DROP CONSTRAINT plaintiffs_batch_id_fkey,
    DROP CONSTRAINT plaintiffs_tenant_id_fkey;

-- A row with no batch: its tenant must exist, as the dropped tenant key said.
CREATE FUNCTION records_row_tenant_exists() RETURNS trigger AS $$
BEGIN
    PERFORM 1 FROM tenants WHERE tenant_id = NEW.tenant_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'insert or update on table "%" violates foreign key constraint "%"',
            TG_TABLE_NAME, TG_NAME
            USING ERRCODE = 'foreign_key_violation', TABLE = TG_TABLE_NAME,
                  CONSTRAINT = TG_NAME, DETAIL = 'The row''s tenant does not exist.';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER judgments_tenant_fkey AFTER INSERT OR UPDATE OF tenant_id, batch_id ON judgments
    FOR EACH ROW WHEN (NEW.batch_id IS NULL) EXECUTE FUNCTION records_row_tenant_exists();
CREATE TRIGGER plaintiffs_tenant_fkey AFTER INSERT OR UPDATE OF tenant_id, batch_id ON plaintiffs
    FOR EACH ROW WHEN (NEW.batch_id IS NULL) EXECUTE FUNCTION records_row_tenant_exists();

-- The other half of the dropped key: a tenant that judgments or plaintiffs still name cannot
-- be deleted or renumbered (rows of a batch are covered by the batch's own key on tenants).
-- Both lookups walk an index that starts with tenant_id.
CREATE FUNCTION tenant_keeps_records() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.tenant_id = OLD.tenant_id THEN
        RETURN NEW;
    END IF;
    IF EXISTS (SELECT 1 FROM judgments WHERE tenant_id = OLD.tenant_id)
       OR EXISTS (SELECT 1 FROM plaintiffs WHERE tenant_id = OLD.tenant_id) THEN
        RAISE EXCEPTION 'update or delete on table "tenants" violates foreign key constraint "%"',
            TG_NAME
            USING ERRCODE = 'foreign_key_violation', TABLE = 'tenants', CONSTRAINT = TG_NAME,
                  DETAIL = 'Judgments or plaintiffs still name the tenant.';
    END IF;
    RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER tenants_keep_records BEFORE DELETE OR UPDATE OF tenant_id ON tenants
    FOR EACH ROW EXECUTE FUNCTION tenant_keeps_records();
