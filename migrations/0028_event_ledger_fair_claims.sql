-- The applier's claim shares each batch between the tenants with pending events
-- (docs/decisions/0166): it lists them by a loose index scan (one probe per tenant) and takes
-- each one's due rows oldest first. Pending rows only, like idx_event_ledger_claim: processed
-- and dead-letter rows, most of the table, are not in it.
CREATE INDEX idx_event_ledger_pending_tenant ON event_ledger (tenant_id, next_apply_at, ledger_id)
    WHERE process_state = 'pending';
