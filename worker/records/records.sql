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
       updated_at = now()
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

-- name: judgment_duplicates
-- A case number seen at an earlier row of the same file (docs/decisions/0096). Keyed with the
-- judgments table's own generated expression, so what promotion upserts on and what counts as
-- a duplicate can never disagree.
INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity, message, raw)
SELECT %(tenant_id)s, batch_id, row_number, NULL, %(code)s, 'warning', %(message)s, data
FROM (SELECT batch_id, row_number, data,
             row_number() OVER (PARTITION BY records_case_key(data->>'case_number')
                                ORDER BY row_number) AS seen
      FROM import_staged_rows WHERE batch_id = %(batch_id)s) s
WHERE seen > 1;

-- name: plaintiff_duplicates
-- The same plaintiff (the plaintiffs table's dedupe key) at an earlier row of the file. Such a
-- row is not upserted again but still links its case number (one plaintiff, many judgments).
INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity, message, raw)
SELECT %(tenant_id)s, batch_id, row_number, NULL, %(code)s, 'warning', %(message)s, data
FROM (SELECT batch_id, row_number, data,
             row_number() OVER (PARTITION BY plaintiff_dedupe_key(
                 data->>'name', data->>'address_line1', data->>'zip')
                 ORDER BY row_number) AS seen
      FROM import_staged_rows WHERE batch_id = %(batch_id)s) s
WHERE seen > 1;

-- name: staged_duplicates
-- A natural key (the contract's, as staged) seen at an earlier row of the same file: the row is
-- flagged, so promotion skips it, and warned. Ad metrics (docs/decisions/0149); the flag is
-- what makes each promotion group's upserts see one row per key.
-- The repeats are found first (usually none), then flagged by primary key: joined to the
-- whole window instead, a fresh stage without statistics was scanned once per row.
WITH repeated AS (
    SELECT row_number FROM (
        SELECT row_number, row_number() OVER (PARTITION BY natural_key ORDER BY row_number) AS n
        FROM import_staged_rows WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s) w
    WHERE n > 1
), flagged AS (
    UPDATE import_staged_rows s SET is_duplicate = true
    FROM repeated r WHERE s.batch_id = %(batch_id)s AND s.row_number = r.row_number
    RETURNING s.batch_id, s.row_number, s.data
)
INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity, message, raw)
SELECT %(tenant_id)s, batch_id, row_number, NULL, %(code)s, 'warning', %(message)s, data
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
UPDATE import_batches SET status = 'promoting', updated_at = now()
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND status = 'staging_complete';

-- name: upsert_judgments
-- The first row of each case number (duplicates were counted at staging_complete), upserted on
-- the normalised case number; an existing judgment changes only when a value differs (the
-- amended-judgment rule), so an unchanged row is neither written nor returned. xmax = 0 marks
-- a row this statement inserted.
WITH src AS (
    SELECT DISTINCT ON (records_case_key(data->>'case_number'))
           data
    FROM import_staged_rows WHERE batch_id = %(batch_id)s
    ORDER BY records_case_key(data->>'case_number'), row_number
), written AS (
    INSERT INTO judgments AS j (tenant_id, case_number, plaintiff_name, defendant_name, amount,
                                filed_date, court, county, source, source_reference, batch_id)
    SELECT %(tenant_id)s, data->>'case_number', data->>'plaintiff_name', data->>'defendant_name',
           (data->>'amount')::numeric, (data->>'filed_date')::date, data->>'court',
           data->>'county', %(source)s, %(source_reference)s, %(batch_id)s
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
    RETURNING (xmax = 0) AS inserted
)
SELECT (SELECT count(*) FROM src) AS distinct_rows,
       count(*) FILTER (WHERE inserted) AS inserted,
       count(*) FILTER (WHERE NOT inserted) AS updated
FROM written;

-- name: upsert_plaintiffs
WITH src AS (
    SELECT DISTINCT ON (k) data FROM (
        SELECT data, row_number, plaintiff_dedupe_key(
            data->>'name', data->>'address_line1', data->>'zip') AS k
        FROM import_staged_rows WHERE batch_id = %(batch_id)s) s
    ORDER BY k, row_number
), written AS (
    INSERT INTO plaintiffs AS p (tenant_id, name, address_line1, city, state, zip, phone, email,
                                 contact_name, status, source, source_reference, batch_id)
    SELECT %(tenant_id)s, data->>'name', data->>'address_line1', data->>'city',
           data->>'state', data->>'zip', data->>'phone', data->>'email', data->>'contact_name',
           COALESCE(data->>'status', 'active'), %(source)s, %(source_reference)s, %(batch_id)s
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
    RETURNING (xmax = 0) AS inserted
)
SELECT (SELECT count(*) FROM src) AS distinct_rows,
       count(*) FILTER (WHERE inserted) AS inserted,
       count(*) FILTER (WHERE NOT inserted) AS updated
FROM written;

-- name: link_plaintiffs
-- Every staged plaintiff row (duplicates too) links its plaintiff to the tenant's judgment of
-- the same normalised case number; links that exist already stay as they are.
INSERT INTO plaintiff_judgments (tenant_id, plaintiff_id, judgment_id, batch_id)
SELECT DISTINCT %(tenant_id)s::uuid, p.id, j.id, %(batch_id)s::uuid
FROM import_staged_rows s
JOIN plaintiffs p ON p.tenant_id = %(tenant_id)s AND p.dedupe_key = plaintiff_dedupe_key(
        s.data->>'name', s.data->>'address_line1', s.data->>'zip')
JOIN judgments j ON j.tenant_id = %(tenant_id)s AND j.case_number_normalized =
        records_case_key(s.data->>'case_number')
WHERE s.batch_id = %(batch_id)s
ON CONFLICT DO NOTHING;

-- name: unlinked_plaintiffs
-- A plaintiff row whose case number matches no judgment of the tenant: kept, not linked, and
-- recorded as a warning (docs/decisions/0096). Inside the promotion transaction, so a re-run
-- writes it again only if the first run rolled back.
INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, severity, message, raw)
SELECT %(tenant_id)s, s.batch_id, s.row_number, 'case_number', %(code)s, 'warning', %(message)s,
       s.data
FROM import_staged_rows s
WHERE s.batch_id = %(batch_id)s
  AND NOT EXISTS (SELECT 1 FROM judgments j
                  WHERE j.tenant_id = %(tenant_id)s AND j.case_number_normalized =
                        records_case_key(s.data->>'case_number'));

-- name: finish_batch
-- completed_at: the promotion's commit time (the caller's commit_time), not its start.
UPDATE import_batches
SET status = %(status)s, rows_inserted = %(inserted)s, rows_updated = %(updated)s,
    rows_unchanged = %(unchanged)s, db_duration_ms = %(db_ms)s,
    parse_duration_ms = COALESCE(parse_duration_ms, 0), completed_at = %(finished_at)s,
    updated_at = %(finished_at)s
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND status = 'promoting';

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
