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
-- First statement of a batch's transaction (docs/decisions/0281): of the batch's events, those
-- still ours, locked in ledger_id order (every locker of several rows goes in that order). Ours
-- = pending and nobody claimed it after us (the attempt count is the fence). The row locks,
-- held to commit, keep a later claim off them even if our lease runs out meanwhile.
SELECT e.ledger_id
FROM event_ledger e
JOIN unnest(%(ledger_ids)s::bigint[], %(attempts)s::int[]) AS b (ledger_id, attempt)
  ON b.ledger_id = e.ledger_id
WHERE e.tenant_id = %(tenant_id)s AND e.process_state = 'pending'
  AND e.apply_attempt_count = b.attempt
ORDER BY e.ledger_id
FOR UPDATE OF e;

-- name: lock_entities
-- Appliers of one entity take turns (transaction-scoped), so "the newest event applied to it"
-- cannot change between our check and our write. A batch takes all its entities' locks in one
-- order (sorted keys; OFFSET 0 keeps the sort below the lock calls), so two appliers never
-- wait on each other in a circle. Two ints keep these keys apart from the runs' one-bigint
-- locks and the records slots (tenant key, slot <= 100).
SELECT count(pg_advisory_xact_lock(k.type_key, k.entity_key)) AS locked
FROM (SELECT DISTINCT hashtext(%(tenant_id)s::text || '|' || x.type) AS type_key,
                      hashtext(x.entity_key) AS entity_key
      FROM unnest(%(types)s::text[], %(entity_keys)s::text[]) AS x (type, entity_key)
      ORDER BY 1, 2 OFFSET 0) k;

-- name: entity_heads
-- Per entity of the batch, the event most recently applied (not superseded) to it, outside
-- the batch. Every apply was newer than the head it found, so the latest applied is the
-- newest: processed_at is clock_timestamp(), taken after the entity locks, and so strictly
-- ordered among one entity's applies (a batch marks only its winner not superseded).
SELECT x.type, x.entity_key, h.ledger_id, h.source_system, h.source_sequence,
       h.source_emitted_at
FROM unnest(%(types)s::text[], %(entity_keys)s::text[]) AS x (type, entity_key)
CROSS JOIN LATERAL (
    SELECT ledger_id, source_system, source_sequence, source_emitted_at FROM event_ledger
    WHERE tenant_id = %(tenant_id)s AND type = x.type AND entity_key = x.entity_key
      AND process_state = 'processed' AND NOT superseded
      AND ledger_id <> ALL (%(ledger_ids)s::bigint[])
    ORDER BY processed_at DESC, ledger_id DESC
    LIMIT 1) h;

-- name: mark_processed
-- The batch's events, applied or superseded, in the batch's transaction; fenced as the lock.
UPDATE event_ledger e
SET process_state = 'processed', processed_at = clock_timestamp(), process_error = NULL,
    superseded = b.superseded, entity_key = b.entity_key, version = e.version + 1
FROM unnest(%(ledger_ids)s::bigint[], %(attempts)s::int[], %(superseded)s::boolean[],
            %(entity_keys)s::text[]) AS b (ledger_id, attempt, superseded, entity_key)
WHERE e.ledger_id = b.ledger_id AND e.tenant_id = %(tenant_id)s
  AND e.process_state = 'pending' AND e.apply_attempt_count = b.attempt
RETURNING e.ledger_id;

-- name: dead_letter
-- Events that can never apply as they are (or gave up), with their errors; one statement for
-- a claim's worth. Each row is fenced on its own claim, across tenants: a claim spans them.
UPDATE event_ledger e
SET process_state = 'dead_letter', process_error = b.error, version = e.version + 1
FROM unnest(%(ledger_ids)s::bigint[], %(tenant_ids)s::uuid[], %(attempts)s::int[],
            %(errors)s::text[]) AS b (ledger_id, tenant_id, attempt, error)
WHERE e.ledger_id = b.ledger_id AND e.tenant_id = b.tenant_id
  AND e.process_state = 'pending' AND e.apply_attempt_count = b.attempt
RETURNING e.ledger_id;

-- name: retry_later
-- A failure worth another try: the error is kept for triage while the row waits its backoff.
UPDATE event_ledger
SET process_error = %(error)s, next_apply_at = now() + make_interval(secs => %(delay_s)s),
    version = version + 1
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

-- name: link_plaintiffs
-- The batch's plaintiff events' links to the tenant's judgments of the same normalised case
-- number: records.sql's link_plaintiffs over the batch's rows (same keys, same ON CONFLICT). A
-- plaintiff whose case number no judgment has is kept without a link.
INSERT INTO plaintiff_judgments (tenant_id, plaintiff_id, judgment_id, batch_id)
SELECT %(tenant_id)s::uuid, p.id, j.id, NULL
FROM jsonb_array_elements(%(data)s::jsonb) AS x (data)
JOIN plaintiffs p ON p.tenant_id = %(tenant_id)s AND p.dedupe_key = plaintiff_dedupe_key(
         x.data->>'name', x.data->>'address_line1', x.data->>'zip')
JOIN judgments j ON j.tenant_id = %(tenant_id)s
                AND j.case_number_normalized = records_case_key(x.data->>'case_number')
ON CONFLICT DO NOTHING;
