-- The errors endpoint's totals (GET /intake/batches/{id}/errors, `totalErrors`): counting 100,000
-- row errors on every page request cost more than the page itself (bench/records.py
-- --errors-only). A finished batch's errors no longer change, so their count per code is taken
-- once, in the transaction that finishes it, by a trigger on the status (every path that ends
-- a batch: the worker's finish and fail, the crash guard), and cleared when a batch reopens
-- or cleanup removes its errors. NULL: count live (an unfinished batch).
-- Append-only: once applied anywhere, this file never changes.

ALTER TABLE import_batches ADD COLUMN error_totals JSONB;

CREATE FUNCTION import_batch_error_totals(p_batch_id UUID) RETURNS JSONB AS $$
    SELECT COALESCE(jsonb_object_agg(code, n), '{}'::jsonb)
    FROM (SELECT code, count(*) AS n FROM import_row_errors
          WHERE batch_id = p_batch_id GROUP BY code) c;
$$ LANGUAGE sql STABLE;

CREATE FUNCTION keep_batch_error_totals() RETURNS trigger AS $$
BEGIN
    IF NEW.status IN ('completed', 'partial', 'failed') THEN
        IF OLD.status IS DISTINCT FROM NEW.status THEN
            NEW.error_totals := import_batch_error_totals(NEW.batch_id);
        END IF;
    ELSE
        NEW.error_totals := NULL;
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trg_import_batches_error_totals
    BEFORE UPDATE OF status ON import_batches
    FOR EACH ROW EXECUTE FUNCTION keep_batch_error_totals();

UPDATE import_batches SET error_totals = import_batch_error_totals(batch_id)
WHERE status IN ('completed', 'partial', 'failed');
