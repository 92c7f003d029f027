-- Judgments and plaintiffs: one key of ids, (tenant_id, id), instead of two
-- (docs/decisions/0540).
--
-- `PRIMARY KEY (id)` was a second index of the same ids beside `UNIQUE (tenant_id, id)`, the key
-- every tenant query and both links of plaintiff_judgments use. Every inserted row wrote an
-- entry into both, and every amend (a non-HOT update: it sets the indexed batch_id) a new entry
-- on the old row's leaf of both. The pair becomes the primary key and the id-only index goes.
-- The ids stay as they are: time-ordered since 0035/0072.
-- Append-only: once applied anywhere, this file never changes.

-- The links name the unique constraint about to be replaced: drop them, swap the keys, link
-- again (checked against the rows already there).
ALTER TABLE plaintiff_judgments
    DROP CONSTRAINT plaintiff_judgments_tenant_id_plaintiff_id_fkey,
    DROP CONSTRAINT plaintiff_judgments_tenant_id_judgment_id_fkey;

ALTER TABLE judgments
    DROP CONSTRAINT judgments_pkey,
    DROP CONSTRAINT judgments_tenant_id_id_key,
    ADD CONSTRAINT judgments_pkey PRIMARY KEY (tenant_id, id);
ALTER TABLE plaintiffs
    DROP CONSTRAINT plaintiffs_pkey,
    DROP CONSTRAINT plaintiffs_tenant_id_id_key,
    ADD CONSTRAINT plaintiffs_pkey PRIMARY KEY (tenant_id, id);

ALTER TABLE plaintiff_judgments
    ADD CONSTRAINT plaintiff_judgments_tenant_id_plaintiff_id_fkey
        FOREIGN KEY (tenant_id, plaintiff_id) REFERENCES plaintiffs (tenant_id, id) ON DELETE CASCADE,
    ADD CONSTRAINT plaintiff_judgments_tenant_id_judgment_id_fkey
        FOREIGN KEY (tenant_id, judgment_id) REFERENCES judgments (tenant_id, id) ON DELETE CASCADE;
