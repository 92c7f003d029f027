-- Reading and replaying the event ledger (gateway/events/replay.py): the operators' and tenant
-- admins' view of events and the reset of dead letters to pending. %(tenant_id)s NULL = every
-- tenant (operators and the CLI only; the routes always pass the caller's tenant otherwise).
-- Filters: NULL matches everything; error is a case-insensitive substring of process_error.
-- Every listing, replay and purge shares one filter, `matching` below: the tenant (NULL: every
-- tenant), state, source, type, a part of the error, first seen since (inclusive) and until
-- (exclusive). It takes the place of the matching placeholder when the queries are loaded
-- (gateway/events/replay.py).

-- name: matching
(%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
  AND (%(state)s::text IS NULL OR process_state = %(state)s)
  AND (%(source_system)s::text IS NULL OR source_system = %(source_system)s)
  AND (%(type)s::text IS NULL OR type = %(type)s)
  AND (%(error)s::text IS NULL OR strpos(lower(process_error), lower(%(error)s)) > 0)
  AND (%(since)s::timestamptz IS NULL OR ingest_first_seen_at >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR ingest_first_seen_at < %(until)s);

-- name: list_events
SELECT ledger_id, tenant_id, source_system, source_event_id, source_sequence, source_emitted_at,
       type, process_state, process_error, processed_at, superseded, apply_attempt_count,
       apply_attempt_base,
       next_apply_at, ingest_first_seen_at, ingest_last_seen_at, ingest_attempt_count,
       conflict_count, entity_key, version, count(*) OVER () AS total
FROM event_ledger
WHERE /* matching */
ORDER BY ledger_id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: count_events
-- The total when the page came back empty (an offset past the end).
SELECT count(*) AS total FROM event_ledger
WHERE /* matching */;

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
    apply_attempt_base = apply_attempt_count + 1, next_apply_at = now(), version = version + 1
WHERE ledger_id = ANY (%(ledger_ids)s) AND process_state = 'dead_letter'
  AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
RETURNING ledger_id, tenant_id;

-- name: replay_filter
UPDATE event_ledger
SET process_state = 'pending', apply_attempt_count = apply_attempt_count + 1,
    apply_attempt_base = apply_attempt_count + 1, next_apply_at = now(), version = version + 1
WHERE process_state = 'dead_letter'
  AND /* matching */
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
SELECT ledger_id, tenant_id, process_state, version FROM event_ledger
WHERE ledger_id = %(ledger_id)s AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
FOR UPDATE;

-- name: action_taken
-- The action that moved an event on from what a retried request saw (docs/decisions/0283): by
-- the version it was taken on, or else the latest taken from the state the request expected.
SELECT action_id, action, request_sha256 FROM event_actions
WHERE ledger_id = %(ledger_id)s AND tenant_id = %(tenant_id)s
  AND (from_version = %(version)s
       OR (%(version)s::int IS NULL AND previous_state = %(state)s))
ORDER BY action_id DESC LIMIT 1;

-- name: record_action
-- Before the change: the previous state, error, envelope and (for an edit) payload come from
-- the row, in SQL: a stored value Python cannot read back is copied, never loaded.
INSERT INTO event_actions (tenant_id, ledger_id, action, actor, actor_user_id, reason,
                           previous_state, previous_error, previous_payload,
                           previous_source_sequence, previous_source_emitted_at, from_version,
                           request_sha256)
SELECT tenant_id, ledger_id, %(action)s, %(actor)s, %(actor_user_id)s, %(reason)s,
       process_state, process_error, CASE WHEN %(action)s = 'edit' THEN payload END,
       source_sequence, source_emitted_at, version, %(request_sha256)s
FROM event_ledger WHERE ledger_id = %(ledger_id)s AND tenant_id = %(tenant_id)s
RETURNING action_id, created_at;

-- name: discard_event
-- Settled without being applied; its last error stays for the record.
UPDATE event_ledger SET process_state = 'discarded', version = version + 1
WHERE ledger_id = %(ledger_id)s AND tenant_id = %(tenant_id)s
  AND process_state IN ('pending', 'dead_letter');

-- name: edit_event
-- The corrected payload and/or envelope, due now with a fresh budget (the count moves on: see
-- replay_ids). payload_sha256 stays the producer's, and so do the producer's sequence and
-- time, kept aside at the first correction (migration 0080): a resend of the original is
-- recognised as a duplicate, not a conflict (ADR 0194, 0284). NULL payload: keep it.
UPDATE event_ledger
SET payload = COALESCE(%(payload)s::jsonb, payload),
    producer_source_sequence = CASE WHEN envelope_edited OR NOT %(envelope)s
                                    THEN producer_source_sequence ELSE source_sequence END,
    producer_source_emitted_at = CASE WHEN envelope_edited OR NOT %(envelope)s
                                      THEN producer_source_emitted_at
                                      ELSE source_emitted_at END,
    envelope_edited = envelope_edited OR %(envelope)s,
    source_sequence = CASE WHEN %(set_sequence)s THEN %(source_sequence)s::bigint
                           ELSE source_sequence END,
    source_emitted_at = CASE WHEN %(set_emitted_at)s THEN %(source_emitted_at)s::timestamptz
                             ELSE source_emitted_at END,
    process_state = 'pending', process_error = NULL,
    apply_attempt_count = apply_attempt_count + 1, apply_attempt_base = apply_attempt_count + 1,
    next_apply_at = now(), version = version + 1
WHERE ledger_id = %(ledger_id)s AND tenant_id = %(tenant_id)s
  AND process_state IN ('pending', 'dead_letter');

-- name: actions_of
SELECT action_id, action, actor, reason, previous_state, previous_error, purge_id,
       previous_source_sequence, previous_source_emitted_at, from_version, created_at
FROM event_actions
WHERE ledger_id = %(ledger_id)s AND tenant_id = %(tenant_id)s
ORDER BY created_at DESC, action_id DESC LIMIT 50;

-- ── discard by filter (docs/decisions/0282) ───────────────────────────────────────────────
-- name: count_discardable
-- The preview: how many pending or dead-letter events match.
SELECT count(*) AS n FROM event_ledger
WHERE process_state IN ('pending', 'dead_letter')
  AND /* matching */;

-- name: start_purge
INSERT INTO event_purges (tenant_id, actor, actor_user_id, reason, filter, previewed)
VALUES (%(tenant_id)s, %(actor)s, %(actor_user_id)s, %(reason)s, %(filter)s, %(previewed)s)
RETURNING purge_id;

-- name: purge_slice
-- One committed slice of a purge: the next %(limit)s matching events past %(after)s (keyset by
-- ledger_id, so a slice never rescans what earlier slices set aside), locked in ledger_id
-- order like every multi-row locker, each recorded in event_actions exactly as a single
-- discard is (who, why, previous state and error, the version it was taken on) and set aside.
-- The CTEs share one snapshot: the action rows read the events as they were.
WITH picked AS (
    SELECT ledger_id FROM event_ledger
    WHERE process_state IN ('pending', 'dead_letter') AND ledger_id > %(after)s
      AND /* matching */
    ORDER BY ledger_id
    LIMIT %(limit)s
    FOR UPDATE
), recorded AS (
    INSERT INTO event_actions (tenant_id, ledger_id, action, actor, actor_user_id, reason,
                               previous_state, previous_error, previous_source_sequence,
                               previous_source_emitted_at, from_version, purge_id)
    SELECT e.tenant_id, e.ledger_id, 'discard', %(actor)s, %(actor_user_id)s, %(reason)s,
           e.process_state, e.process_error, e.source_sequence, e.source_emitted_at,
           e.version, %(purge_id)s
    FROM event_ledger e JOIN picked USING (ledger_id)
), moved AS (
    UPDATE event_ledger e SET process_state = 'discarded', version = e.version + 1
    FROM picked WHERE e.ledger_id = picked.ledger_id
    RETURNING e.ledger_id
), counted AS (
    UPDATE event_purges SET event_count = event_count + (SELECT count(*) FROM moved)
    WHERE purge_id = %(purge_id)s
)
SELECT (SELECT count(*) FROM moved) AS n, (SELECT max(ledger_id) FROM picked) AS last;

-- name: finish_purge
UPDATE event_purges SET finished_at = now() WHERE purge_id = %(purge_id)s
RETURNING event_count;
