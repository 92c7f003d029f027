-- Operators' actions on ledger events that are safe to retry, that may correct an event's time
-- or sequence, and that discard a whole junk backlog by filter (issue 32; docs/decisions/0282,
-- 0283, 0284). Valid on Postgres 16+; needs no contrib extension.
-- Append-only: once applied anywhere, this file never changes.

-- What an operator saw: every statement that changes an event's state, error, payload or
-- envelope moves it on (apply's settles, replay, edit, discard), so an action that names the
-- version it was decided on is refused (409) once the event changed under it, and a retry of
-- the same request finds the action it already took (event_actions.from_version). Claims and
-- repeat deliveries do not move it: they change nothing an operator decides on.
-- A constant default: metadata only, no rewrite of the table.
ALTER TABLE event_ledger ADD COLUMN version INTEGER NOT NULL DEFAULT 1 CHECK (version >= 1);

-- An operator may correct source_sequence and source_emitted_at (a time Python cannot read
-- back, a producer's broken clock). The producer's own values stay here, so a resend of the
-- original is still a duplicate, not a conflict, as an edited payload keeps payload_sha256.
ALTER TABLE event_ledger ADD COLUMN envelope_edited BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE event_ledger ADD COLUMN producer_source_sequence BIGINT;
ALTER TABLE event_ledger ADD COLUMN producer_source_emitted_at TIMESTAMPTZ;

-- One discard by filter: who, why, what it matched, how many it set aside so far (it commits
-- in slices, so a purge cut short says how far it got). tenant_id NULL: an operator's purge
-- across tenants; each event's own action row names its tenant.
CREATE TABLE event_purges (
    purge_id      BIGSERIAL PRIMARY KEY,
    tenant_id     UUID REFERENCES tenants(tenant_id),
    actor         TEXT NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    actor_user_id UUID REFERENCES users(user_id),
    reason        TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 1000),
    filter        JSONB NOT NULL,
    previewed     INTEGER CHECK (previewed >= 0),
    event_count   INTEGER NOT NULL DEFAULT 0 CHECK (event_count >= 0),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at   TIMESTAMPTZ
);
CREATE INDEX idx_event_purges_tenant ON event_purges (tenant_id, created_at DESC);

-- Each action remembers the version it was taken on and a digest of the request (action,
-- actor, reason, what it set), so a retried identical request answers with this action instead
-- of acting twice. An edit may change the envelope: its previous values are kept beside the
-- previous payload. A discard that a purge made names it.
ALTER TABLE event_actions ADD COLUMN from_version INTEGER;
ALTER TABLE event_actions ADD COLUMN request_sha256 TEXT CHECK (request_sha256 ~ '^[0-9a-f]{64}$');
ALTER TABLE event_actions ADD COLUMN previous_source_sequence BIGINT;
ALTER TABLE event_actions ADD COLUMN previous_source_emitted_at TIMESTAMPTZ;
ALTER TABLE event_actions ADD COLUMN purge_id BIGINT REFERENCES event_purges(purge_id);
-- At most one action per event and version: two operators acting on what they both saw are
-- one action and one 409, whatever the timing (the row lock orders them; this is the proof).
CREATE UNIQUE INDEX idx_event_actions_version ON event_actions (ledger_id, from_version)
    WHERE from_version IS NOT NULL;
