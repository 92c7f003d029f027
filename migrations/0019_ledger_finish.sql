-- Which events each replay reset (docs/decisions/0144). event_replays records a filter replay
-- by its filter, not the events it matched, so an event's history could only list every filter
-- replay of its tenant. One row per (replay, event) actually moved, written in the replay's
-- transaction by gateway/events/replay.py; an event's history reads it by ledger_id.
-- Valid on Postgres 16+; needs no contrib extension.
-- Append-only: once applied anywhere, this file never changes.

CREATE TABLE event_replay_items (
    replay_id BIGINT NOT NULL REFERENCES event_replays(replay_id) ON DELETE CASCADE,
    ledger_id BIGINT NOT NULL REFERENCES event_ledger(ledger_id) ON DELETE CASCADE,
    PRIMARY KEY (ledger_id, replay_id)
);
CREATE INDEX idx_event_replay_items_replay ON event_replay_items (replay_id);

-- Replays by id made before this migration: their ids are on record, so they carry over.
-- Filter replays made before it never recorded what they moved; they stay in event_replays
-- but are attributed to no event.
INSERT INTO event_replay_items (replay_id, ledger_id)
SELECT r.replay_id, id
FROM event_replays r CROSS JOIN LATERAL unnest(r.ledger_ids) AS id
WHERE EXISTS (SELECT 1 FROM event_ledger e WHERE e.ledger_id = id)
ON CONFLICT DO NOTHING;
