-- Queries of the event ledger's intake side and of API keys (gateway/events/). Every query a
-- request runs filters by the caller's tenant_id; the writer's upsert carries it per row.

-- name: upsert_events
-- One statement per writer group, one row per distinct key (a statement may not touch one key
-- twice). A repeat only bumps the ingest counters, and counts a conflict when it differs from
-- the stored event (payload hash, type, sequence or emitted time); payload, state and apply
-- columns stay the first delivery's (docs/decisions/0135, 0191).
-- Ledger ids are arrival order, which "newest wins" falls back on (ADR 0140): they are drawn in
-- the group's array order (rank 0..n-1; a function scan yields its rows in order), while
-- rows are inserted, and so locked, in key order, as every writer does (fewer deadlocks).
-- The result names each key's rank and the stored envelope, so the writer tells new,
-- duplicate and each kind of conflict apart; the time as whole microseconds, which a stored
-- value outside Python's range cannot break.
WITH input AS (
    -- The group as one JSON array of rows (orjson on the gateway): eight Postgres arrays cost
    -- the gateway more CPU to write, per event, than the rest of the intake path.
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb)
        AS t (rank int, tenant_id uuid, source_system text, source_event_id text,
              source_sequence bigint, source_emitted_at timestamptz, type text, payload jsonb,
              payload_sha256 text)
), ids AS MATERIALIZED (
    SELECT g AS rank, nextval(pg_get_serial_sequence('event_ledger', 'ledger_id')) AS ledger_id
    FROM generate_series(0, %(n)s - 1) AS g
), up AS (
    INSERT INTO event_ledger AS l (ledger_id, tenant_id, source_system, source_event_id,
                                   source_sequence, source_emitted_at, type, payload,
                                   payload_sha256)
    SELECT ids.ledger_id, i.tenant_id, i.source_system, i.source_event_id, i.source_sequence,
           i.source_emitted_at, i.type, i.payload, i.payload_sha256
    FROM input i JOIN ids USING (rank)
    ORDER BY i.tenant_id, i.source_system, i.source_event_id
    ON CONFLICT (tenant_id, source_system, source_event_id) DO UPDATE SET
        ingest_attempt_count = l.ingest_attempt_count + 1,
        ingest_last_seen_at = now(),
        conflict_count = l.conflict_count + (
            l.payload_sha256 <> EXCLUDED.payload_sha256 OR l.type <> EXCLUDED.type
            OR l.source_sequence IS DISTINCT FROM EXCLUDED.source_sequence
            OR l.source_emitted_at IS DISTINCT FROM EXCLUDED.source_emitted_at)::int,
        last_conflict_sha256 = CASE WHEN l.payload_sha256 <> EXCLUDED.payload_sha256
                                    THEN EXCLUDED.payload_sha256 ELSE l.last_conflict_sha256 END,
        last_conflict_at = CASE WHEN l.payload_sha256 <> EXCLUDED.payload_sha256
                                     OR l.type <> EXCLUDED.type
                                     OR l.source_sequence IS DISTINCT FROM EXCLUDED.source_sequence
                                     OR l.source_emitted_at IS DISTINCT FROM EXCLUDED.source_emitted_at
                                THEN now() ELSE l.last_conflict_at END
    RETURNING (xmax = 0) AS inserted, ledger_id, tenant_id, source_system, source_event_id,
              payload_sha256, type, source_sequence,
              CASE WHEN isfinite(source_emitted_at)
                   THEN (extract(epoch FROM source_emitted_at) * 1000000)::bigint END AS emitted_us
)
SELECT i.rank, up.inserted, up.ledger_id, up.payload_sha256, up.type, up.source_sequence,
       up.emitted_us
FROM up JOIN input i USING (tenant_id, source_system, source_event_id);

-- name: count_repeats
-- Further deliveries of keys that the same group already upserted once: the counters only.
-- conflicts counts every differing delivery; conflict_sha256 is the last differing payload.
UPDATE event_ledger AS l SET
    ingest_attempt_count = l.ingest_attempt_count + r.repeats,
    ingest_last_seen_at = now(),
    conflict_count = l.conflict_count + r.conflicts,
    last_conflict_sha256 = COALESCE(r.conflict_sha256, l.last_conflict_sha256),
    last_conflict_at = CASE WHEN r.conflicts > 0 THEN now() ELSE l.last_conflict_at END
FROM unnest(%(ledger_id)s::bigint[], %(repeats)s::int[], %(conflicts)s::int[],
            %(conflict_sha256)s::text[]) AS r (ledger_id, repeats, conflicts, conflict_sha256)
WHERE l.ledger_id = r.ledger_id;

-- name: cursor
-- The highest sequence of the run that starts at the lowest stored one (gaps and islands):
-- the first row whose successor is missing or more than one higher. The window reads
-- idx_event_ledger_cursor in order and stops at the first gap.
SELECT seq AS sequence
FROM (SELECT source_sequence AS seq,
             lead(source_sequence) OVER (ORDER BY source_sequence) AS next_seq
      FROM event_ledger
      WHERE tenant_id = %(tenant_id)s AND source_system = %(source_system)s
        AND source_sequence IS NOT NULL) AS s
WHERE next_seq IS NULL OR next_seq > seq + 1
ORDER BY seq
LIMIT 1;

-- name: ledger_stats
-- What a starting gateway reports (DESIGN.md "Event ledger"): fleet-wide, no tenant named.
SELECT (SELECT count(*) FROM event_ledger WHERE process_state = 'pending') AS pending,
       (SELECT count(*) FROM event_ledger WHERE process_state = 'dead_letter') AS dead_letter,
       (SELECT EXTRACT(EPOCH FROM now() - min(ingest_first_seen_at))
        FROM event_ledger WHERE process_state = 'pending') AS oldest_pending_age_s;

-- name: insert_api_key
INSERT INTO api_keys (tenant_id, name, key_hash, prefix, created_by)
VALUES (%(tenant_id)s, %(name)s, %(key_hash)s, %(prefix)s, %(created_by)s)
RETURNING key_id, name, prefix, created_at;

-- name: list_api_keys
SELECT key_id, name, prefix, created_by, created_at, revoked_at, last_used_at
FROM api_keys WHERE tenant_id = %(tenant_id)s
ORDER BY created_at DESC, key_id;

-- name: revoke_api_key
-- Revoking twice keeps the first revocation's time; an unknown or other tenant's id finds no row.
UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now()),
                    revoked_by = COALESCE(revoked_by, %(user_id)s)
WHERE tenant_id = %(tenant_id)s AND key_id = %(key_id)s
RETURNING key_id;

-- name: key_caller
-- The guard's lookup of a presented key, by its hash; last_used_at is written at most once a
-- minute per key, so a busy producer does not turn every request into a write.
WITH k AS (
    SELECT key_id, tenant_id FROM api_keys
    WHERE key_hash = %(key_hash)s AND revoked_at IS NULL
), touched AS (
    UPDATE api_keys SET last_used_at = now()
    FROM k WHERE api_keys.key_id = k.key_id
      AND (api_keys.last_used_at IS NULL OR api_keys.last_used_at < now() - interval '1 minute')
)
SELECT key_id, tenant_id FROM k;
