-- Queries of the worker, which owns document_versions, chunks, chunk_embeddings and chunk_fts,
-- and moves ingestion_runs through running → succeeded | failed. Every query names the tenant.

-- name: try_lock_run
-- Session-level: held for the whole job on a dedicated connection, released when it closes
-- (or when the connection dies, which is how a crashed worker lets go of its runs). The key is
-- run_lock_key() (migrations/0008), the one definition every process shares.
SELECT pg_try_advisory_lock(run_lock_key(%(run_id)s)) AS locked;

-- name: unlock_run
-- A document job ended on a shared lock session (docs/decisions/0301): its run's lock only; the
-- session holds other runs' locks.
SELECT pg_advisory_unlock(run_lock_key(%(run_id)s)) AS unlocked;

-- name: unlock_all
-- A job ended cleanly and its session is kept for the next job (docs/decisions/0232): release
-- every session-level advisory lock it holds (the run's, a records job's tenant slot), exactly
-- what closing the session would have released.
SELECT pg_advisory_unlock_all();

-- name: end_stuck_owner
-- The owner's session lives but its heartbeat is older than the stale window: its process is
-- wedged. Ending that session releases the lock (and makes the owner's own writes fail on the
-- fence), so the run can be taken over. Re-checks staleness here, in one statement.
SELECT pg_terminate_backend(l.pid, 5000) AS ended
FROM pg_locks l
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid <> pg_backend_pid()
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = ((run_lock_key(%(run_id)s) >> 32) & 4294967295)::oid
  AND l.objid = (run_lock_key(%(run_id)s) & 4294967295)::oid
  AND EXISTS (SELECT 1 FROM ingestion_runs
              WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'running'
                AND updated_at <= now() - make_interval(secs => %(stale_s)s));

-- name: count_delivery
-- Every receive of the run's message counts, whoever ends up processing it.
UPDATE ingestion_runs SET delivery_count = delivery_count + 1
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s
RETURNING status, created_at, started_at, takeover_count,
          EXTRACT(EPOCH FROM now() - updated_at) AS heartbeat_age_s;

-- name: start_run
UPDATE ingestion_runs
SET status = 'running', started_at = COALESCE(started_at, now()), updated_at = now(),
    stage = 'starting', progress = 0, error = NULL, error_code = NULL
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'queued'
RETURNING started_at;

-- name: take_over_run
-- Only called while holding the run's lock, so no other live worker owns it: ours at once,
-- whatever the heartbeat says. takeover_count is the fence: writes of a previous owner name
-- the count they started with and match nothing once it moved on.
UPDATE ingestion_runs
SET updated_at = now(), takeover_count = takeover_count + 1, stage = 'starting', progress = 0,
    started_at = COALESCE(started_at, now())
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'running'
RETURNING started_at, takeover_count;

-- name: heartbeat_many
-- Every run a lock session holds, in one write (docs/decisions/0301). Also keeps the stage times
-- of each run's open attempt current, so a running attempt shows the stages it finished. Each
-- run is fenced on its own; the runs returned are still ours (one missing was finished, failed
-- by the crash guard or taken over meanwhile).
WITH beat AS (
    SELECT * FROM unnest(%(run_ids)s::uuid[], %(tenant_ids)s::uuid[], %(stages)s::text[],
                         %(progress)s::real[], %(fences)s::int[], %(attempts)s::int[],
                         %(times)s::jsonb[])
        AS b(run_id, tenant_id, stage, progress, fence, attempt_no, times)
), attempt AS (
    UPDATE run_attempts a SET stages = a.stages || b.times
    FROM beat b
    WHERE a.run_id = b.run_id AND a.tenant_id = b.tenant_id AND a.attempt_no = b.attempt_no
      AND a.ended_at IS NULL
)
UPDATE ingestion_runs r SET updated_at = now(), stage = b.stage, progress = b.progress
FROM beat b
WHERE r.run_id = b.run_id AND r.tenant_id = b.tenant_id AND r.status = 'running'
  AND r.takeover_count = b.fence
