-- API key revocations announced at commit (issue 32, docs/decisions/0440): each gateway keeps
-- the live keys it has looked up in memory while it listens on `df_api_keys`, and forgets a
-- key as soon as its revocation (or its row's removal) is announced here. The payload is the
-- key_id only: never the hash, never a tenant's data.
-- Append-only: once applied anywhere, this file never changes.

CREATE FUNCTION api_key_revoked() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('df_api_keys', OLD.key_id::text);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

-- A revocation, or anything that could make a cached key answer for other than it did: its
-- hash, its tenant or its id changed (nothing does today; a successor's UPDATE must not slip by).
CREATE TRIGGER trg_api_keys_revoked AFTER UPDATE OF revoked_at, key_hash, tenant_id, key_id
    ON api_keys
    FOR EACH ROW WHEN (NEW.revoked_at IS DISTINCT FROM OLD.revoked_at
                       OR NEW.key_hash IS DISTINCT FROM OLD.key_hash
                       OR NEW.tenant_id IS DISTINCT FROM OLD.tenant_id
                       OR NEW.key_id IS DISTINCT FROM OLD.key_id)
    EXECUTE FUNCTION api_key_revoked();
CREATE TRIGGER trg_api_keys_gone AFTER DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION api_key_revoked();
