-- The IngestionCompleteEvent outbox (migrations/0023_event_outbox_webhooks.sql).

-- name: commit_time
-- Read last thing before a promotion commits: its end (now() is its transaction's start).
SELECT clock_timestamp() AS at;

-- name: emit_event
-- Once per (batch, event type): a takeover or a duplicate SQS delivery that ends the batch again
-- inserts nothing, and so fans out nothing. The event's timestamp is the promotion's commit time
-- (the caller's commit_time), in UTC.
-- Every endpoint of the tenant subscribed to the type gets its delivery row in this statement.
WITH event AS (
    INSERT INTO event_outbox (tenant_id, event_type, batch_id, payload)
    VALUES (%(tenant_id)s, %(event_type)s, %(batch_id)s,
            %(payload)s::jsonb || jsonb_build_object('timestamp',
                to_char(%(at)s::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')))
    ON CONFLICT (batch_id, event_type) DO NOTHING
    RETURNING tenant_id, event_id, event_type
)
INSERT INTO webhook_deliveries (tenant_id, webhook_id, event_id)
SELECT w.tenant_id, w.webhook_id, e.event_id
FROM event e
JOIN webhooks w ON w.tenant_id = e.tenant_id AND e.event_type = ANY (w.event_types);
