"""Accounts across tenants and the sign-in lock (docs/decisions/0202, 0204).

- Whether another tenant has an e-mail address changes no answer a tenant admin gets: e-mails
  are unique per tenant, and sign-in names the tenant.
- Five wrong passwords still lock an account, but the right password from a client that
  signed in to it before (its device cookie) still signs in, and the account's admins see
  the lock.
"""

from __future__ import annotations

import re
import subprocess

import httpx
import pytest

from gateway.auth import devices
from tests.conftest import TEST_PASSWORD
from tests.integration.test_web import sign_in as web_sign_in
from tests.support import stack

WRONG = "not the password"


def sign_in(gateway, tenant: str, email: str, password: str,
            client: httpx.Client | None = None) -> httpx.Response:
    body = {"tenant": tenant, "email": email, "password": password}
    if client is not None:
        return client.post("/v1/auth/login", json=body)
    with gateway.client() as fresh:
        return fresh.post("/v1/auth/login", json=body)


# ── e-mail addresses across tenants ─────────────────────────────────────────────────────────
def test_an_address_another_tenant_has_gets_the_same_answer_as_a_new_one(gateway, tenants):
    # Given someone@rival.test, a user of the tenant rival, and an admin of another tenant
    rival = tenants.user(tenant="rival", role="user", email="someone@rival.test")
    admin = tenants.user(tenant="acme", role="admin")
    # When the admin adds that address, and an address nobody has
    with gateway.client(admin.token) as client:
        taken = client.post("/v1/users", json={"email": "someone@rival.test",
                                               "password": "another password"})
        fresh = client.post("/v1/users", json={"email": "nobody@rival.test",
                                               "password": "another password"})
        again = client.post("/v1/users", json={"email": "someone@rival.test",
                                               "password": "another password"})
    # Then both are created alike: nothing says the rival tenant has the first
    assert taken.status_code == fresh.status_code == 201, (taken.text, fresh.text)
    assert set(taken.json()) == set(fresh.json())
    # and only the admin's own tenant having it is a conflict
    assert again.status_code == 409 and "Your tenant already has" in again.json()["detail"]
    # Each account signs in to its own tenant with its own password, and only there
    assert sign_in(gateway, "rival", rival.email, TEST_PASSWORD).json()["user"]["tenant_id"] \
        == str(rival.tenant_id)
    mine = sign_in(gateway, "acme", "someone@rival.test", "another password")
    assert mine.status_code == 200 and mine.json()["user"]["tenant_id"] == str(admin.tenant_id)
    assert sign_in(gateway, "acme", rival.email, TEST_PASSWORD).status_code == 401
    assert sign_in(gateway, "rival", rival.email, "another password").status_code == 401


def test_sign_in_names_the_tenant_and_an_unknown_one_reads_like_a_wrong_password(gateway,
                                                                                   tenants):
    user = tenants.user(tenant="acme", role="user")
    with gateway.client() as client:
        unnamed = client.post("/v1/auth/login", json={"email": user.email,
                                                      "password": TEST_PASSWORD})
    unknown = sign_in(gateway, "no-such-tenant", user.email, TEST_PASSWORD)
    wrong = sign_in(gateway, "acme", user.email, WRONG)
    any_case = sign_in(gateway, "ACME", user.email, TEST_PASSWORD)
    assert unnamed.status_code == 400 and "tenant" in unnamed.json()["detail"]
    assert unknown.status_code == wrong.status_code == 401 and unknown.json() == wrong.json()
    assert any_case.status_code == 200


def test_the_web_form_names_the_tenant_and_remembers_it(gateway, tenants):
    user = tenants.user(tenant="acme", role="user")
    with httpx.Client(base_url=gateway.url, timeout=30, follow_redirects=False) as browser:
        form = browser.get("/login")
        assert 'name="tenant"' in form.text
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)
        signed_in = browser.post("/login", data={"tenant": "acme", "email": user.email,
                                                 "password": TEST_PASSWORD, "csrf_token": token})
        assert signed_in.status_code == 303, signed_in.text
        browser.cookies.delete("df_session")
        again = browser.get("/login")
    assert 'name="tenant" type="text" autocomplete="organization" required value="acme"' in \
        again.text


