"""Authentication and roles: who may call the gateway, and what a refused caller is told."""

from __future__ import annotations

import uuid

import httpx
import pytest

from gateway import auth
from tests.conftest import TEST_PASSWORD, tenant_of
from tests.support.stack import TEST_JWT_SECRET


def assert_unauthorized(response: httpx.Response) -> str:
    assert response.status_code == 401, response.text
    body = response.json()
    assert body["code"] == "unauthorized"
    # Helpful: one sentence that says what to do next.
    detail = body["detail"]
    assert detail.endswith(".") and "\n" not in detail and "sign in" in detail.lower()
    return detail


def me(gateway, token: str | None) -> httpx.Response:
    with gateway.client(token) as client:
        return client.get("/v1/auth/me")


def token_for(user, *, secret: str = TEST_JWT_SECRET, hours: float = 1, role: str | None = None):
    principal = auth.Principal(user.user_id, user.tenant_id, role or user.role)
    return auth.issue_token(principal, secret, hours)


# ── tokens ──────────────────────────────────────────────────────────────────────────────────
def test_valid_token_identifies_the_caller(gateway, tenants):
    user = tenants.user(role="user")
    response = me(gateway, user.token)
    assert response.status_code == 200, response.text
    assert response.json() == {"user_id": str(user.user_id), "tenant_id": str(user.tenant_id),
                               "role": "user"}


def test_missing_token_is_401(gateway):
    # Given no Authorization header, When a protected route is called
    response = me(gateway, None)
    # Then 401 says how to authenticate
    assert "Authorization: Bearer" in assert_unauthorized(response)


def test_non_bearer_scheme_is_401(gateway, tenants):
    user = tenants.user()
    with gateway.client() as client:
        response = client.get("/v1/auth/me", headers={"Authorization": f"Basic {user.token}"})
    assert_unauthorized(response)


def test_tampered_token_is_401(gateway, tenants):
    # Given a valid token with one character of its signature changed
    user = tenants.user()
    head, payload, signature = user.token.split(".")
    i = len(signature) // 2
    flipped = signature[:i] + ("A" if signature[i] != "A" else "B") + signature[i + 1:]
    # When it is used
    response = me(gateway, f"{head}.{payload}.{flipped}")
    # Then it is refused as invalid
    assert "invalid" in assert_unauthorized(response)


def test_token_with_edited_claims_is_401(gateway, tenants):
    # Given a user's token whose payload was swapped for an admin's claims of another tenant
    user = tenants.user(role="user")
    forged = token_for(user, role="admin", secret="x" * 40)
    head, _, signature = user.token.split(".")
    response = me(gateway, f"{head}.{forged.split('.')[1]}.{signature}")
    assert_unauthorized(response)


def test_expired_token_is_401(gateway, tenants):
    # Given a token that expired an hour ago
    user = tenants.user()
    expired = token_for(user, hours=-1)
    # When it is used, Then the user is told their session expired
    assert "expired" in assert_unauthorized(me(gateway, expired))


def test_token_signed_with_another_secret_is_401(gateway, tenants):
    user = tenants.user()
    other = token_for(user, secret="another-secret-" + "y" * 40)
    assert_unauthorized(me(gateway, other))


def test_token_with_unknown_role_is_401(gateway, tenants):
    # Given a correctly signed token whose role is not one we know
    user = tenants.user()
    odd = token_for(user, role="superuser")
    # When it is used, Then it is refused and the reason names the role
    assert "role" in assert_unauthorized(me(gateway, odd))


def test_garbage_token_is_401(gateway):
    assert_unauthorized(me(gateway, "not-a-jwt"))


@pytest.mark.parametrize("path", ["/v1/ingestion-runs", "/v1/documents"])
def test_protected_reads_need_a_token(gateway, path):
    with gateway.client() as client:
        assert_unauthorized(client.get(path))


def test_upload_needs_a_token(gateway, conn):
    with gateway.client() as client:
        response = client.post("/v1/ingest", files={"file": ("a.txt", b"hello")})
    assert_unauthorized(response)
    assert conn.execute("SELECT count(*) AS n FROM ingestion_runs").fetchone()["n"] == 0


# ── login ───────────────────────────────────────────────────────────────────────────────────
def login(gateway, email: str, password: str, tenant: str | None = None) -> httpx.Response:
    with gateway.client() as client:
        return client.post("/v1/auth/login", json={
            "tenant": tenant or tenant_of(email), "email": email, "password": password})


