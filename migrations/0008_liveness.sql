-- Liveness (docs/decisions/0075-lock-is-ownership.md, 0076-crash-guard-republishes.md).
-- Append-only: once applied anywhere, this file never changes.

-- ── who owns a run ──────────────────────────────────────────────────────────────────────────
-- A worker owns a run while its session holds the session-level advisory lock on this key
-- (worker/runs.py). The key is defined here, once, so the worker, the crash guard and the dev
-- stack all agree: the first 8 bytes of the run id as a signed big-endian 64-bit integer.
CREATE FUNCTION run_lock_key(p_run_id UUID) RETURNS BIGINT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ('x' || left(replace(p_run_id::text, '-', ''), 16))::bit(64)::bigint
$$;

-- True while some session of this database holds the run's lock: the owner's process lives.
-- Reads pg_locks instead of trying the lock, so asking never makes an owner look busy.
-- A bigint advisory key shows up as classid = high 32 bits, objid = low 32 bits, objsubid 1.
CREATE FUNCTION run_has_live_owner(p_run_id UUID) RETURNS BOOLEAN
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 1
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND classid = ((run_lock_key(p_run_id) >> 32) & 4294967295)::oid
          AND objid = (run_lock_key(p_run_id) & 4294967295)::oid)
$$;

-- ── crash guard republishes before it fails ─────────────────────────────────────────────────
-- How often the crash guard re-published the run's job because no worker owned it, and when
-- it last did: it fails the run only once a bounded number of republishes did not help.
ALTER TABLE ingestion_runs ADD COLUMN republish_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE ingestion_runs ADD COLUMN republished_at TIMESTAMPTZ;
