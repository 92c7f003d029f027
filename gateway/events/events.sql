-- Queries of the event ledger's intake side and of API keys (gateway/events/). Every query a
-- request runs filters by the caller's tenant_id; the writer's upsert carries it per row.

-- name: create_intake_table
-- Each writer connection's staging table (docs/decisions/0280): a group arrives by binary COPY,
-- one row per delivery in the group's array order (rank), and is gone at commit. Temporary: no
-- WAL, no catalog churn per group (made once per connection), invisible to other writers.
CREATE TEMP TABLE IF NOT EXISTS event_intake (
    rank              int NOT NULL,
    tenant_id         uuid NOT NULL,
    source_system     text NOT NULL,
    source_event_id   text NOT NULL,
    source_sequence   bigint,
    source_emitted_at timestamptz,
    type              text NOT NULL,
    payload           text NOT NULL,     -- canonical JSON text: cast once, by the INSERT
    payload_sha256    text NOT NULL
) ON COMMIT DELETE ROWS;

-- name: intake_group
-- One statement per writer group, after the group was copied into event_intake: inserts each
-- new key, counts every repeat delivery, detects conflicts and returns each delivery's
-- outcome in rank order (docs/decisions/0135, 0191, 0280).
-- - A statement may not touch one key twice, so only each key's first delivery in the group
--   goes to the INSERT; it carries the number of deliveries (ingest_attempt_count), and for a
--   new key its later deliveries' conflicts are counted against it (`again`). For a stored key
--   DO UPDATE counts the group's deliveries that differ from the stored event: the delivery
--   itself when there is one (the common case), else the staged deliveries of that key.
-- - A repeat only bumps the ingest counters; payload, state and apply columns stay the first
--   delivery's. A delivery differs when its payload hash, type, sequence or emitted time is
--   not the producer's first (an operator's correction of the envelope keeps the producer's
--   values aside, migration 0080, so a resend of the original stays a duplicate).
-- - Ledger ids are arrival order, which "newest wins" falls back on (ADR 0140): drawn in rank
--   order (a function scan yields its rows in order), while rows are inserted, and so locked,
--   in key order, as every writer does (fewer deadlocks).
WITH s AS MATERIALIZED (
    SELECT i.*, count(*) OVER k AS deliveries, min(i.rank) OVER k AS first_rank
    FROM event_intake i
    WINDOW k AS (PARTITION BY i.tenant_id, i.source_system, i.source_event_id)
), ids AS MATERIALIZED (
    SELECT g AS rank, nextval('event_ledger_ledger_id_seq') AS ledger_id
    FROM generate_series(0, %(n)s - 1) AS g
), again AS (
    -- A new key's later deliveries in the same group, against its first.
    SELECT f.rank,
           count(*) FILTER (WHERE o.payload_sha256 <> f.payload_sha256 OR o.type <> f.type
                            OR o.source_sequence IS DISTINCT FROM f.source_sequence
                            OR o.source_emitted_at IS DISTINCT FROM f.source_emitted_at)
               AS conflicts,
           (array_agg(o.payload_sha256 ORDER BY o.rank DESC)
               FILTER (WHERE o.payload_sha256 <> f.payload_sha256))[1] AS conflict_sha256
    FROM s o JOIN s f ON f.rank = o.first_rank
    WHERE o.deliveries > 1 AND o.rank <> o.first_rank
    GROUP BY f.rank
), up AS (
    INSERT INTO event_ledger AS l (ledger_id, tenant_id, source_system, source_event_id,
                                   source_sequence, source_emitted_at, type, payload,
                                   payload_sha256, ingest_attempt_count, conflict_count,
                                   last_conflict_sha256, last_conflict_at)
    SELECT ids.ledger_id, s.tenant_id, s.source_system, s.source_event_id, s.source_sequence,
           s.source_emitted_at, s.type, s.payload::jsonb, s.payload_sha256, s.deliveries,
           COALESCE(a.conflicts, 0), a.conflict_sha256,
           CASE WHEN a.conflicts > 0 THEN now() END
    FROM s JOIN ids USING (rank) LEFT JOIN again a USING (rank)
    WHERE s.rank = s.first_rank
    ORDER BY s.tenant_id, s.source_system, s.source_event_id
    ON CONFLICT (tenant_id, source_system, source_event_id) DO UPDATE SET
        ingest_attempt_count = l.ingest_attempt_count + EXCLUDED.ingest_attempt_count,
        ingest_last_seen_at = now(),
        (conflict_count, last_conflict_sha256, last_conflict_at) = (
            SELECT l.conflict_count + d.conflicts,
                   COALESCE(d.conflict_sha256, l.last_conflict_sha256),
                   CASE WHEN d.conflicts > 0 THEN now() ELSE l.last_conflict_at END
            FROM (SELECT count(*) FILTER (WHERE o.payload_sha256 <> l.payload_sha256
                                          OR o.type <> l.type
                                          OR o.source_sequence IS DISTINCT FROM
                                             CASE WHEN l.envelope_edited
                                                  THEN l.producer_source_sequence
                                                  ELSE l.source_sequence END
                                          OR o.source_emitted_at IS DISTINCT FROM
                                             CASE WHEN l.envelope_edited
                                                  THEN l.producer_source_emitted_at
                                                  ELSE l.source_emitted_at END) AS conflicts,
                         (array_agg(o.payload_sha256 ORDER BY o.rank DESC)
                             FILTER (WHERE o.payload_sha256 <> l.payload_sha256))[1]
                             AS conflict_sha256
                  -- The delivery itself when the group holds one of this key (the planner
                  -- skips the scan then), else the group's deliveries of it.
                  FROM (SELECT 0 AS rank, EXCLUDED.payload_sha256, EXCLUDED.type,
                               EXCLUDED.source_sequence, EXCLUDED.source_emitted_at
                        WHERE EXCLUDED.ingest_attempt_count = 1
                        UNION ALL
                        SELECT i.rank, i.payload_sha256, i.type, i.source_sequence,
                               i.source_emitted_at
                        FROM event_intake i
                        WHERE EXCLUDED.ingest_attempt_count > 1
                          AND (i.tenant_id, i.source_system, i.source_event_id)
                              = (l.tenant_id, l.source_system, l.source_event_id)) o) d)
    RETURNING (xmax = 0) AS inserted, ledger_id, tenant_id, source_system, source_event_id,
              payload_sha256, type,
              CASE WHEN envelope_edited THEN producer_source_sequence
                   ELSE source_sequence END AS sent_sequence,
              CASE WHEN envelope_edited THEN producer_source_emitted_at
                   ELSE source_emitted_at END AS sent_emitted_at
)
SELECT s.rank, up.ledger_id,
       CASE WHEN up.inserted AND s.rank = s.first_rank THEN 'new'
            WHEN s.payload_sha256 <> up.payload_sha256 THEN 'payload_differs'
            WHEN s.type <> up.type THEN 'type_differs'
            WHEN s.source_sequence IS DISTINCT FROM up.sent_sequence THEN 'sequence_differs'
            WHEN s.source_emitted_at IS DISTINCT FROM up.sent_emitted_at
                THEN 'emitted_at_differs'
            ELSE 'duplicate' END AS outcome
FROM s JOIN up USING (tenant_id, source_system, source_event_id)
ORDER BY s.rank;

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

-- name: key_callers
-- The guard's lookup of the keys of every request waiting at one moment (keys.Lookups): each
-- live key's row by its hash; a hash without a row is an unknown or revoked key. last_used_at
-- is written at most once a minute per key, so a busy producer does not turn every request
-- into a write.
WITH k AS (
    SELECT key_id, tenant_id, key_hash FROM api_keys
    WHERE key_hash = ANY(%(key_hashes)s::text[]) AND revoked_at IS NULL
), touched AS (
    UPDATE api_keys SET last_used_at = now()
    FROM k WHERE api_keys.key_id = k.key_id
      AND (api_keys.last_used_at IS NULL OR api_keys.last_used_at < now() - interval '1 minute')
)
SELECT key_id, tenant_id, key_hash FROM k
