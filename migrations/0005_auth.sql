-- Sign-in and sessions (issue 9 §4): revocable tokens, deactivated users, a shared login throttle.
-- Append-only: once applied anywhere, this file never changes.

-- ── revocable sessions (docs/decisions/0055-revocable-sessions.md) ──────────────────────────
-- Every token carries its user's token_version (claim `ver`); each request compares it with this
-- row by primary key. Logout, a password change or reset, a role change and (de)activation move
-- the version on, which ends every token issued before.
ALTER TABLE users ADD COLUMN token_version INTEGER NOT NULL DEFAULT 0;
-- A deactivated user cannot sign in and its tokens stop working; the row stays (runs and
-- actions still name it).
ALTER TABLE users ADD COLUMN deactivated_at TIMESTAMPTZ;
ALTER TABLE users ADD COLUMN updated_at TIMESTAMPTZ NOT NULL DEFAULT now();

-- ── login throttle (docs/decisions/0056-login-throttle.md) ──────────────────────────────────
-- One row per throttled key: 'account:<sha256 of the e-mail>' or 'address:<client ip>'. In
-- Postgres, not in memory, so every gateway replica counts the same attempts. The e-mail is
-- hashed: attackers' guesses of addresses are not kept in clear.
CREATE TABLE login_throttle (
    key             TEXT PRIMARY KEY,
    -- attempts since the last lock-out or quiet window, counted before the password is checked
    attempts        INTEGER NOT NULL DEFAULT 0,
    -- lock-outs so far; each one doubles the next (capped)
    lockouts        INTEGER NOT NULL DEFAULT 0,
    locked_until    TIMESTAMPTZ,
    last_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX idx_login_throttle_last_attempt ON login_throttle (last_attempt_at);

-- Count one attempt against one key; returns the seconds to wait (0 = go ahead and check the
-- password). A plpgsql function so that read, decide and write happen under one row lock: the
-- FOR UPDATE serialises concurrent attempts on a key across every replica, so 40 parallel
-- guesses are counted one by one before any bcrypt check has finished.
CREATE FUNCTION login_attempt(p_key TEXT, p_max_attempts INTEGER, p_window_s DOUBLE PRECISION,
                              p_lockout_s DOUBLE PRECISION, p_lockout_max_s DOUBLE PRECISION)
RETURNS DOUBLE PRECISION LANGUAGE plpgsql AS $$
DECLARE
    r login_throttle%ROWTYPE;
    wait_s DOUBLE PRECISION;
BEGIN
    -- Rows that hold nothing any more (attempts and lock-outs both forgotten) go away; SKIP
    -- LOCKED so pruning never waits behind an attempt in flight.
    DELETE FROM login_throttle WHERE key IN (
        SELECT key FROM login_throttle
        WHERE last_attempt_at < now() - make_interval(secs => p_window_s + p_lockout_max_s)
          AND key <> p_key
        LIMIT 20 FOR UPDATE SKIP LOCKED);

    INSERT INTO login_throttle (key) VALUES (p_key) ON CONFLICT (key) DO NOTHING;
    SELECT * INTO r FROM login_throttle WHERE key = p_key FOR UPDATE;
    IF r.locked_until > now() THEN
        -- Locked: refused without counting, so waiting out the lock is all a caller can do.
        RETURN extract(epoch FROM r.locked_until - now());
    END IF;
    -- A quiet window forgets the attempts; a quiet as long as the longest lock-out forgets the
    -- lock-outs too, so an old incident does not double today's first lock-out.
    IF r.last_attempt_at < now() - make_interval(secs => p_window_s) THEN
        r.attempts := 0;
    END IF;
    IF r.last_attempt_at < now() - make_interval(secs => p_window_s + p_lockout_max_s) THEN
        r.lockouts := 0;
    END IF;
    r.attempts := r.attempts + 1;
    IF r.attempts > p_max_attempts THEN
        wait_s := least(p_lockout_s * power(2, least(r.lockouts, 30)), p_lockout_max_s);
        UPDATE login_throttle
        SET attempts = 0, lockouts = r.lockouts + 1, last_attempt_at = now(),
            locked_until = now() + make_interval(secs => wait_s)
        WHERE key = p_key;
        RETURN wait_s;
    END IF;
    UPDATE login_throttle SET attempts = r.attempts, lockouts = r.lockouts, last_attempt_at = now()
    WHERE key = p_key;
    RETURN 0;
END
$$;
