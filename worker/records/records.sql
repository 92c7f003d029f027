-- Queries of the records pipeline (worker/records/). The worker owns import_staged_rows, the
-- row errors it writes, judgments, plaintiffs and plaintiff_judgments, and moves a batch through
-- its machine (migrations/0009_records.sql). Every query names the tenant. Writes that end a
-- step are fenced on the run: takeover_count as of our claim, so a previous owner matches nothing.

-- name: tenant_slot
-- One of a tenant's concurrent-import slots (docs/decisions/0097): a session lock on the job's
-- lease connection, so it goes with the job or with its dead process. The two-int form keeps
-- these keys apart from the runs' one-bigint locks.
SELECT pg_try_advisory_lock(%(tenant_key)s::int, %(slot)s::int) AS locked;

-- name: release_slot
SELECT pg_advisory_unlock(%(tenant_key)s::int, %(slot)s::int) AS released;

-- name: hand_back_job
-- No slot free: the job goes back to the outbox, to be published again after the wait as a
-- fresh message (a fresh SQS receive count), so waiting never walks a job into the DLQ
-- (docs/decisions/0097). One statement, so one transaction; the caller deletes the message
-- only after it committed. Only a run that can still run is handed back; the run's status is
-- returned either way (no row: no such run). The outbox row is the intake's (its payload
-- stays); a job that came some other way gets one from the message. Copies collapse: a run
-- has one outbox row, however many of its messages wait.
WITH run AS (
    SELECT run_id, tenant_id, status FROM ingestion_runs
    WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s
), handed AS (
    INSERT INTO job_outbox AS o (run_id, tenant_id, payload, next_attempt_at, last_error)
    SELECT run_id, tenant_id, %(payload)s::jsonb, now() + make_interval(secs => %(wait_s)s),
           %(why)s
    FROM run WHERE status IN ('queued', 'running')
    ON CONFLICT (run_id) DO UPDATE
    SET published_at = NULL, next_attempt_at = EXCLUDED.next_attempt_at,
        last_error = EXCLUDED.last_error
    RETURNING o.run_id
)
SELECT run.status, EXISTS (SELECT 1 FROM handed) AS handed_back FROM run;

-- name: wake_waiting
-- A slot of the tenant was just released: its longest-waiting handed-back job is due now
-- rather than at the end of its wait. One, not all: the others would only find the slot taken.
UPDATE job_outbox SET next_attempt_at = now()
WHERE run_id = (SELECT run_id FROM job_outbox
                WHERE tenant_id = %(tenant_id)s AND published_at IS NULL
                  AND last_error = %(why)s AND next_attempt_at > now()
                ORDER BY created_at LIMIT 1);

-- name: batch
SELECT status, last_staged_row, error_threshold_percent, force_partial, rows_total,
       rows_invalid, rows_duplicate, parse_duration_ms, file_hash, source, source_reference,
       platform, client_id
FROM import_batches WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s;

-- name: start_batch
UPDATE import_batches SET status = 'processing', started_at = COALESCE(started_at, now()),
       promoted_upto = 0, rows_inserted = 0, updated_at = now()
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND status = 'pending';

-- name: staged_rows_consistent
-- Resume check (docs/decisions/0095): every row up to last_staged_row is either staged (valid)
-- or has a critical error. The stage is UNLOGGED: a Postgres crash empties it, and then the
-- counter lies; the caller restages from row 1.
SELECT (SELECT count(*) FROM import_staged_rows WHERE batch_id = %(batch_id)s
          AND row_number <= %(last)s)
     + (SELECT count(DISTINCT row_number) FROM import_row_errors
        WHERE batch_id = %(batch_id)s AND severity = 'critical' AND row_number BETWEEN 1 AND %(last)s)
       AS accounted;

-- name: forget_after
-- Whatever lies past the committed counter is not ours to trust (a restage from 0 clears all).
DELETE FROM import_staged_rows WHERE batch_id = %(batch_id)s AND row_number > %(last)s;

-- name: forget_errors_after
DELETE FROM import_row_errors
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s
  AND (row_number > %(last)s OR (%(last)s = 0 AND row_number = 0));

