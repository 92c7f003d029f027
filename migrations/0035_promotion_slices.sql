-- Records promotion in slices, made visible at once (docs/decisions/0180, 0181): a batch's new
-- judgments and plaintiffs are inserted in short transactions, each its own commit, while the
-- batch is `promoting`; readers of /v1/records/* see a row only when its batch_id is NULL (an
-- event wrote it) or names a batch that is completed or partial, so the whole batch appears in
-- the one transaction that ends it. Rows whose key was already stored wait for that
-- transaction (they are `amends`); nothing a reader sees changes before it.
-- Valid on Postgres 16+ (docs/decisions/0087): no uuidv7().
-- Append-only: once applied anywhere, this file never changes.

-- How far the slices got: the highest row_number whose slice committed (a takeover resumes
-- after it, as staging resumes after last_staged_row).
ALTER TABLE import_batches
    ADD COLUMN promoted_upto INTEGER NOT NULL DEFAULT 0 CHECK (promoted_upto >= 0);

-- A staged row whose key a stored record already holds with other values (or one a batch not
-- yet visible wrote): written by the promotion's last transaction, not by its slices. Few per
-- batch, so the last transaction finds them through a partial index instead of the batch.
ALTER TABLE import_staged_rows ADD COLUMN amends BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX idx_import_staged_rows_amends ON import_staged_rows (batch_id, row_number)
    WHERE amends;

-- The stage's (batch_id, natural_key) index served the duplicates' join, gone (a window over
-- the batch finds them now). Kept, it was the planner's other choice for any lookup of one
-- staged row: with statistics that had not met the batch, "batch_id = x" is one row and any
-- index that starts with batch_id looks as good as the primary key, then is read whole for
-- every row (docs/decisions/0183). And every staged row paid for it.
DROP INDEX idx_import_staged_rows_key;

-- A batch that failed after some slices leaves rows nobody sees; its next promotion removes
-- them (links by batch need an index to do that without reading every tenant's links).
CREATE INDEX idx_plaintiff_judgments_batch ON plaintiff_judgments (tenant_id, batch_id);

-- Time-ordered ids (the layout of RFC 9562's version 7: milliseconds since the epoch, then
-- random bits), written with Postgres 16's functions. A random v4 id lands on a random leaf
-- of the primary key and of (tenant_id, id) for every row inserted: on a table larger than
-- shared_buffers each insert reads and dirties two pages nobody else needs. Ordered ids append
-- at the right edge (docs/decisions/0182 has the figures). Ids stay unguessable: 74 random bits.
CREATE FUNCTION uuid_time_ordered() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
               PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                                 FROM 3)
               FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;
ALTER TABLE judgments ALTER COLUMN id SET DEFAULT uuid_time_ordered();
ALTER TABLE plaintiffs ALTER COLUMN id SET DEFAULT uuid_time_ordered();
