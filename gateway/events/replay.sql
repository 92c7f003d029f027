-- Reading and replaying the event ledger (gateway/events/replay.py): the operators' and tenant
-- admins' view of events and the reset of dead letters to pending. %(tenant_id)s NULL = every
-- tenant (operators and the CLI only; the routes always pass the caller's tenant otherwise).
-- Filters: NULL matches everything; error is a case-insensitive substring of process_error.

-- name: list_events
SELECT ledger_id, tenant_id, source_system, source_event_id, source_sequence, source_emitted_at,
       type, process_state, process_error, processed_at, superseded, apply_attempt_count,
       apply_attempt_base,
       next_apply_at, ingest_first_seen_at, ingest_last_seen_at, ingest_attempt_count,
       conflict_count, entity_key, count(*) OVER () AS total
FROM event_ledger
WHERE (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
  AND (%(state)s::text IS NULL OR process_state = %(state)s)
  AND (%(source_system)s::text IS NULL OR source_system = %(source_system)s)
  AND (%(type)s::text IS NULL OR type = %(type)s)
  AND (%(error)s::text IS NULL OR strpos(lower(process_error), lower(%(error)s)) > 0)
ORDER BY ledger_id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: count_events
-- The total when the page came back empty (an offset past the end).
SELECT count(*) AS total FROM event_ledger
WHERE (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
  AND (%(state)s::text IS NULL OR process_state = %(state)s)
  AND (%(source_system)s::text IS NULL OR source_system = %(source_system)s)
  AND (%(type)s::text IS NULL OR type = %(type)s)
  AND (%(error)s::text IS NULL OR strpos(lower(process_error), lower(%(error)s)) > 0);

-- name: show_event
SELECT * FROM event_ledger
WHERE ledger_id = %(ledger_id)s AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s);

-- name: replays_of
-- The replays that reset this event, by id or by filter (event_replay_items, migration 0019).
SELECT r.replay_id, r.actor, r.created_at
FROM event_replay_items i JOIN event_replays r USING (replay_id)
WHERE i.ledger_id = %(ledger_id)s AND r.tenant_id = %(tenant_id)s
ORDER BY r.created_at DESC, r.replay_id DESC LIMIT 20;

-- name: replay_ids
-- Chosen dead letters back to pending, due now, with a fresh attempt budget. Only dead
-- letters move: a processed or pending id is left alone (and not counted). The count moves on
-- and the budget starts from it (apply_attempt_base, ADR 0194): it never goes back, so no
-- older claim's fence can match again.
UPDATE event_ledger
SET process_state = 'pending', apply_attempt_count = apply_attempt_count + 1,
    apply_attempt_base = apply_attempt_count + 1, next_apply_at = now()
WHERE ledger_id = ANY (%(ledger_ids)s) AND process_state = 'dead_letter'
  AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
RETURNING ledger_id, tenant_id;

-- name: replay_filter
UPDATE event_ledger
SET process_state = 'pending', apply_attempt_count = apply_attempt_count + 1,
    apply_attempt_base = apply_attempt_count + 1, next_apply_at = now()
WHERE process_state = 'dead_letter'
  AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
  AND (%(source_system)s::text IS NULL OR source_system = %(source_system)s)
  AND (%(type)s::text IS NULL OR type = %(type)s)
  AND (%(error)s::text IS NULL OR strpos(lower(process_error), lower(%(error)s)) > 0)
RETURNING ledger_id, tenant_id;

-- name: record_replay
INSERT INTO event_replays (tenant_id, actor, actor_user_id, ledger_ids, filter, event_count)
VALUES (%(tenant_id)s, %(actor)s, %(actor_user_id)s, %(ledger_ids)s, %(filter)s, %(count)s)
RETURNING replay_id;

-- name: record_replay_items
-- The events this replay reset, one row each, in the replay's transaction.
INSERT INTO event_replay_items (replay_id, ledger_id)
SELECT %(replay_id)s, unnest(%(ledger_ids)s::bigint[]);

-- name: lock_event
-- An operator's action on one event: the row, locked for the action's transaction. An applier
-- inside its apply holds the lock until it commits; the action then sees the applied state.
SELECT ledger_id, tenant_id, process_state FROM event_ledger
WHERE ledger_id = %(ledger_id)s AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
FOR UPDATE;

-- name: record_action
-- Before the change: the previous state, error and (for an edit) payload come from the row.
INSERT INTO event_actions (tenant_id, ledger_id, action, actor, actor_user_id, reason,
                           previous_state, previous_error, previous_payload)
SELECT tenant_id, ledger_id, %(action)s, %(actor)s, %(actor_user_id)s, %(reason)s,
       process_state, process_error, CASE WHEN %(action)s = 'edit' THEN payload END
FROM event_ledger WHERE ledger_id = %(ledger_id)s AND tenant_id = %(tenant_id)s
RETURNING action_id, created_at;

-- name: discard_event
-- Settled without being applied; its last error stays for the record.
UPDATE event_ledger SET process_state = 'discarded'
WHERE ledger_id = %(ledger_id)s AND tenant_id = %(tenant_id)s
  AND process_state IN ('pending', 'dead_letter');

-- name: edit_event
-- The corrected payload, due now with a fresh budget (the count moves on: see replay_ids).
-- payload_sha256 stays the producer's: it is how a resend of the original is recognised as a
-- duplicate, not a conflict (ADR 0194).
UPDATE event_ledger
SET payload = %(payload)s::jsonb, process_state = 'pending', process_error = NULL,
    apply_attempt_count = apply_attempt_count + 1, apply_attempt_base = apply_attempt_count + 1,
    next_apply_at = now()
WHERE ledger_id = %(ledger_id)s AND tenant_id = %(tenant_id)s
  AND process_state IN ('pending', 'dead_letter');

-- name: actions_of
SELECT action_id, action, actor, reason, previous_state, previous_error, created_at
FROM event_actions
WHERE ledger_id = %(ledger_id)s AND tenant_id = %(tenant_id)s
ORDER BY created_at DESC, action_id DESC LIMIT 50;
