-- Webhooks under load and over time (issue 22, docs/decisions/0195, 0196): secret rotation
-- with a grace period, and the in-flight deliveries the dispatchers' claim counts per endpoint
-- and per tenant. Valid on Postgres 16+; needs no contrib extension.
-- Append-only: once applied anywhere, this file never changes.

-- POST /v1/webhooks/{id}/rotate-secret keeps the secret it replaces until the grace period
-- ends; until then every delivery carries both signatures (Standard Webhooks allows several).
ALTER TABLE webhooks
    ADD COLUMN previous_secret TEXT CHECK (previous_secret ~ '^whsec_[A-Za-z0-9+/=]+$'),
    ADD COLUMN previous_secret_expires_at TIMESTAMPTZ,
    ADD COLUMN secret_rotated_at TIMESTAMPTZ,
    ADD CONSTRAINT webhooks_previous_secret_expiry
        CHECK ((previous_secret IS NULL) = (previous_secret_expires_at IS NULL));

-- In flight = claimed and not settled: a settle now clears claim_token (its fence), so a
-- pending row with a token whose lease has not ended is a POST under way somewhere. Before,
-- a retrying row kept its token: clear them, or they would read as in flight until due. An
-- old dispatcher still running then settles nothing and its row comes due again at the end
-- of its lease (a repeat the receiver de-duplicates by webhook-id, as after any crash).
UPDATE webhook_deliveries SET claim_token = NULL WHERE claim_token IS NOT NULL;
CREATE INDEX idx_webhook_deliveries_in_flight ON webhook_deliveries (tenant_id, webhook_id)
    WHERE status = 'pending' AND claim_token IS NOT NULL;