-- name: reset_counter
UPDATE import_batches SET last_staged_row = 0, updated_at = now()
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND status = 'processing';

-- name: advance_counter
-- The chunk's last step, in its transaction: only from the row the chunk started after, only
-- while processing and only while the run is still ours. No row back = roll the chunk back.
UPDATE import_batches b SET last_staged_row = %(last)s, updated_at = now()
WHERE b.batch_id = %(batch_id)s AND b.tenant_id = %(tenant_id)s AND b.status = 'processing'
  AND b.last_staged_row = %(previous)s
  AND EXISTS (SELECT 1 FROM ingestion_runs r
              WHERE r.run_id = %(run_id)s AND r.tenant_id = %(tenant_id)s
                AND r.status = 'running' AND r.takeover_count = %(fence)s)
RETURNING last_staged_row;

-- name: count_invalid
SELECT count(DISTINCT row_number) AS invalid FROM import_row_errors
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND severity = 'critical'
  AND row_number > 0;

-- name: repeats
-- The rows whose natural key an earlier row of the same file had (docs/decisions/0096): a
-- judgment's case number as the judgments table's generated column keys it (the worker keys
-- exactly so; tests/integration/test_records_any_text.py holds the two to each other), a
-- plaintiff's name | address line 1 | ZIP folded (the plaintiffs table's dedupe key is its
-- md5: such a row is not written again but still links its case number), an ad-metrics row's
-- day or period, each level by id or name path, and breakdown (docs/decisions/0149: the flag
-- is what makes each promotion group's upserts see one row per key). Over the parent stage:
-- the key is a column every contract's stage shares. One pass over the batch (a window, no
-- join): its plan is linear whatever the statistics say (docs/decisions/0183).
SELECT row_number FROM (
    SELECT row_number,
           row_number() OVER (PARTITION BY natural_key ORDER BY row_number) AS seen
    FROM import_staged_rows
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s) s
WHERE seen > 1;

-- name: flag_duplicates
-- The repeats found above are flagged (promotion skips them) and warned, with the row's values
-- as evidence; {stage} is the contract's typed stage (stage.STAGES). By primary key from the
-- list the caller passes: joined to a window over the batch instead, a stage without
-- statistics was scanned once per row (issue 21).
WITH flagged AS (
    UPDATE {stage} s SET is_duplicate = true
    FROM unnest(%(rows)s::int[]) AS r (row_number)
    WHERE s.batch_id = %(batch_id)s AND s.row_number = r.row_number
    RETURNING s.batch_id, s.row_number, staged_values(to_jsonb(s)) AS raw
)
INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity, message, raw)
SELECT %(tenant_id)s, batch_id, row_number, NULL, %(code)s, 'warning', %(message)s, raw
FROM flagged;

-- name: staging_complete
UPDATE import_batches
SET status = 'staging_complete', rows_total = %(total)s, rows_invalid = %(invalid)s,
    rows_duplicate = %(duplicate)s, rows_valid = %(total)s - %(invalid)s,
    parse_duration_ms = %(parse_ms)s, updated_at = now()
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND status = 'processing'
  AND EXISTS (SELECT 1 FROM ingestion_runs r
              WHERE r.run_id = %(run_id)s AND r.tenant_id = %(tenant_id)s
                AND r.status = 'running' AND r.takeover_count = %(fence)s)
RETURNING rows_total;

-- name: start_promoting
-- The ad-metrics promotion's first step, inside its one transaction (ad_promote.py).
UPDATE import_batches SET status = 'promoting', updated_at = now()
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND status = 'staging_complete';

