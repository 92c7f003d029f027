-- Per-tenant event numbers for the live stream (issue 22, docs/decisions/0197). GET /v1/live
-- used event_outbox.seq, one counter for every tenant, as its SSE id: a tenant's first event
-- arrived as id 14 and told it that 13 events of others had happened. Each tenant now counts
-- its own events. Valid on Postgres 16+; needs no contrib extension.
-- Append-only: once applied anywhere, this file never changes.

CREATE TABLE live_event_counters (
    tenant_id UUID PRIMARY KEY REFERENCES tenants(tenant_id),
    last_seq  BIGINT NOT NULL CHECK (last_seq >= 0)
);

ALTER TABLE event_outbox ADD COLUMN tenant_seq BIGINT;
UPDATE event_outbox o SET tenant_seq = n.rn
FROM (SELECT event_id, row_number() OVER (PARTITION BY tenant_id ORDER BY seq) AS rn
      FROM event_outbox) n
WHERE o.event_id = n.event_id;
INSERT INTO live_event_counters (tenant_id, last_seq)
SELECT tenant_id, max(tenant_seq) FROM event_outbox GROUP BY tenant_id;
ALTER TABLE event_outbox ALTER COLUMN tenant_seq SET NOT NULL;
ALTER TABLE event_outbox ADD CONSTRAINT event_outbox_tenant_seq_key UNIQUE (tenant_id, tenant_seq);

-- Every insert takes its tenant's next number from the counter row, whoever inserts (the
-- worker's completion, the gateway's test event). The row stays locked to the inserting
-- transaction's end, so one tenant's numbers also commit in order: a stream resuming after
-- id n cannot miss an event numbered below a later one (the gap ADR 0160 described). Other
-- tenants never wait on it. An insert that ON CONFLICT skips leaves a gap: ids only grow.
CREATE FUNCTION event_outbox_tenant_seq() RETURNS trigger AS $$
BEGIN
    INSERT INTO live_event_counters AS c (tenant_id, last_seq) VALUES (NEW.tenant_id, 1)
    ON CONFLICT (tenant_id) DO UPDATE SET last_seq = c.last_seq + 1
    RETURNING last_seq INTO NEW.tenant_seq;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trg_event_outbox_tenant_seq BEFORE INSERT ON event_outbox
    FOR EACH ROW EXECUTE FUNCTION event_outbox_tenant_seq();

-- The announcement carries the tenant's number beside the global one (still read by gateways
-- of the previous release until they are replaced).
CREATE OR REPLACE FUNCTION live_notify() RETURNS trigger AS $$
DECLARE
    message JSONB;
BEGIN
    IF TG_TABLE_NAME = 'event_outbox' THEN
        message := jsonb_build_object('kind', 'event', 'tenant_id', NEW.tenant_id,
                                      'seq', NEW.seq, 'tenant_seq', NEW.tenant_seq);
    ELSIF TG_TABLE_NAME = 'ingestion_runs' THEN
        message := jsonb_build_object('kind', 'run', 'tenant_id', NEW.tenant_id,
                                      'run_id', NEW.run_id, 'batch_id', NEW.batch_id,
                                      'status', NEW.status, 'stage', NEW.stage);
    ELSE
        message := jsonb_build_object('kind', 'batch', 'tenant_id', NEW.tenant_id,
                                      'batch_id', NEW.batch_id, 'status', NEW.status);
    END IF;
    PERFORM pg_notify('df_live', message::text);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
