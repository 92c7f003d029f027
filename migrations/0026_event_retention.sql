-- Event retention (docs/decisions/0161): cleanup removes settled events with their deliveries.
-- Deleting an event_outbox row checks webhook_deliveries' foreign key, and the cleanup asks
-- whether an event still has a pending delivery: both look deliveries up by event, which no
-- index of migration 0023 starts with. Events are found by age across tenants.
-- Append-only: once applied anywhere, this file never changes.

CREATE INDEX idx_webhook_deliveries_event ON webhook_deliveries (tenant_id, event_id);
CREATE INDEX idx_event_outbox_created ON event_outbox (created_at);
