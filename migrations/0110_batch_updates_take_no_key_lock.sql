-- Updates of an import batch's row lock it FOR NO KEY UPDATE again, not FOR UPDATE (issue 31,
-- docs/decisions/0350).
--
-- import_batches has BEFORE UPDATE row triggers (migrations/0009, 0027) and options_key was a
-- stored generated column inside the unique key import_batches_file_key (migrations/0030). With
-- a BEFORE UPDATE row trigger, Postgres counts every stored generated column as updated (the
-- trigger might change what it is computed from), so every UPDATE of a batch — moving
-- last_staged_row, promoted_upto, a heartbeat's updated_at — was an update of a key column and
-- locked the row FOR UPDATE. That lock conflicts with the FOR KEY SHARE locks every foreign key
-- check on the batch takes: a staged chunk's counter waited for the whole slice promoted ahead
-- (its judgments reference the batch), and the two deadlocked unless serialised (ADR 0273).
--
-- options_key becomes a plain column that a BEFORE INSERT OR UPDATE OF its inputs trigger
-- computes, with the same expression, so the key and ON CONFLICT (… options_key) of
-- gateway/imports/intake.sql are unchanged; an UPDATE that changes none of its inputs is not a
-- key update and locks FOR NO KEY UPDATE, which foreign key checks do not wait for.
-- Append-only: once applied anywhere, this file never changes.

ALTER TABLE import_batches ALTER COLUMN options_key DROP EXPRESSION;

CREATE FUNCTION import_batch_options_key() RETURNS trigger AS $$
BEGIN
    NEW.options_key := NEW.error_threshold_percent::text || '|' || NEW.force_partial::text
                       || '|' || COALESCE(NEW.decimal_separator, 'auto');
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trg_import_batches_options_key
    BEFORE INSERT OR UPDATE OF error_threshold_percent, force_partial, decimal_separator,
                               options_key
    ON import_batches FOR EACH ROW EXECUTE FUNCTION import_batch_options_key();