def test_the_cli_needs_the_tenant_only_for_an_address_two_tenants_have(gateway, stack_env,
                                                                        tenants):
    shared = "twice@both.test"
    tenants.user(tenant="acme", role="user", email=shared)
    tenants.user(tenant="globex", role="user", email=shared)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return stack.ingest(list(args), stack_env)

    ambiguous = cli("token", "--email", shared)
    named = cli("token", "--email", shared, "--tenant", "globex")
    assert ambiguous.returncode == 1 and "--tenant" in ambiguous.stderr
    assert named.returncode == 0, named.stderr


# ── the sign-in lock and device cookies ────────────────────────────────────────────────────
@pytest.fixture
def locking(stack_env, out_dir):
    gateway = stack.start_gateway({**stack_env, "LOGIN_MAX_ATTEMPTS_PER_ACCOUNT": "3",
                                   "LOGIN_MAX_ATTEMPTS_PER_ADDRESS": "1000",
                                   "LOGIN_LOCKOUT_S": "600"}, out_dir, name="gateway-locking")
    yield gateway
    gateway.stop()


def test_a_device_that_signed_in_before_still_signs_in_while_others_are_locked_out(locking,
                                                                                    tenants):
    # Given a user who signed in from their laptop (which keeps the device cookie)
    user = tenants.user(tenant="acme", role="user")
    with httpx.Client(base_url=locking.url, timeout=30) as laptop:
        first = sign_in(locking, "acme", user.email, TEST_PASSWORD, laptop)
        assert first.status_code == 200 and devices.COOKIE in laptop.cookies
        cookie = next(c for c in first.headers.get_list("set-cookie")
                      if c.startswith(devices.COOKIE))
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie
        # When a stranger fails on purpose until the account locks
        for _ in range(3):
            assert sign_in(locking, "acme", user.email, WRONG).status_code == 401
        stranger = sign_in(locking, "acme", user.email, TEST_PASSWORD)
        # Then the stranger (even with the right password) is refused, the laptop is not
        assert stranger.status_code == 429
        again = sign_in(locking, "acme", user.email, TEST_PASSWORD, laptop)
        assert again.status_code == 200, again.text
        # and a laptop that keeps guessing locks itself, not the account a second time
        for _ in range(3):
            assert sign_in(locking, "acme", user.email, WRONG, laptop).status_code == 401
        assert sign_in(locking, "acme", user.email, TEST_PASSWORD, laptop).status_code == 429


def test_a_device_cookie_opens_only_its_own_account(locking, tenants):
    user, other = tenants.user(tenant="acme", role="user"), tenants.user(tenant="acme", role="user")
    with httpx.Client(base_url=locking.url, timeout=30) as laptop:
        assert sign_in(locking, "acme", user.email, TEST_PASSWORD, laptop).status_code == 200
        for _ in range(3):
            sign_in(locking, "acme", other.email, WRONG)
        # The user's laptop holds a cookie for the user, not for the other account
        assert sign_in(locking, "acme", other.email, TEST_PASSWORD, laptop).status_code == 429
        forged = laptop.cookies[devices.COOKIE][:-4] + "AAAA"
        laptop.cookies.set(devices.COOKIE, forged)
        for _ in range(3):
            sign_in(locking, "acme", user.email, WRONG)
        assert sign_in(locking, "acme", user.email, TEST_PASSWORD, laptop).status_code == 429


def test_the_users_admins_see_the_lock(locking, tenants):
    # Given a locked account
    admin, user = tenants.user(tenant="acme", role="admin"), tenants.user(tenant="acme", role="user")
    stranger = tenants.user(tenant="globex", role="admin")
    for _ in range(4):
        sign_in(locking, "acme", user.email, WRONG)
    # When its admin lists the users, and opens the Users page
    with locking.client(admin.token) as client:
        listed = {u["email"]: u for u in client.get("/v1/users").json()["items"]}
    with web_sign_in(locking, admin.email) as browser:
        page = browser.get("/admin/users")
    with locking.client(stranger.token) as client:
        theirs = client.get("/v1/users").json()["items"]
    # Then the lock shows there, for that user only, and nowhere in another tenant
    assert listed[user.email]["sign_in_locked_until"] is not None
    assert listed[admin.email]["sign_in_locked_until"] is None
    assert "Sign-in locked until" in page.text
    assert all(u["email"] != user.email for u in theirs)
