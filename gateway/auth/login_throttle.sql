-- Queries of the sign-in throttle (gateway/auth/login_throttle.py); the logic is the function
-- login_attempt of migrations/0005_auth.sql.

-- name: attempt
-- Both keys are counted, account first then address: every caller locks rows in that order, so
-- two attempts never wait on each other's locks in a cycle. greatest() evaluates both.
SELECT greatest(
    login_attempt(%(account)s, %(per_account)s, %(window_s)s, %(lockout_s)s, %(lockout_max_s)s),
    login_attempt(%(address)s, %(per_address)s, %(window_s)s, %(lockout_s)s, %(lockout_max_s)s)
) AS wait_s;

-- name: attempt_device
-- A client with the account's device cookie: its own key, with the account's limit.
SELECT login_attempt(%(device)s, %(per_account)s, %(window_s)s, %(lockout_s)s,
                     %(lockout_max_s)s) AS wait_s;

-- name: succeeded
WITH account AS (
    DELETE FROM login_throttle WHERE key = %(account)s
)
UPDATE login_throttle SET attempts = greatest(attempts - 1, 0) WHERE key = %(address)s;

-- name: forget_account
DELETE FROM login_throttle WHERE key = %(account)s;

-- name: locks
-- For the Users page: which of a tenant's accounts are locked now.
SELECT key, locked_until, lockouts FROM login_throttle
WHERE key = ANY(%(keys)s) AND locked_until > now();