RETURNING r.run_id;

-- name: note_retry
-- Why the last attempt gave up on a transient failure, shown by `ingest dlq list` if the
-- message ends in the DLQ. Success and failure overwrite stats, so it lives only while the run
-- is unfinished.
UPDATE ingestion_runs SET stats = stats || jsonb_build_object('last_retry_error', %(error)s::text)
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'running';

-- name: fail_run
UPDATE ingestion_runs
SET status = 'failed', error = %(error)s, error_code = %(error_code)s, stats = %(stats)s,
    stage = %(stage)s, finished_at = now(), updated_at = now()
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'running'
  AND takeover_count = %(fence)s;

-- ── attempts (migrations/0011, docs/decisions/0100) ─────────────────────────────────────────
-- name: open_attempt
-- Starts the attempt a retry or redrive queued for this run, or adds one (a first delivery,
-- a takeover). Only called while holding the run's lock, so attempt numbers cannot race.
-- Waiting since: a first delivery since the run was (re)queued; a takeover since the previous
-- attempt ended (it was just ended as taken over, or released earlier).
WITH pending AS (
    UPDATE run_attempts SET started_at = now(), worker = %(worker)s
    WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND started_at IS NULL
      AND ended_at IS NULL AND %(kind)s = 'delivery'
    RETURNING attempt_no, queued_at, started_at
), added AS (
    INSERT INTO run_attempts (run_id, attempt_no, tenant_id, kind, worker, queued_at, started_at)
    SELECT %(run_id)s, COALESCE(max(a.attempt_no), 0) + 1, %(tenant_id)s, %(kind)s, %(worker)s,
           LEAST(now(), CASE WHEN %(kind)s = 'delivery'
               THEN (SELECT COALESCE(r.queued_at, r.created_at) FROM ingestion_runs r
                     WHERE r.run_id = %(run_id)s AND r.tenant_id = %(tenant_id)s)
               ELSE COALESCE(max(a.ended_at), now() - make_interval(secs => %(waited_s)s)) END),
           now()
    FROM run_attempts a WHERE a.run_id = %(run_id)s AND a.tenant_id = %(tenant_id)s
    HAVING NOT EXISTS (SELECT 1 FROM pending)
    RETURNING attempt_no, queued_at, started_at
)
SELECT attempt_no, EXTRACT(EPOCH FROM started_at - queued_at) AS queue_wait_s FROM pending
UNION ALL
SELECT attempt_no, EXTRACT(EPOCH FROM started_at - queued_at) AS queue_wait_s FROM added;

-- name: end_attempts
-- Ends open attempts that no status change ends (the trigger of migrations/0011 ends the rest):
-- one released on a passing fault, or the attempts of an owner that stopped beating.
UPDATE run_attempts
SET ended_at = now() - make_interval(secs => %(ago_s)s), outcome = %(outcome)s,
    error = %(error)s, stages = stages || %(stages)s
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND ended_at IS NULL
  AND (%(attempt_no)s::int IS NULL OR attempt_no = %(attempt_no)s);

-- ── the one content transaction ─────────────────────────────────────────────────────────────
-- name: lock_message_version
-- A document made from an e-mail attachment is served only with its message's version
-- (migrations/0066, docs/decisions/0250): hold that version row first, so a transaction taking
-- the message down waits for ours or we wait for it (then the trigger stores our version
-- inactive); rows of the child come second, as in the trigger's cascade. No row, no lock, for
-- every other document.
SELECT mv.is_active
FROM message_attachments a
JOIN document_versions mv ON mv.doc_version_id = a.doc_version_id AND mv.tenant_id = a.tenant_id
WHERE a.tenant_id = %(tenant_id)s AND a.child_doc_id = %(doc_id)s
FOR SHARE OF mv;

