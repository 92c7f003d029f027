-- The live stream's reads (migrations/0023, 0025, 0042); the outbox is written by
-- worker/records/completion.py and gateway/webhooks. An event's stream id is its tenant's own
-- number, tenant_seq (docs/decisions/0197).

-- name: event_by_seq
-- One announced event, for the listener to fan out; tenant-scoped like every read.
SELECT tenant_seq, event_id, event_type, batch_id, payload, created_at
FROM event_outbox
WHERE tenant_id = %(tenant_id)s AND tenant_seq = %(seq)s

-- name: events_after
-- A resuming stream's missed events (after its Last-Event-ID), oldest first.
SELECT tenant_seq, event_id, event_type, batch_id, payload, created_at
FROM event_outbox
WHERE tenant_id = %(tenant_id)s AND tenant_seq > %(after)s
ORDER BY tenant_seq
LIMIT %(limit)s

-- name: last_seq
-- The tenant's highest number so far: a Last-Event-ID above it was never this tenant's.
SELECT last_seq FROM live_event_counters WHERE tenant_id = %(tenant_id)s

-- name: ended_sessions
-- Of the sessions behind open streams, those that have ended since (docs/decisions/0055):
-- the user is gone or deactivated, or signed out / changed password (token version moved).
-- One query per heartbeat for every stream of this process, each row by its primary key.
SELECT s.user_id, s.token_version
FROM unnest(%(user_ids)s::uuid[], %(tenant_ids)s::uuid[], %(versions)s::int[])
    AS s (user_id, tenant_id, token_version)
LEFT JOIN users u ON u.user_id = s.user_id AND u.tenant_id = s.tenant_id
WHERE u.user_id IS NULL OR u.deactivated_at IS NOT NULL OR u.token_version <> s.token_version