-- ── judgments and plaintiffs: slices, then the flip (docs/decisions/0180) ──────────────────
-- A promotion is: begin_promotion (one transaction), then for each slice of SLICE_ROWS row
-- numbers an insert of its new records, the rows it must leave to the flip, and the cursor
-- (one transaction each), then the flip: the amends, the batch completed, the run succeeded,
-- the event (one transaction). Rows a slice inserts carry the batch's id, and a reader of
-- /v1/records/* sees a row only once its batch is completed or partial, so until the flip
-- commits nobody sees any of them, and then everyone sees all of them.

-- name: begin_promotion
-- staging_complete → promoting, fenced on the run; a takeover finds it promoting and resumes
-- after promoted_upto. Returns where the slices stand.
UPDATE import_batches b SET status = 'promoting', updated_at = now()
WHERE b.batch_id = %(batch_id)s AND b.tenant_id = %(tenant_id)s
  AND b.status IN ('staging_complete', 'promoting')
  AND EXISTS (SELECT 1 FROM ingestion_runs r
              WHERE r.run_id = %(run_id)s AND r.tenant_id = %(tenant_id)s
                AND r.status = 'running' AND r.takeover_count = %(fence)s)
RETURNING promoted_upto, rows_inserted;

-- name: slices_ahead
-- Where the slices promoted while the file is still being staged stand (docs/decisions/0273),
-- fenced on the run; the batch stays processing.
SELECT b.promoted_upto FROM import_batches b
WHERE b.batch_id = %(batch_id)s AND b.tenant_id = %(tenant_id)s AND b.status = 'processing'
  AND EXISTS (SELECT 1 FROM ingestion_runs r
              WHERE r.run_id = %(run_id)s AND r.tenant_id = %(tenant_id)s
                AND r.status = 'running' AND r.takeover_count = %(fence)s);

-- name: forget_promoted
-- Before the first slice, when staging starts over from row 1, and when the batch fails: rows
-- an earlier try of this batch inserted (it failed after some slices, and was retried), or
-- this try's slices. Nobody saw them (the batch is not completed: a batch already final keeps
-- its rows, whoever asks), and no other batch's rows carry this batch's id, so they go; links
-- to them go with them (cascade).
WITH unseen AS (
    SELECT batch_id FROM import_batches
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s
      AND status IN ('processing', 'staging_complete', 'promoting')
), links AS (
    DELETE FROM plaintiff_judgments
    WHERE tenant_id = %(tenant_id)s AND batch_id = (SELECT batch_id FROM unseen)
), judgments_gone AS (
    DELETE FROM judgments
    WHERE tenant_id = %(tenant_id)s AND batch_id = (SELECT batch_id FROM unseen)
), plaintiffs_gone AS (
    DELETE FROM plaintiffs
    WHERE tenant_id = %(tenant_id)s AND batch_id = (SELECT batch_id FROM unseen)
)
UPDATE import_batches b SET promoted_upto = 0, rows_inserted = 0, updated_at = now()
FROM unseen WHERE b.batch_id = unseen.batch_id AND b.tenant_id = %(tenant_id)s;

-- name: insert_judgments
-- One slice's judgments whose case number no stored row has: inserted, in key order (each
-- unique-index insert lands next to the previous one), straight from the typed stage. A key
-- that is stored already is left as it is (DO NOTHING): its rows are returned (missed: the
-- slice's rows whose key the insert did not write, by a hashed NOT IN over the keys it
-- returned) and judgment_amends compares only those for the flip (docs/decisions/0490; it
-- used to probe every row of the slice). A slice promoted while the file is still being
-- staged (docs/decisions/0273) meets repeats not flagged yet: ordered by row within a key, the
-- file's first row of a case number is the one inserted, as when the repeats are flagged.
WITH src AS (
    SELECT row_number, natural_key, case_number, plaintiff_name, defendant_name, amount,
           filed_date, court, county
    FROM import_staged_judgments
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s
      AND row_number > %(after)s AND row_number <= %(upto)s AND NOT is_duplicate
), inserted AS (
    INSERT INTO judgments (tenant_id, case_number, plaintiff_name, defendant_name, amount,
                           filed_date, court, county, source, source_reference, batch_id)
    SELECT %(tenant_id)s, case_number, plaintiff_name, defendant_name, amount, filed_date,
           court, county, %(source)s, %(source_reference)s, %(batch_id)s
    FROM src
    ORDER BY natural_key, row_number
    ON CONFLICT (tenant_id, case_number_normalized) DO NOTHING
    RETURNING case_number_normalized AS natural_key
)
SELECT (SELECT count(*) FROM inserted) AS inserted,
       ARRAY(SELECT row_number FROM src
             WHERE natural_key NOT IN (SELECT natural_key FROM inserted)) AS missed;

-- name: judgment_amends
-- The slice's rows whose case number a row other than this batch's holds with other values, or
-- holds for a batch nobody sees yet, are marked for the flip (upsert_judgments); a row that
-- changes nothing is left alone. Run after the slice's insert, in its transaction, over the
-- rows it did not write (%(rows)s, its `missed`; docs/decisions/0490): the rows the insert
-- wrote are this batch's, so only the stored rows it did not write are compared. Each staged
-- row is found by its primary key and looks its key up once: LATERAL (… OFFSET 0) cannot be
-- flattened into a join the planner could turn around, so it is a nested loop over the list
-- into the unique indexes, by shape, whatever the statistics (docs/decisions/0183). The tenant is the staged row's, not a
-- constant: priced against a constant, a tenant the statistics have not met yet (its first
-- import) is "one row", and any index that starts with tenant_id looks as good as the unique
-- one, and is walked whole for every row. Not LIMIT 1 either: priced for its first row, it made
-- the same choice. The rows found are marked by their ctid, the list evaluated once (a TID
-- scan): joined back by row_number, stale statistics made the slice's scan the inner side.
UPDATE import_staged_judgments m SET amends = true
WHERE m.ctid = ANY (ARRAY(
    SELECT s.staged
    FROM unnest(%(rows)s::int[]) AS r (row_number)
    CROSS JOIN LATERAL (
        SELECT s.ctid AS staged, s.* FROM import_staged_judgments s
        WHERE s.batch_id = %(batch_id)s AND s.row_number = r.row_number
        OFFSET 0) s
    CROSS JOIN LATERAL (
        SELECT j.case_number, j.plaintiff_name, j.defendant_name, j.amount, j.filed_date,
               j.court, j.county, j.batch_id
        FROM judgments j
        WHERE j.tenant_id = s.tenant_id AND j.case_number_normalized = s.natural_key
          AND j.batch_id IS DISTINCT FROM %(batch_id)s
        OFFSET 0) j
    WHERE s.tenant_id = %(tenant_id)s
      AND s.row_number > %(after)s AND s.row_number <= %(upto)s AND NOT s.is_duplicate
      AND ((j.case_number, j.plaintiff_name, j.defendant_name, j.amount, j.filed_date, j.court,
            j.county)
           IS DISTINCT FROM
           (s.case_number, s.plaintiff_name, s.defendant_name, s.amount, s.filed_date, s.court,
            s.county)
           OR NOT (j.batch_id IS NULL OR EXISTS (
               SELECT 1 FROM import_batches v
               WHERE v.batch_id = j.batch_id AND v.status IN ('completed', 'partial'))))
    ));

-- name: insert_plaintiffs
-- One slice's plaintiffs whose dedupe key no stored row has (see insert_judgments).
WITH src AS (
    SELECT row_number, natural_key, name, address_line1, city, state, zip, phone, email, contact_name, status
    FROM import_staged_plaintiffs
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s
      AND row_number > %(after)s AND row_number <= %(upto)s AND NOT is_duplicate
), inserted AS (
    INSERT INTO plaintiffs (tenant_id, name, address_line1, city, state, zip, phone, email,
                            contact_name, status, source, source_reference, batch_id)
    SELECT %(tenant_id)s, name, address_line1, city, state, zip, phone, email, contact_name,
           COALESCE(status, 'active'), %(source)s, %(source_reference)s, %(batch_id)s
    FROM src
    ORDER BY natural_key, row_number
    ON CONFLICT (tenant_id, dedupe_key) DO NOTHING
    RETURNING dedupe_key
)
SELECT (SELECT count(*) FROM inserted) AS inserted,
       ARRAY(SELECT row_number FROM src
             WHERE md5(natural_key) NOT IN (SELECT dedupe_key FROM inserted)) AS missed;

-- name: plaintiff_amends
-- As judgment_amends, over the rows insert_plaintiffs did not write, on the dedupe key (the md5
-- of the staged key) and the values upsert_plaintiffs may change.
UPDATE import_staged_plaintiffs m SET amends = true
WHERE m.ctid = ANY (ARRAY(
    SELECT s.staged
    FROM unnest(%(rows)s::int[]) AS r (row_number)
    CROSS JOIN LATERAL (
        SELECT s.ctid AS staged, s.* FROM import_staged_plaintiffs s
        WHERE s.batch_id = %(batch_id)s AND s.row_number = r.row_number
        OFFSET 0) s
    CROSS JOIN LATERAL (
        SELECT p.city, p.state, p.phone, p.email, p.contact_name, p.status, p.batch_id
        FROM plaintiffs p
        WHERE p.tenant_id = s.tenant_id AND p.dedupe_key = md5(s.natural_key)
          AND p.batch_id IS DISTINCT FROM %(batch_id)s
        OFFSET 0) p
    WHERE s.tenant_id = %(tenant_id)s
      AND s.row_number > %(after)s AND s.row_number <= %(upto)s AND NOT s.is_duplicate
      AND ((p.city, p.state, p.phone, p.email, p.contact_name, p.status)
           IS DISTINCT FROM
           (s.city, s.state, s.phone, s.email, s.contact_name, COALESCE(s.status, 'active'))
           OR NOT (p.batch_id IS NULL OR EXISTS (
               SELECT 1 FROM import_batches v
               WHERE v.batch_id = p.batch_id AND v.status IN ('completed', 'partial'))))
    ));

-- name: link_plaintiffs
-- Every staged plaintiff row of the slice (duplicates too) links its plaintiff to the tenant's
-- judgment of the same normalised case number, as a row of this batch (seen with it). A link
-- that exists stays as it is, unless only a batch nobody sees wrote it: then it is this
-- batch's now. Each side is looked up by its unique key (LATERAL … OFFSET 0, by shape).
INSERT INTO plaintiff_judgments AS l (tenant_id, plaintiff_id, judgment_id, batch_id)
SELECT DISTINCT %(tenant_id)s::uuid, p.id, j.id, %(batch_id)s::uuid
FROM import_staged_plaintiffs s
CROSS JOIN LATERAL (
    SELECT p.id FROM plaintiffs p
    WHERE p.tenant_id = s.tenant_id AND p.dedupe_key = md5(s.natural_key)
    OFFSET 0) p
CROSS JOIN LATERAL (
    SELECT j.id FROM judgments j
    WHERE j.tenant_id = s.tenant_id
      AND j.case_number_normalized = records_case_key(s.case_number)
    OFFSET 0) j
WHERE s.batch_id = %(batch_id)s AND s.tenant_id = %(tenant_id)s
  AND s.row_number > %(after)s AND s.row_number <= %(upto)s
ON CONFLICT (tenant_id, plaintiff_id, judgment_id) DO UPDATE SET batch_id = EXCLUDED.batch_id
WHERE l.batch_id IS DISTINCT FROM EXCLUDED.batch_id AND l.batch_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM import_batches v
                  WHERE v.batch_id = l.batch_id AND v.status IN ('completed', 'partial'));

-- name: unlinked_plaintiffs
-- A plaintiff row of the slice whose case number matches no judgment of the tenant: kept, not
-- linked, and recorded as a warning (docs/decisions/0096). In the slice's transaction, so a
-- takeover writes it again only if the slice rolled back.
INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity, message, raw)
SELECT %(tenant_id)s, s.batch_id, s.row_number, 'case_number', %(code)s, 'warning', %(message)s,
       staged_values(to_jsonb(s))
FROM import_staged_plaintiffs s
LEFT JOIN LATERAL (
    SELECT true AS found FROM judgments j
    WHERE j.tenant_id = s.tenant_id
      AND j.case_number_normalized = records_case_key(s.case_number)
    OFFSET 0) j ON true
WHERE s.batch_id = %(batch_id)s AND s.tenant_id = %(tenant_id)s
  AND s.row_number > %(after)s AND s.row_number <= %(upto)s AND j.found IS NULL;

-- name: advance_promotion
-- The slice's last step, in its transaction: only from where the slice started, only while
-- processing (a slice ahead of staging's end) or promoting, and only while the run is ours.
-- No row back = roll the slice back.
UPDATE import_batches b
SET promoted_upto = %(upto)s, rows_inserted = b.rows_inserted + %(inserted)s, updated_at = now()
WHERE b.batch_id = %(batch_id)s AND b.tenant_id = %(tenant_id)s
  AND b.status IN ('processing', 'promoting') AND b.promoted_upto = %(after)s
  AND EXISTS (SELECT 1 FROM ingestion_runs r
              WHERE r.run_id = %(run_id)s AND r.tenant_id = %(tenant_id)s
                AND r.status = 'running' AND r.takeover_count = %(fence)s)
RETURNING promoted_upto;

-- name: hold_turn
-- A slice promoted side by side with the next (docs/decisions/0390) holds its turn, keyed by
-- where it ends, until its transaction ends. The next slice waits for that turn (wait_turn)
-- before it moves promoted_upto, so the slices commit in file order and the counter never
-- passes a slice that did not commit. The wait is a lock Postgres sees: a cycle through
-- another transaction is a deadlock it detects, never a hang. The one-bigint form, as the
-- runs' locks (run_lock_key): a 64-bit hash of the batch and the row, not a run's id.
SELECT pg_advisory_xact_lock(hashtextextended(%(batch_id)s::text, %(upto)s));

-- name: wait_turn
SELECT pg_advisory_xact_lock_shared(hashtextextended(%(batch_id)s::text, %(after)s));

-- name: refuse_row
-- A staged row the database refused at promotion (docs/decisions/0186): no longer staged (the
-- stage, {stage}, holds valid rows), an error of its own with its values, and counted invalid.
WITH gone AS (
    DELETE FROM {stage} s
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND row_number = %(row)s
    RETURNING row_number, staged_values(to_jsonb(s)) AS raw
), recorded AS (
    INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity,
                                   message, raw)
    SELECT %(tenant_id)s, %(batch_id)s, row_number, %(field)s, %(code)s, 'critical',
           %(message)s, raw
    FROM gone
)
UPDATE import_batches
SET rows_invalid = rows_invalid + (SELECT count(*) FROM gone),
    rows_valid = rows_valid - (SELECT count(*) FROM gone), updated_at = now()
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s;

-- name: constraint_columns
-- The columns a constraint of a table names, to say which field a refused row broke.
SELECT a.attname AS name
FROM pg_constraint c
JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
WHERE c.conname = %(constraint)s AND c.conrelid = %(table)s::regclass;

-- name: promotion_counts
-- The flip's view of the batch: rows refused at promotion are invalid now, and say so.
SELECT rows_total, rows_invalid, rows_duplicate,
       EXISTS (SELECT 1 FROM import_row_errors e
               WHERE e.batch_id = b.batch_id AND e.code = %(code)s) AS refused
FROM import_batches b
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s;

-- name: upsert_judgments
-- The flip's writes: the amends (rows whose case number was stored), upserted on the
-- normalised case number; an existing judgment changes only when a value differs (the
-- amended-judgment rule), or when only a batch nobody sees wrote it (a batch that failed
-- after its slices, or one still promoting): then it is this writer's. The ledger applies an
-- event with this same statement over a one-row source (worker/ledger/apply.py), so a file
-- and an event follow one rule (its source is then one JSON row read as this stage's row type).
-- xmax = 0 marks a row this statement inserted.
WITH src AS (
    SELECT case_number, plaintiff_name, defendant_name, amount, filed_date, court, county
    FROM import_staged_judgments
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND amends AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), written AS (
    INSERT INTO judgments AS j (tenant_id, case_number, plaintiff_name, defendant_name, amount,
                                filed_date, court, county, source, source_reference, batch_id)
    SELECT %(tenant_id)s, case_number, plaintiff_name, defendant_name, amount, filed_date,
           court, county, %(source)s, %(source_reference)s, %(batch_id)s
    FROM src
    ON CONFLICT (tenant_id, case_number_normalized) DO UPDATE
    SET case_number = EXCLUDED.case_number, plaintiff_name = EXCLUDED.plaintiff_name,
        defendant_name = EXCLUDED.defendant_name, amount = EXCLUDED.amount,
        filed_date = EXCLUDED.filed_date, court = EXCLUDED.court, county = EXCLUDED.county,
        source = EXCLUDED.source, source_reference = EXCLUDED.source_reference,
        batch_id = EXCLUDED.batch_id, updated_at = now()
    WHERE (j.case_number, j.plaintiff_name, j.defendant_name, j.amount, j.filed_date, j.court,
           j.county)
          IS DISTINCT FROM
          (EXCLUDED.case_number, EXCLUDED.plaintiff_name, EXCLUDED.defendant_name,
           EXCLUDED.amount, EXCLUDED.filed_date, EXCLUDED.court, EXCLUDED.county)
       OR (j.batch_id IS DISTINCT FROM EXCLUDED.batch_id AND j.batch_id IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM import_batches v
                           WHERE v.batch_id = j.batch_id AND v.status IN ('completed', 'partial')))
    RETURNING (xmax = 0) AS inserted
)
SELECT (SELECT count(*) FROM src) AS distinct_rows,
       count(*) FILTER (WHERE inserted) AS inserted,
       count(*) FILTER (WHERE NOT inserted) AS updated
FROM written;

-- name: upsert_plaintiffs
-- The flip's plaintiffs (see upsert_judgments); the ledger's one-row statement too.
WITH src AS (
    SELECT name, address_line1, city, state, zip, phone, email, contact_name, status
    FROM import_staged_plaintiffs
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND amends AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), written AS (
    INSERT INTO plaintiffs AS p (tenant_id, name, address_line1, city, state, zip, phone, email,
                                 contact_name, status, source, source_reference, batch_id)
    SELECT %(tenant_id)s, name, address_line1, city, state, zip, phone, email, contact_name,
           COALESCE(status, 'active'), %(source)s, %(source_reference)s, %(batch_id)s
    FROM src
    ON CONFLICT (tenant_id, dedupe_key) DO UPDATE
    SET city = EXCLUDED.city, state = EXCLUDED.state, phone = EXCLUDED.phone,
        email = EXCLUDED.email, contact_name = EXCLUDED.contact_name, status = EXCLUDED.status,
        source = EXCLUDED.source, source_reference = EXCLUDED.source_reference,
        batch_id = EXCLUDED.batch_id, updated_at = now()
    WHERE (p.city, p.state, p.phone, p.email, p.contact_name, p.status)
          IS DISTINCT FROM
          (EXCLUDED.city, EXCLUDED.state, EXCLUDED.phone, EXCLUDED.email, EXCLUDED.contact_name,
           EXCLUDED.status)
       OR (p.batch_id IS DISTINCT FROM EXCLUDED.batch_id AND p.batch_id IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM import_batches v
                           WHERE v.batch_id = p.batch_id AND v.status IN ('completed', 'partial')))
    RETURNING (xmax = 0) AS inserted
)
SELECT (SELECT count(*) FROM src) AS distinct_rows,
       count(*) FILTER (WHERE inserted) AS inserted,
       count(*) FILTER (WHERE NOT inserted) AS updated
FROM written;

-- name: finish_batch
-- The flip's end: rows_inserted already counts what the slices inserted; the flip adds its own.
UPDATE import_batches
SET status = %(status)s, rows_inserted = rows_inserted + %(inserted)s,
    rows_updated = %(updated)s,
    rows_unchanged = greatest(0, %(distinct)s - rows_inserted - %(inserted)s - %(updated)s),
    db_duration_ms = %(db_ms)s, parse_duration_ms = COALESCE(parse_duration_ms, 0),
    completed_at = %(finished_at)s, updated_at = %(finished_at)s
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND status = 'promoting'
RETURNING rows_inserted, rows_updated, rows_unchanged;

-- name: succeed_run
UPDATE ingestion_runs
SET status = 'succeeded', stats = %(stats)s, stage = 'done', progress = 1,
    finished_at = %(finished_at)s, updated_at = %(finished_at)s
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'running'
  AND takeover_count = %(fence)s
RETURNING run_id;

-- name: fail_batch
UPDATE import_batches
SET status = 'failed', rejection_reason = %(reason)s, completed_at = now(), updated_at = now()
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s
  AND status IN ('pending', 'processing', 'staging_complete', 'promoting');

-- name: fail_run
UPDATE ingestion_runs
SET status = 'failed', error = %(error)s, error_code = %(error_code)s, stats = %(stats)s,
    stage = %(stage)s, finished_at = now(), updated_at = now()
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'running'
  AND takeover_count = %(fence)s
RETURNING run_id;
