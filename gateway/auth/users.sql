-- Queries of tenants and users (gateway/auth/users.py, and the per-request session check of
-- gateway/auth/__init__.py). Every query an admin's request runs filters by tenant_id.

-- name: upsert_tenant
INSERT INTO tenants (name) VALUES (%(name)s)
ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
RETURNING tenant_id;

-- name: insert_user
INSERT INTO users (tenant_id, email, password_hash, role)
VALUES (%(tenant_id)s, %(email)s, %(password_hash)s, %(role)s)
RETURNING user_id, tenant_id, email, role, token_version;

-- name: set_password
-- The CLI's create --replace: a new password and role end the user's sessions.
UPDATE users SET password_hash = %(password_hash)s, role = %(role)s,
                 token_version = token_version + 1, updated_at = now()
WHERE tenant_id = %(tenant_id)s AND email = %(email)s
RETURNING user_id, tenant_id, email, role, token_version;

-- name: find_login_user
-- Sign-in names the tenant (docs/decisions/0202): the tenant's name in any case, then the
-- e-mail within it. An exact spelling wins over another case of the same name.
SELECT u.user_id, u.tenant_id, u.email, u.role, u.password_hash, u.token_version,
       u.deactivated_at
FROM users u JOIN tenants t ON t.tenant_id = u.tenant_id
WHERE lower(t.name) = lower(%(tenant)s) AND u.email = %(email)s
ORDER BY t.name = %(tenant)s DESC
LIMIT 1;

-- name: find_users_by_email
-- The operators' CLI: an e-mail across tenants, or within the one named.
SELECT u.user_id, u.tenant_id, t.name AS tenant_name, u.email, u.role, u.password_hash,
       u.token_version, u.deactivated_at
FROM users u JOIN tenants t ON t.tenant_id = u.tenant_id
WHERE u.email = %(email)s AND (%(tenant)s::text IS NULL OR t.name = %(tenant)s)
ORDER BY t.name;

-- name: tenant_name
SELECT name FROM tenants WHERE tenant_id = %(tenant_id)s;

-- name: find_tenant
SELECT tenant_id FROM tenants WHERE name = %(name)s;

-- name: find_user
SELECT user_id, tenant_id, email, role, password_hash, token_version, deactivated_at
FROM users WHERE tenant_id = %(tenant_id)s AND user_id = %(user_id)s;

-- name: session_user
-- Once per authenticated request, by primary key: is the token's version still the user's,
-- and is the user active? The role comes from here, not from the token.
SELECT role, token_version, deactivated_at FROM users
WHERE user_id = %(user_id)s AND tenant_id = %(tenant_id)s;

-- name: list_users
SELECT user_id, tenant_id, email, role, created_at, updated_at, deactivated_at
FROM users WHERE tenant_id = %(tenant_id)s
ORDER BY email
LIMIT %(limit)s;

-- name: lock_user
-- The row an admin is about to change, locked so the checks below it hold until the update.
SELECT user_id, tenant_id, email, role, password_hash, token_version, deactivated_at
FROM users WHERE tenant_id = %(tenant_id)s AND user_id = %(user_id)s
FOR UPDATE;

-- name: update_user
-- Every change to who a user is or what they may do ends their sessions: the version moves on.
-- NULL parameters leave a field as it is; `active` false keeps the first deactivation time.
UPDATE users SET
    role = coalesce(%(role)s, role),
    password_hash = coalesce(%(password_hash)s, password_hash),
    deactivated_at = CASE WHEN %(active)s::boolean IS NULL THEN deactivated_at
                          WHEN %(active)s::boolean THEN NULL
                          ELSE coalesce(deactivated_at, now()) END,
    token_version = token_version + 1,
    updated_at = now()
WHERE tenant_id = %(tenant_id)s AND user_id = %(user_id)s
RETURNING user_id, tenant_id, email, role, created_at, updated_at, deactivated_at, token_version;
