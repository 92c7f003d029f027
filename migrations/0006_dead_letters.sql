-- Dead letters archived from the SQS dead-letter queue (docs/decisions/0060).
-- Append-only: once applied anywhere, this file never changes.
--
-- Reading SQS has side effects (each look is a receive), so the gateway's housekeeping moves
-- every dead-lettered message into this table (receive → insert → delete) and list, show,
-- redrive and purge read and write rows here only.
CREATE TABLE dead_letters (
    -- The SQS message id: the mover's insert is idempotent on it (a delete that failed after
    -- the insert brings the message back, and it lands on the same row).
    message_id      TEXT PRIMARY KEY,
    -- What the body names, when it names them; no foreign key, because a body is not trusted
    -- to name a tenant or run that exists. NULL = operators' only.
    tenant_id       UUID,
    run_id          UUID,
    -- The body as received, cut at DLQ_BODY_MAX_BYTES; body_bytes is its full size.
    body            TEXT NOT NULL,
    body_bytes      INTEGER NOT NULL,
    body_truncated  BOOLEAN NOT NULL DEFAULT false,
    -- Why the body is not a job (NULL = a valid job), and why our worker dead-lettered it.
    parse_error     TEXT,
    dlq_reason      TEXT,
    attributes      JSONB NOT NULL DEFAULT '{}',
    -- SQS's ApproximateReceiveCount when it was moved (worker deliveries + the mover's own).
    receive_count   INTEGER NOT NULL,
    sent_at         TIMESTAMPTZ,
    first_seen_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_seen_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    status          TEXT NOT NULL DEFAULT 'open'
                    CHECK (status IN ('open', 'redriven', 'purged')),
    resolved_at     TIMESTAMPTZ,
    -- 'user:<id>' or 'cli:<name>', as in run_actions.
    resolved_by     TEXT,
    resolved_by_user_id UUID,
    resolution_reason TEXT,
    CHECK ((status = 'open') = (resolved_at IS NULL))
);
-- A tenant admin's listing, and the operators' (tenant_id IS NULL included), oldest first.
CREATE INDEX idx_dead_letters_tenant ON dead_letters (tenant_id, sent_at, message_id);
CREATE INDEX idx_dead_letters_open ON dead_letters (sent_at, message_id) WHERE status = 'open';
