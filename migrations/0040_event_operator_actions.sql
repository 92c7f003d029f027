-- Operators' actions on single ledger events (issue 22, docs/decisions/0194): discard a pending
-- or dead-letter event, or edit its payload and replay it, each on the record with who and why.
-- Valid on Postgres 16+; needs no contrib extension.
-- Append-only: once applied anywhere, this file never changes.

-- A discarded event is settled without being applied: kept, so a resend of it is still a
-- duplicate and never comes back as new work.
ALTER TABLE event_ledger DROP CONSTRAINT event_ledger_process_state_check;
ALTER TABLE event_ledger ADD CONSTRAINT event_ledger_process_state_check
    CHECK (process_state IN ('pending', 'processed', 'dead_letter', 'discarded'));

-- The apply budget restarts at a replay or an edit without apply_attempt_count ever going
-- back: that count fences an applier's claim (worker/ledger/ledger.sql), and a count that
-- returned to a value an older claim still holds would let that claim write the old payload.
-- Attempts used = apply_attempt_count - apply_attempt_base.
ALTER TABLE event_ledger ADD COLUMN apply_attempt_base INTEGER NOT NULL DEFAULT 0
    CHECK (apply_attempt_base >= 0);

CREATE TABLE event_actions (
    action_id        BIGSERIAL PRIMARY KEY,
    tenant_id        UUID NOT NULL REFERENCES tenants(tenant_id),
    ledger_id        BIGINT NOT NULL REFERENCES event_ledger(ledger_id) ON DELETE CASCADE,
    action           TEXT NOT NULL CHECK (action IN ('discard', 'edit')),
    -- 'user:<user_id>' for the API and pages, 'cli:<name>' for the CLI, as event_replays.
    actor            TEXT NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    actor_user_id    UUID REFERENCES users(user_id),
    reason           TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 1000),
    -- What the event was before: its state and error, and for an edit the payload replaced.
    previous_state   TEXT NOT NULL,
    previous_error   TEXT,
    previous_payload JSONB,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((action = 'edit') = (previous_payload IS NOT NULL))
);
CREATE INDEX idx_event_actions_ledger ON event_actions (ledger_id, created_at DESC);
CREATE INDEX idx_event_actions_tenant ON event_actions (tenant_id, created_at DESC);
