-- The event outbox and webhooks (issue 13 item 7, staging-promotion-runtime.md §7, DESIGN.md
-- "Records imports"): the IngestionCompleteEvent of every import that ends completed/partial
-- with promoted rows, the tenant's webhook endpoints, and one delivery row per event and
-- endpoint (the delivery log). Valid on Postgres 16+; needs no contrib extension.
-- Append-only: once applied anywhere, this file never changes.

-- ── the outbox ──────────────────────────────────────────────────────────────────────────────
-- Written in the transaction that ends the batch (worker/records/completion.py), so an event
-- exists exactly when its import committed completed/partial. A test event (POST
-- /v1/webhooks/{id}/test) has no batch.
CREATE TABLE event_outbox (
    event_id   UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id  UUID NOT NULL REFERENCES tenants(tenant_id),
    event_type TEXT NOT NULL CHECK (event_type IN ('ingestion.complete', 'webhook.test')),
    batch_id   UUID,
    -- The event's own fields (for ingestion.complete exactly IngestionCompleteEvent, §7.1).
    payload    JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, batch_id) REFERENCES import_batches (tenant_id, batch_id),
    CHECK ((event_type = 'webhook.test') = (batch_id IS NULL)),
    -- §7.5 single emission: a takeover or a duplicate SQS delivery that finishes the batch
    -- again writes nothing (INSERT … ON CONFLICT DO NOTHING).
    UNIQUE (batch_id, event_type),
    UNIQUE (tenant_id, event_id)
);
CREATE INDEX idx_event_outbox_tenant ON event_outbox (tenant_id, created_at DESC);

-- ── endpoints ───────────────────────────────────────────────────────────────────────────────
-- A tenant admin's receiver. The secret signs every delivery (Standard Webhooks), so it is
-- kept as given out (whsec_<base64>), never shown again by the API (docs/decisions/0153).
CREATE TABLE webhooks (
    webhook_id  UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id   UUID NOT NULL REFERENCES tenants(tenant_id),
    url         TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2000),
    event_types TEXT[] NOT NULL CHECK (cardinality(event_types) BETWEEN 1 AND 10),
    secret      TEXT NOT NULL CHECK (secret ~ '^whsec_[A-Za-z0-9+/=]+$'),
    created_by  UUID REFERENCES users(user_id),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, webhook_id)
);
CREATE INDEX idx_webhooks_tenant ON webhooks (tenant_id, created_at DESC, webhook_id DESC);

-- ── deliveries ──────────────────────────────────────────────────────────────────────────────
-- One per (endpoint, event), created with the event (fan-out in the same statement). The
-- dispatcher claims due pending rows (FOR UPDATE SKIP LOCKED) and holds them with a lease: the
-- claim moves next_attempt_at past the lease and sets claim_token, so a crashed dispatcher's
-- claims come due again. Deleting an endpoint deletes its log.
CREATE TABLE webhook_deliveries (
    delivery_id      BIGSERIAL PRIMARY KEY,
    tenant_id        UUID NOT NULL,
    webhook_id       UUID NOT NULL,
    event_id         UUID NOT NULL,
    -- The webhook-id header: stable for every attempt, so receivers de-duplicate.
    message_id       TEXT NOT NULL UNIQUE
                     DEFAULT 'msg_' || replace(gen_random_uuid()::text, '-', ''),
    status           TEXT NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Set by each claim; an attempt's result is written only by the claim that holds it.
    claim_token      UUID,
    last_status_code INTEGER,
    last_error       TEXT CHECK (length(last_error) <= 2000),
    last_attempt_at  TIMESTAMPTZ,
    delivered_at     TIMESTAMPTZ,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (webhook_id, event_id),
    FOREIGN KEY (tenant_id, webhook_id) REFERENCES webhooks (tenant_id, webhook_id)
        ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, event_id) REFERENCES event_outbox (tenant_id, event_id),
    CHECK (status <> 'delivered' OR delivered_at IS NOT NULL)
);
-- The dispatcher's claim: the few pending rows, by when they are due.
CREATE INDEX idx_webhook_deliveries_due ON webhook_deliveries (next_attempt_at, delivery_id)
    WHERE status = 'pending';
-- GET /v1/webhooks/{id}/deliveries: newest first.
CREATE INDEX idx_webhook_deliveries_log
    ON webhook_deliveries (tenant_id, webhook_id, created_at DESC, delivery_id DESC);
