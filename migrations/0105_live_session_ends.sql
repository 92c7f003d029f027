-- Revocation pushed to open live streams (issue 36, docs/decisions/0322): when a user's
-- sessions end (sign-out, password change or reset, role change: token_version moves; a
-- deactivation; the row removed), the channel `df_live` says so at commit, and every gateway
-- ends that user's open streams at once instead of at its next heartbeat check.
-- NOTIFY is delivered in commit order with the event announcements of migration 0025, so an
-- event committed after the sign-out reaches the listener after the session's end.
-- Append-only: once applied anywhere, this file never changes.

CREATE FUNCTION live_session_ended() RETURNS trigger AS $$
DECLARE
    gone users%ROWTYPE;
BEGIN
    IF TG_OP = 'DELETE' THEN
        gone := OLD;
    ELSE
        gone := NEW;
    END IF;
    -- The version the user's tokens must now carry, and whether the user may sign in at all:
    -- a stream of an older version, or of a user no longer active, ends.
    PERFORM pg_notify('df_live', jsonb_build_object(
        'kind', 'session', 'tenant_id', gone.tenant_id, 'user_id', gone.user_id,
        'token_version', gone.token_version,
        'active', TG_OP <> 'DELETE' AND gone.deactivated_at IS NULL)::text);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trg_users_live_session AFTER UPDATE OF token_version, deactivated_at ON users
    FOR EACH ROW WHEN (OLD.token_version IS DISTINCT FROM NEW.token_version
                       OR (NEW.deactivated_at IS NOT NULL AND OLD.deactivated_at IS NULL))
    EXECUTE FUNCTION live_session_ended();
CREATE TRIGGER trg_users_live_session_gone AFTER DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION live_session_ended();
