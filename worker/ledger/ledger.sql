-- Queries of the applier (worker/ledger/). Intake (gateway/events/) inserts event_ledger rows
-- and bumps their ingest_* counters; the applier owns process_state and everything after it
-- (migrations/0018_event_ledger.sql). Claims are across tenants (the worker serves them all);
-- every other statement names the row's tenant.

-- name: claim
-- One short statement, committed on its own (docs/decisions/0139): pick due pending rows with
-- FOR UPDATE SKIP LOCKED, so concurrent appliers never wait on each other or take the same row,
-- and in the same statement count the attempt and hide the row for the lease. The count is
-- committed BEFORE the apply starts: an applier killed mid-apply has still used an attempt, so a
-- crash loop ends in dead_letter. The lease (next_apply_at in the future) is what keeps other
-- appliers off a claimed row once this statement's row lock is gone; an applier that dies
-- leaves the row pending, and it comes back when the lease ends.
-- Tenants share a claim (docs/decisions/0166): every tenant with pending rows gets an equal
-- part of it, oldest first within the tenant, so one tenant's backlog cannot hold another's
-- events back. The tenants are listed by a loose index scan of idx_event_ledger_pending_tenant
-- (one probe per tenant), visited from just after %(after)s (the last tenant served) round to
-- it, and the claim stops at %(limit)s rows.
WITH RECURSIVE tenants AS (
    (SELECT tenant_id FROM event_ledger WHERE process_state = 'pending'
     ORDER BY tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT e.tenant_id FROM event_ledger e
            WHERE e.process_state = 'pending' AND e.tenant_id > t.tenant_id
            ORDER BY e.tenant_id LIMIT 1)
    FROM tenants t WHERE t.tenant_id IS NOT NULL
), share AS (
    SELECT ceil(%(limit)s::numeric / greatest(count(*), 1))::int AS n
    FROM tenants WHERE tenant_id IS NOT NULL
), turn AS (
    SELECT tenant_id FROM tenants WHERE tenant_id IS NOT NULL
    ORDER BY tenant_id <= %(after)s::uuid, tenant_id
), due AS (
    SELECT d.ledger_id
    FROM turn t CROSS JOIN share
    CROSS JOIN LATERAL (
        SELECT ledger_id FROM event_ledger
        WHERE tenant_id = t.tenant_id AND process_state = 'pending' AND next_apply_at <= now()
        ORDER BY next_apply_at, ledger_id
        LIMIT share.n
        FOR UPDATE SKIP LOCKED) d
    LIMIT %(limit)s
)
UPDATE event_ledger e
SET apply_attempt_count = e.apply_attempt_count + 1,
    next_apply_at = now() + make_interval(secs => %(lease_s)s)
FROM due
WHERE e.ledger_id = due.ledger_id
RETURNING e.ledger_id, e.tenant_id, e.source_system, e.source_event_id, e.source_sequence,
          e.source_emitted_at, e.type, e.payload, e.apply_attempt_count, e.apply_attempt_base;

-- name: lock_claimed
-- First statement of the apply transaction: the row is still ours only if it is pending and
-- nobody claimed it after us (the attempt count is the fence). The row lock, held to commit,
-- keeps a later claim off it even if our lease runs out meanwhile.
SELECT ledger_id FROM event_ledger
WHERE ledger_id = %(ledger_id)s AND tenant_id = %(tenant_id)s AND process_state = 'pending'
  AND apply_attempt_count = %(attempt)s
FOR UPDATE;

-- name: lock_entity
-- Appliers of one entity take turns (transaction-scoped), so "the newest event applied to it"
-- cannot change between our check and our write. Two ints keep these keys apart from the
-- runs' one-bigint locks and the records slots (tenant key, slot <= 100).
SELECT pg_advisory_xact_lock(hashtext(%(tenant_id)s::text || '|' || %(type)s),
                             hashtext(%(entity_key)s)) AS locked;

-- name: entity_head
-- The event most recently applied (not superseded) to this entity. Every apply was newer than
-- the head it found, so the latest applied is the newest: processed_at is clock_timestamp(),
-- read after the entity lock, and so strictly ordered among one entity's applies.
SELECT ledger_id, source_system, source_sequence, source_emitted_at FROM event_ledger
WHERE tenant_id = %(tenant_id)s AND type = %(type)s AND entity_key = %(entity_key)s
  AND process_state = 'processed' AND NOT superseded AND ledger_id <> %(ledger_id)s
ORDER BY processed_at DESC, ledger_id DESC
LIMIT 1;

-- name: mark_processed
UPDATE event_ledger
SET process_state = 'processed', processed_at = clock_timestamp(), process_error = NULL,
    superseded = %(superseded)s, entity_key = %(entity_key)s
WHERE ledger_id = %(ledger_id)s AND tenant_id = %(tenant_id)s AND process_state = 'pending'
  AND apply_attempt_count = %(attempt)s
RETURNING ledger_id;

-- name: dead_letter
UPDATE event_ledger
SET process_state = 'dead_letter', process_error = %(error)s, entity_key = %(entity_key)s
WHERE ledger_id = %(ledger_id)s AND tenant_id = %(tenant_id)s AND process_state = 'pending'
  AND apply_attempt_count = %(attempt)s
RETURNING ledger_id;

-- name: retry_later
-- A failure worth another try: the error is kept for triage while the row waits its backoff.
UPDATE event_ledger
SET process_error = %(error)s, next_apply_at = now() + make_interval(secs => %(delay_s)s)
WHERE ledger_id = %(ledger_id)s AND tenant_id = %(tenant_id)s AND process_state = 'pending'
  AND apply_attempt_count = %(attempt)s
RETURNING ledger_id;

-- name: next_due
-- How long until the next pending row comes due (--once waits for retries, not for ever).
SELECT count(*) AS pending, EXTRACT(EPOCH FROM min(next_apply_at) - now()) AS due_in_s
FROM event_ledger WHERE process_state = 'pending';

-- name: backlog
-- The start-up report and the lag gauge: pending and dead-letter counts, and how long the
-- oldest pending event has waited since it was first seen (event-ledger.md).
SELECT count(*) FILTER (WHERE process_state = 'pending') AS pending,
       count(*) FILTER (WHERE process_state = 'dead_letter') AS dead_letter,
       EXTRACT(EPOCH FROM now() - min(ingest_first_seen_at)
               FILTER (WHERE process_state = 'pending')) AS oldest_pending_s
FROM event_ledger WHERE process_state IN ('pending', 'dead_letter');

-- name: link_plaintiff
-- One plaintiff event's link to the tenant's judgment of the same normalised case number: the
-- one-row form of records.sql's link_plaintiffs (same keys, same ON CONFLICT). False when no
-- judgment has that case number (the plaintiff is kept without a link).
WITH linked AS (
    INSERT INTO plaintiff_judgments (tenant_id, plaintiff_id, judgment_id, batch_id)
    SELECT %(tenant_id)s::uuid, p.id, j.id, NULL
    FROM plaintiffs p, judgments j
    WHERE p.tenant_id = %(tenant_id)s AND p.dedupe_key = plaintiff_dedupe_key(
            %(data)s::jsonb->>'name', %(data)s::jsonb->>'address_line1', %(data)s::jsonb->>'zip')
      AND j.tenant_id = %(tenant_id)s AND j.case_number_normalized =
            records_case_key(%(data)s::jsonb->>'case_number')
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM judgments j WHERE j.tenant_id = %(tenant_id)s
               AND j.case_number_normalized =
                   records_case_key(%(data)s::jsonb->>'case_number'))
       AS judgment_found;