-- name: lock_document
-- Serialises version numbering and activation of one document across workers.
SELECT pg_advisory_xact_lock(%(key)s);

-- name: newer_version_exists
-- Under the document lock: has a run submitted after this one (an S3 key changed again, a
-- later upload by doc_id) already made its version? Then this run's content is superseded
-- and must not replace it: the newest submission wins, whatever order workers finish in.
SELECT EXISTS (
    SELECT 1 FROM document_versions v JOIN ingestion_runs newer ON newer.run_id = v.run_id
    JOIN ingestion_runs this ON this.run_id = %(run_id)s
    WHERE v.tenant_id = %(tenant_id)s AND v.doc_id = %(doc_id)s
      AND (newer.created_at, newer.run_id) > (this.created_at, this.run_id)
) AS newer;

-- name: deactivate_active_version
UPDATE document_versions SET is_active = false, deactivated_at = now()
WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s AND is_active;

-- name: insert_version
INSERT INTO document_versions (doc_version_id, tenant_id, doc_id, run_id, version_number,
    content_hash, is_active, embedding_model, embedding_dim, chunk_count, char_count, page_count,
    artifact_uri, embedding_variant)
SELECT %(doc_version_id)s, %(tenant_id)s, %(doc_id)s, %(run_id)s,
       COALESCE(max(version_number), 0) + 1, %(content_hash)s, true, %(embedding_model)s,
       %(embedding_dim)s, %(chunk_count)s, %(char_count)s, %(page_count)s, %(artifact_uri)s,
       %(embedding_variant)s
FROM document_versions WHERE tenant_id = %(tenant_id)s AND doc_id = %(doc_id)s
RETURNING version_number;

-- name: insert_fts
-- Postgres computes the vectors from the rows just copied, so text never travels twice. What is
-- indexed is the chunk's contextual header, then its text (ADR 0221); Postgres derives the
-- bm25 column from tsv (migration 0055, ADR 0220).
INSERT INTO chunk_fts (chunk_id, tenant_id, doc_version_id, tsv)
SELECT chunk_id, tenant_id, doc_version_id,
       to_tsvector(%(config)s::regconfig,
                   CASE WHEN context = '' THEN text ELSE context || E'\n\n' || text END)
FROM chunks WHERE tenant_id = %(tenant_id)s AND doc_version_id = %(doc_version_id)s;

-- name: insert_attachment
-- An e-mail's attachment, its bytes already in the upload store: the gateway's relay makes it a
-- child document of the message (docs/decisions/0250).
INSERT INTO message_attachments (attachment_id, tenant_id, doc_version_id, doc_id, ordinal,
    filename, source_type, size_bytes, content_hash, upload_uri, depth, message_subject)
VALUES (%(attachment_id)s, %(tenant_id)s, %(doc_version_id)s, %(doc_id)s, %(ordinal)s,
        %(filename)s, %(source_type)s, %(size_bytes)s, %(content_hash)s, %(upload_uri)s,
        %(depth)s, %(subject)s);

-- name: succeed_run
UPDATE ingestion_runs
SET status = 'succeeded', stats = %(stats)s, stage = 'done', progress = 1,
    finished_at = now(), updated_at = now()
WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'running'
  AND takeover_count = %(fence)s;

-- name: embedding_column_dim
SELECT atttypmod AS dim FROM pg_attribute
WHERE attrelid = 'chunk_embeddings'::regclass AND attname = 'embedding';

-- ── start-up report ─────────────────────────────────────────────────────────────────────────
-- name: backlog
-- Across tenants on purpose: the operator's view of the whole queue at worker start.
SELECT count(*) FILTER (WHERE status = 'queued') AS queued,
       count(*) FILTER (WHERE status = 'running') AS running,
       EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE status = 'queued')) AS oldest_queued_s
FROM ingestion_runs WHERE status IN ('queued', 'running');
