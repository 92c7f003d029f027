-- The live stream's reads of the event outbox (migrations/0023, 0025); the outbox is written
-- by worker/records/completion.py and gateway/webhooks.

-- name: event_by_seq
-- One announced event, for the listener to fan out; tenant-scoped like every read.
SELECT seq, event_id, event_type, batch_id, payload, created_at
FROM event_outbox
WHERE tenant_id = %(tenant_id)s AND seq = %(seq)s

-- name: events_after
-- A resuming stream's missed events (after its Last-Event-ID), oldest first.
SELECT seq, event_id, event_type, batch_id, payload, created_at
FROM event_outbox
WHERE tenant_id = %(tenant_id)s AND seq > %(after)s
ORDER BY seq
LIMIT %(limit)s