def test_login_with_right_password_returns_a_working_token(gateway, tenants):
    # Given a user, When they log in with the right password (e-mail in another case)
    user = tenants.user(role="user")
    response = login(gateway, user.email.upper(), TEST_PASSWORD)
    # Then they get a bearer token
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["token_type"] == "bearer" and body["expires_in"] > 0
    assert body["user"] == {"user_id": str(user.user_id), "tenant_id": str(user.tenant_id),
                            "role": "user"}
    # that works on a protected route
    whoami = me(gateway, body["access_token"])
    assert whoami.status_code == 200 and whoami.json()["user_id"] == str(user.user_id)


def test_login_with_wrong_password_is_401(gateway, tenants):
    user = tenants.user()
    response = login(gateway, user.email, TEST_PASSWORD + "!")
    assert response.status_code == 401, response.text
    assert response.json()["code"] == "unauthorized"
    assert "access_token" not in response.json()


def test_login_with_unknown_email_is_401_with_the_same_message(gateway, tenants):
    # Given a known user, When someone logs in as an unknown address and as a wrong password
    user = tenants.user()
    unknown = login(gateway, "nobody@nowhere.test", TEST_PASSWORD)
    wrong = login(gateway, user.email, "wrong password")
    # Then both are 401 and indistinguishable, so addresses cannot be probed
    assert unknown.status_code == wrong.status_code == 401
    assert unknown.json() == wrong.json()


def test_login_with_missing_field_is_400(gateway):
    with gateway.client() as client:
        response = client.post("/v1/auth/login", json={"email": "a@b.test"})
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_request"


# ── roles ───────────────────────────────────────────────────────────────────────────────────
def test_user_role_cannot_create_users_403(gateway, tenants, conn):
    # Given a plain user
    user = tenants.user(role="user")
    # When they call the admin route
    with gateway.client(user.token) as client:
        response = client.post("/v1/users", json={"email": "new@acme.test",
                                                  "password": "long enough pw"})
    # Then 403 says who may do it, and no user was created
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["code"] == "forbidden" and "admin" in body["detail"]
    assert conn.execute("SELECT 1 FROM users WHERE email = 'new@acme.test'").fetchone() is None


def test_admin_creates_a_user_who_can_log_in(gateway, tenants):
    # Given an admin
    admin = tenants.user(role="admin")
    email = f"new-{uuid.uuid4().hex[:6]}@acme.test"
    # When they create a user
    with gateway.client(admin.token) as client:
        created = client.post("/v1/users", json={"email": email, "password": "s3cret-enough"})
    # Then the user exists in the admin's tenant with the default role
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["email"] == email and body["role"] == "user"
    assert body["tenant_id"] == str(admin.tenant_id)
    assert "password_hash" not in body and "password" not in body
    # and can log in with that password
    response = login(gateway, email, "s3cret-enough")
    assert response.status_code == 200, response.text
    assert response.json()["user"]["tenant_id"] == str(admin.tenant_id)


def test_admin_creating_a_duplicate_email_is_409(gateway, tenants):
    admin = tenants.user(role="admin")
    with gateway.client(admin.token) as client:
        response = client.post("/v1/users", json={"email": admin.email,
                                                  "password": "s3cret-enough"})
    assert response.status_code == 409, response.text
    assert response.json()["code"] == "conflict"


def test_admin_creating_a_user_with_unknown_role_is_400(gateway, tenants, conn):
    admin = tenants.user(role="admin")
    with gateway.client(admin.token) as client:
        response = client.post("/v1/users", json={"email": "x@acme.test",
                                                  "password": "s3cret-enough", "role": "root"})
    assert response.status_code == 400, response.text
    assert conn.execute("SELECT 1 FROM users WHERE email = 'x@acme.test'").fetchone() is None


def test_an_operator_route_refuses_a_tenant_admin_by_saying_what_it_is(gateway, tenants):
    # Given a tenant admin, When they open operators' routes
    admin = tenants.user(role="admin")
    with gateway.client(admin.token) as client:
        imports = client.get("/v1/admin/imports/ops")
        letters = client.get("/v1/admin/dlq")
    # Then each 403 says what that route shows and where their own tenant's is
    assert imports.status_code == letters.status_code == 403
    assert "import errors" in imports.json()["detail"] and "/v1/imports/ops" in \
        imports.json()["detail"] and "dead letter" not in imports.json()["detail"]
    assert "/v1/dead-letters" in letters.json()["detail"]
