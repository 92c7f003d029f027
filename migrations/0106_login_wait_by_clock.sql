-- The sign-in throttle's wait is read off the clock, not the transaction's start (found by CI:
-- 40 parallel wrong passwords with an 8 s lock-out got Retry-After 9).
-- now() is when a transaction began. An attempt that began, then waited on the key's row lock
-- while another attempt set the lock (at that one's own, later, now() + lockout) computed
-- locked_until - now() over its own earlier start, so its wait could exceed the lock-out itself.
-- clock_timestamp() is read after the row lock is held, so the wait is never longer than the
-- lock that is left, and a lock is judged over when it really is. Same logic otherwise as
-- migrations/0005_auth.sql. Append-only: once applied anywhere, this file never changes.

CREATE OR REPLACE FUNCTION login_attempt(p_key TEXT, p_max_attempts INTEGER,
                                         p_window_s DOUBLE PRECISION,
                                         p_lockout_s DOUBLE PRECISION,
                                         p_lockout_max_s DOUBLE PRECISION)
RETURNS DOUBLE PRECISION LANGUAGE plpgsql AS $$
DECLARE
    r login_throttle%ROWTYPE;
    wait_s DOUBLE PRECISION;
    at TIMESTAMPTZ;
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
    -- The row is ours now: whatever another attempt did to it is committed, so read the clock.
    at := clock_timestamp();
    IF r.locked_until > at THEN
        -- Locked: refused without counting, so waiting out the lock is all a caller can do.
        RETURN extract(epoch FROM r.locked_until - at);
    END IF;
    -- A quiet window forgets the attempts; a quiet as long as the longest lock-out forgets the
    -- lock-outs too, so an old incident does not double today's first lock-out.
    IF r.last_attempt_at < at - make_interval(secs => p_window_s) THEN
        r.attempts := 0;
    END IF;
    IF r.last_attempt_at < at - make_interval(secs => p_window_s + p_lockout_max_s) THEN
        r.lockouts := 0;
    END IF;
    r.attempts := r.attempts + 1;
    IF r.attempts > p_max_attempts THEN
        wait_s := least(p_lockout_s * power(2, least(r.lockouts, 30)), p_lockout_max_s);
        UPDATE login_throttle
        SET attempts = 0, lockouts = r.lockouts + 1, last_attempt_at = at,
            locked_until = at + make_interval(secs => wait_s)
        WHERE key = p_key;
        RETURN wait_s;
    END IF;
    UPDATE login_throttle SET attempts = r.attempts, lockouts = r.lockouts, last_attempt_at = at
    WHERE key = p_key;
    RETURN 0;
END;
$$;
