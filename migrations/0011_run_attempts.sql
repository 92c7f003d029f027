-- Attempt history of runs and the failure's code (docs/decisions/0100, 0101).
-- Append-only: once applied anywhere, this file never changes.

-- The machine-readable code of a failure (shared/errors.py codes, the crash guard's own):
-- gateway/failures.py decides from it whether retrying can help.
ALTER TABLE ingestion_runs ADD COLUMN error_code TEXT;

-- One row per attempt at a run: a worker's first pick-up (delivery), a takeover of a run whose
-- owner died or released it, and each operator retry or DLQ redrive. Retry and redrive insert
-- their row unstarted (queued_at = when they asked); the worker that picks the run up starts
-- it, so a retry's queue wait counts from the retry, not from the upload.
CREATE TABLE run_attempts (
    run_id     UUID NOT NULL REFERENCES ingestion_runs(run_id) ON DELETE CASCADE,
    attempt_no INTEGER NOT NULL CHECK (attempt_no >= 1),
    tenant_id  UUID NOT NULL REFERENCES tenants(tenant_id),
    kind       TEXT NOT NULL CHECK (kind IN ('delivery', 'takeover', 'retry', 'redrive')),
    -- retry / redrive: who asked (user:<id>, cli:<name>).
    actor      TEXT,
    -- The worker that ran it (WORKER_ID, else host:pid); NULL until one picks it up.
    worker     TEXT,
    queued_at  TIMESTAMPTZ NOT NULL,
    started_at TIMESTAMPTZ,
    ended_at   TIMESTAMPTZ,
    -- released: the worker gave up on a passing fault and left the message for redelivery;
    -- taken_over: the worker stopped beating and another one took the run.
    outcome    TEXT CHECK (outcome IN ('succeeded', 'failed', 'released', 'taken_over')),
    error      TEXT,
    error_code TEXT,
    -- Milliseconds per finished stage: {"read_ms": .., "extract_ms": .., ...}.
    stages     JSONB NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, attempt_no)
);

-- A run that becomes succeeded or failed ends its open attempt in the same statement, whoever
-- wrote the status (the worker's content transaction, its failure, the crash guard), so an
-- attempt can never stay open under a finished run.
CREATE FUNCTION end_run_attempt() RETURNS trigger AS $$
BEGIN
    UPDATE run_attempts
    SET ended_at = COALESCE(NEW.finished_at, now()), outcome = NEW.status, error = NEW.error,
        error_code = NEW.error_code,
        stages = CASE WHEN jsonb_typeof(NEW.stats -> 'stages') = 'object'
                      THEN stages || (NEW.stats -> 'stages') ELSE stages END
    WHERE run_id = NEW.run_id AND ended_at IS NULL;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trg_ingestion_runs_end_attempt
    AFTER UPDATE OF status ON ingestion_runs
    FOR EACH ROW WHEN (NEW.status IN ('succeeded', 'failed') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION end_run_attempt();
