-- Live updates for the web UI (issue 13 item 7, docs/decisions/0160): every new event_outbox
-- row and every status change of a run or an import batch is announced on the channel
-- `df_live`, so one listening connection per gateway process learns of it at commit and fans
-- it out to that tenant's open streams (GET /v1/live). Valid on Postgres 16+.
-- Append-only: once applied anywhere, this file never changes.

-- The stream's event id, which a browser sends back as Last-Event-ID to resume: a number that
-- grows with every event (the UUID primary key does not order). Existing rows get numbers too.
ALTER TABLE event_outbox ADD COLUMN seq BIGINT GENERATED ALWAYS AS IDENTITY;
ALTER TABLE event_outbox ADD CONSTRAINT event_outbox_seq_key UNIQUE (seq);
-- A resuming stream reads its tenant's events after the id it was given.
CREATE INDEX idx_event_outbox_tenant_seq ON event_outbox (tenant_id, seq);

-- NOTIFY is delivered only when (and if) the transaction commits, in commit order, so a
-- listener never hears of a row it cannot read yet. Payloads stay small (ids and a status,
-- far below NOTIFY's 8000-byte limit): the gateway reads an event's body itself, once.
CREATE FUNCTION live_notify() RETURNS trigger AS $$
DECLARE
    message JSONB;
BEGIN
    IF TG_TABLE_NAME = 'event_outbox' THEN
        message := jsonb_build_object('kind', 'event', 'tenant_id', NEW.tenant_id,
                                      'seq', NEW.seq);
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

CREATE TRIGGER trg_event_outbox_live AFTER INSERT ON event_outbox
    FOR EACH ROW EXECUTE FUNCTION live_notify();
-- Status and stage only: the heartbeat and progress updates of a running job are far more
-- frequent, and the pages poll for those while a run is under way.
CREATE TRIGGER trg_ingestion_runs_live_new AFTER INSERT ON ingestion_runs
    FOR EACH ROW EXECUTE FUNCTION live_notify();
CREATE TRIGGER trg_ingestion_runs_live AFTER UPDATE OF status, stage ON ingestion_runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.stage IS DISTINCT FROM NEW.stage)
    EXECUTE FUNCTION live_notify();
CREATE TRIGGER trg_import_batches_live AFTER UPDATE OF status ON import_batches
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION live_notify();
