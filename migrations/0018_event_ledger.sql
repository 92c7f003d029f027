-- Event ledger (issue 14, DESIGN.md "Event ledger", specs/event-ledger.md): upstream events
-- pushed through POST /v1/events, the per-tenant API keys that push them, and the record of
-- every replay of dead letters. Valid on Postgres 16+; needs no contrib extension.
-- Append-only: once applied anywhere, this file never changes.

-- ── the ledger ──────────────────────────────────────────────────────────────────────────────
-- One canonical row per source event. Intake (every gateway's writer, docs/decisions/0135)
-- only inserts rows and, on a repeat, bumps the ingest_* counters and conflict_count; apply
-- (the worker) owns process_state and everything after it.
CREATE TABLE event_ledger (
    ledger_id             BIGSERIAL PRIMARY KEY,
    tenant_id             UUID NOT NULL REFERENCES tenants(tenant_id),
    source_system         TEXT NOT NULL CHECK (length(source_system) BETWEEN 1 AND 100),
    source_event_id       TEXT NOT NULL CHECK (length(source_event_id) BETWEEN 1 AND 200),
    -- Optional monotonic number from the source; the producer's reconnect cursor and the first
    -- ordering key of apply (then source_emitted_at, then ledger_id).
    source_sequence       BIGINT CHECK (source_sequence >= 0),
    source_emitted_at     TIMESTAMPTZ,
    type                  TEXT NOT NULL CHECK (length(type) BETWEEN 1 AND 100),
    -- The first payload delivered; a repeat never replaces it.
    payload               JSONB NOT NULL,
    -- SHA-256 of the payload's canonical JSON (sorted keys, no spaces), lower-case hex: a repeat
    -- whose hash differs is a conflict.
    payload_sha256        TEXT NOT NULL CHECK (payload_sha256 ~ '^[0-9a-f]{64}$'),
    ingest_first_seen_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    ingest_last_seen_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    ingest_attempt_count  INTEGER NOT NULL DEFAULT 1 CHECK (ingest_attempt_count >= 1),
    -- Repeats that carried another payload; the last such hash and when, for triage.
    conflict_count        INTEGER NOT NULL DEFAULT 0 CHECK (conflict_count >= 0),
    last_conflict_sha256  TEXT CHECK (last_conflict_sha256 ~ '^[0-9a-f]{64}$'),
    last_conflict_at      TIMESTAMPTZ,
    process_state         TEXT NOT NULL DEFAULT 'pending'
                          CHECK (process_state IN ('pending', 'processed', 'dead_letter')),
    process_error         TEXT,
    processed_at          TIMESTAMPTZ,
    -- Persisted so a worker crash loop still ends in dead_letter after the configured attempts.
    apply_attempt_count   INTEGER NOT NULL DEFAULT 0 CHECK (apply_attempt_count >= 0),
    -- When a pending row may next be claimed (backoff after a transient apply failure).
    next_apply_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Processed without overwriting: its entity already applied a newer event.
    superseded            BOOLEAN NOT NULL DEFAULT false,
    -- The entity the event applies to (e.g. a judgment's case number), filled by apply; with
    -- type it finds the newest event already applied to the same entity.
    entity_key            TEXT,
    UNIQUE (tenant_id, source_system, source_event_id),
    CHECK (process_state <> 'processed' OR processed_at IS NOT NULL),
    CHECK (process_state <> 'dead_letter' OR process_error IS NOT NULL),
    CHECK (NOT superseded OR process_state = 'processed')
);
-- Appliers claim due pending rows (FOR UPDATE SKIP LOCKED); the few pending rows only.
CREATE INDEX idx_event_ledger_claim ON event_ledger (next_apply_at, ledger_id)
    WHERE process_state = 'pending';
-- GET /v1/events/cursor: the gaps-and-islands walk reads this index in order.
CREATE INDEX idx_event_ledger_cursor ON event_ledger (tenant_id, source_system, source_sequence)
    WHERE source_sequence IS NOT NULL;
-- GET /v1/events?state=…: a tenant's events by state, newest first; also dead-letter counts.
CREATE INDEX idx_event_ledger_state ON event_ledger (tenant_id, process_state, ledger_id DESC);
-- Apply's out-of-order check: the events already applied to one entity.
CREATE INDEX idx_event_ledger_entity ON event_ledger (tenant_id, type, entity_key)
    WHERE entity_key IS NOT NULL;

-- ── API keys (docs/decisions/0136) ──────────────────────────────────────────────────────────
-- Machines push events with a per-tenant key; a key opens event intake and the cursor only.
-- The secret is shown once; only its SHA-256 is kept (a 256-bit random secret needs no slow
-- hash: there is nothing to brute-force).
CREATE TABLE api_keys (
    key_id       UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id    UUID NOT NULL REFERENCES tenants(tenant_id),
    name         TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    key_hash     TEXT NOT NULL UNIQUE CHECK (key_hash ~ '^[0-9a-f]{64}$'),
    -- The first characters of the key, for people to tell keys apart; not enough to use one.
    prefix       TEXT NOT NULL CHECK (length(prefix) BETWEEN 1 AND 20),
    created_by   UUID REFERENCES users(user_id),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at   TIMESTAMPTZ,
    revoked_by   UUID REFERENCES users(user_id),
    last_used_at TIMESTAMPTZ
);
CREATE INDEX idx_api_keys_tenant ON api_keys (tenant_id, created_at DESC);

-- ── replays ─────────────────────────────────────────────────────────────────────────────────
-- Every reset of dead-letter events to pending: who, when, what was chosen, how many moved.
-- An operator replay across tenants records one row per tenant it touched.
CREATE TABLE event_replays (
    replay_id     BIGSERIAL PRIMARY KEY,
    tenant_id     UUID NOT NULL REFERENCES tenants(tenant_id),
    -- 'user:<user_id>' for the API, 'cli:<os user>' (or --actor) for the CLI, as run_actions.
    actor         TEXT NOT NULL,
    actor_user_id UUID REFERENCES users(user_id),
    -- Either the chosen ledger ids or the filter ({"source_system", "type", "error"}) used.
    ledger_ids    BIGINT[],
    filter        JSONB,
    event_count   INTEGER NOT NULL CHECK (event_count >= 0),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (ledger_ids IS NOT NULL OR filter IS NOT NULL)
);
CREATE INDEX idx_event_replays_tenant ON event_replays (tenant_id, created_at DESC);
