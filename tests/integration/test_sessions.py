"""Sign-in throttling and revocable sessions against a real gateway process and Postgres.

The throttle counts in Postgres (shared by replicas); tokens carry the user's version, which
logout, a password change, a role change and deactivation move on (docs/decisions/0055, 0056).
"""

from __future__ import annotations

import re
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from gateway.web import session
from tests.conftest import TEST_PASSWORD, tenant_of
from tests.integration.test_web import page_csrf, sign_in
from tests.support import stack

WRONG = "wrong password!"


@pytest.fixture
def throttled(stack_env, out_dir):
    """Start a gateway with the throttle settings a test names (small windows)."""
    started = []

    def start(**settings: str) -> stack.Process:
        env = {**stack_env, **{k.upper(): v for k, v in settings.items()}}
        process = stack.start_gateway(env, out_dir, name=f"gateway-{len(started)}")
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def login(gateway, email: str, password: str, headers: dict | None = None) -> httpx.Response:
    with gateway.client() as client:
        return client.post("/v1/auth/login", json={"tenant": tenant_of(email), "email": email,
                                                   "password": password},
                           headers=headers or {})


def me(gateway, token: str) -> httpx.Response:
    with gateway.client(token) as client:
        return client.get("/v1/auth/me")


def assert_throttled(response: httpx.Response) -> int:
    assert response.status_code == 429, response.text
    assert response.json()["code"] == "too_many_attempts"
    assert "try again" in response.json()["detail"]
    retry_after = int(response.headers["retry-after"])
    assert retry_after >= 1
    return retry_after


# ── throttling ──────────────────────────────────────────────────────────────────────────────
def test_parallel_guesses_are_throttled_and_the_lockout_grows(throttled, tenants):
    gateway = throttled(login_max_attempts_per_account="5", login_max_attempts_per_address="1000",
                        login_lockout_s="8", login_lockout_max_s="60")
    user = tenants.user(role="user")

    # When 40 wrong passwords arrive at once
    with ThreadPoolExecutor(40) as pool:
        answers = list(pool.map(lambda _: login(gateway, user.email, WRONG), range(40)))

    # Then only the first five were checked; the rest were refused with Retry-After
    codes = [a.status_code for a in answers]
    assert codes.count(401) == 5 and codes.count(429) == 35, codes
    first_wait = max(assert_throttled(a) for a in answers if a.status_code == 429)
    assert first_wait <= 8
    # and the right password is refused too while the account is locked
    assert_throttled(login(gateway, user.email, TEST_PASSWORD))

    # Once the lock ends, five more wrong guesses lock the account twice as long
    stack.wait_until(lambda: login(gateway, user.email, WRONG).status_code == 401,
                     timeout=30, interval=0.5, message="the first lock-out ends")
    assert [login(gateway, user.email, WRONG).status_code for _ in range(4)] == [401] * 4
    second_wait = assert_throttled(login(gateway, user.email, WRONG))
    assert 2 * 8 - 1 <= second_wait <= 2 * 8, (first_wait, second_wait)
    assert_throttled(login(gateway, user.email, TEST_PASSWORD))


def test_the_right_password_works_after_the_lockout_and_resets_the_count(throttled, tenants):
    gateway = throttled(login_max_attempts_per_account="2", login_max_attempts_per_address="1000",
                        login_lockout_s="5")
    user = tenants.user(role="user")
    assert [login(gateway, user.email, WRONG).status_code for _ in range(2)] == [401, 401]
    assert_throttled(login(gateway, user.email, TEST_PASSWORD))
    stack.wait_until(lambda: login(gateway, user.email, TEST_PASSWORD).status_code == 200,
                     timeout=30, interval=0.5, message="sign-in works after the lock-out")
    # The success forgot the earlier failures: two more wrong guesses are checked again
    assert [login(gateway, user.email, WRONG).status_code for _ in range(2)] == [401, 401]
    assert_throttled(login(gateway, user.email, WRONG))


def test_the_address_throttle_spans_accounts_and_ignores_forged_forwarding(throttled, tenants):
    gateway = throttled(login_max_attempts_per_account="100", login_max_attempts_per_address="5",
                        login_lockout_s="30")
    victim = tenants.user(role="user")

    # Given five wrong guesses, each at a different (known or unknown) account
    for i in range(5):
        answer = login(gateway, f"guess-{i}@acme.test", WRONG)
        assert answer.status_code == 401, answer.text
    # Then the sixth account is refused from that address, even with the right password,
    assert_throttled(login(gateway, victim.email, TEST_PASSWORD))
    # and a forged X-Forwarded-For does not make a new client (no proxy is trusted)
    assert_throttled(login(gateway, victim.email, TEST_PASSWORD,
                           headers={"X-Forwarded-For": "203.0.113.9"}))


def test_a_trusted_proxy_names_the_client(throttled, tenants):
    gateway = throttled(login_max_attempts_per_account="100", login_max_attempts_per_address="2",
                        login_lockout_s="30", trusted_proxies='["127.0.0.1"]')
    user = tenants.user(role="user")
    attacker = {"X-Forwarded-For": "203.0.113.9"}
    for _ in range(2):
        assert login(gateway, user.email, WRONG, attacker).status_code == 401
    assert_throttled(login(gateway, user.email, WRONG, attacker))
    # Another client behind the same proxy is not locked out by the attacker
    other = login(gateway, user.email, TEST_PASSWORD, {"X-Forwarded-For": "198.51.100.7"})
    assert other.status_code == 200, other.text


def test_known_and_unknown_emails_answer_alike(throttled, tenants):
    gateway = throttled(login_max_attempts_per_account="1000",
                        login_max_attempts_per_address="1000")
    user = tenants.user(role="user")
    unknown = "nobody-here@acme.test"

    def timed(email: str) -> float:
        started = time.perf_counter()
        assert login(gateway, email, WRONG).status_code == 401
        return time.perf_counter() - started

    timed(user.email)  # warm up the connections
    known_s, unknown_s = [], []
    for _ in range(7):  # interleaved, so load on the machine hits both alike
        known_s.append(timed(user.email))
        unknown_s.append(timed(unknown))
    known, other = statistics.median(known_s), statistics.median(unknown_s)
    # Both pay one bcrypt check (~0.25 s); skipping it for unknown e-mails would differ by that.
    assert abs(known - other) < max(0.08, 0.3 * known), (known_s, unknown_s)


def test_locked_known_and_unknown_accounts_answer_alike(throttled, tenants):
    gateway = throttled(login_max_attempts_per_account="2", login_max_attempts_per_address="1000",
                        login_lockout_s="60")
    user = tenants.user(role="user")
    answers = {}
    for email in (user.email, "nobody-here@acme.test"):
        assert [login(gateway, email, WRONG).status_code for _ in range(2)] == [401, 401]
        answers[email] = login(gateway, email, WRONG)
        assert_throttled(answers[email])
    known, unknown = answers.values()
    assert known.json() == unknown.json()
    assert abs(int(known.headers["retry-after"]) - int(unknown.headers["retry-after"])) <= 1


def test_the_sign_in_form_is_throttled_with_a_readable_message(throttled, tenants):
    gateway = throttled(login_max_attempts_per_account="2", login_max_attempts_per_address="1000",
                        login_lockout_s="120")
    user = tenants.user(role="user")
    with httpx.Client(base_url=gateway.url, timeout=30, follow_redirects=False) as browser:
        form = browser.get("/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)

        def submit(password: str) -> httpx.Response:
            return browser.post("/login", data={"tenant": user.tenant, "email": user.email, "password": password,
                                                "csrf_token": token})

        assert [submit(WRONG).status_code for _ in range(2)] == [401, 401]
        refused = submit(TEST_PASSWORD)
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 60
    assert "Too many sign-in attempts; wait 2 minutes, then try again." in refused.text
    assert session.COOKIE + "=" not in refused.headers.get("set-cookie", "")


# ── revocation ──────────────────────────────────────────────────────────────────────────────
def test_logout_ends_a_copied_token(gateway, tenants):
    user = tenants.user(role="user")
    token = login(gateway, user.email, TEST_PASSWORD).json()["access_token"]
    copy = login(gateway, user.email, TEST_PASSWORD).json()["access_token"]
    assert me(gateway, copy).status_code == 200

    with gateway.client(token) as client:
        assert client.post("/v1/auth/logout").status_code == 204

    for old in (token, copy):
        answer = me(gateway, old)
        assert answer.status_code == 401 and "sign in again" in answer.json()["detail"]
    assert login(gateway, user.email, TEST_PASSWORD).status_code == 200


def test_signing_out_of_the_web_ends_a_copied_cookie(gateway, tenants):
    user = tenants.user(role="user")
    with sign_in(gateway, user.email) as browser:
        cookie = browser.cookies[session.COOKIE]
        csrf = page_csrf(browser)
        out = browser.post("/logout", data={"csrf_token": csrf})
        assert out.status_code == 303
    # Someone who copied the cookie before the sign-out
    with httpx.Client(base_url=gateway.url, cookies={session.COOKIE: cookie}, timeout=30) as thief:
        assert thief.get("/v1/auth/me").status_code == 401
        assert thief.get("/upload", follow_redirects=False).status_code == 303


def test_a_password_change_ends_older_tokens(gateway, tenants):
    user = tenants.user(role="user")
    old = login(gateway, user.email, TEST_PASSWORD).json()["access_token"]
    with gateway.client(old) as client:
        wrong = client.post("/v1/auth/password", json={"current_password": WRONG,
                                                       "new_password": "a new password"})
        # 403: well formed (/schema cannot know a password), and the session is still good
        assert wrong.status_code == 403 and wrong.json()["code"] == "wrong_password"
        assert me(gateway, old).status_code == 200  # a wrong current password changes nothing
        changed = client.post("/v1/auth/password", json={"current_password": TEST_PASSWORD,
                                                         "new_password": "a new password"})
    assert changed.status_code == 200, changed.text
    assert me(gateway, old).status_code == 401
    assert me(gateway, changed.json()["access_token"]).status_code == 200
    assert login(gateway, user.email, TEST_PASSWORD).status_code == 401
    assert login(gateway, user.email, "a new password").status_code == 200


def test_a_role_change_ends_the_users_tokens(gateway, tenants):
    admin, user = tenants.user(role="admin"), tenants.user(role="user")
    with gateway.client(admin.token) as client:
        answer = client.patch(f"/v1/users/{user.user_id}", json={"role": "admin"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["role"] == "admin"
    assert me(gateway, user.token).status_code == 401
    fresh = login(gateway, user.email, TEST_PASSWORD).json()
    assert fresh["user"]["role"] == "admin"


def test_a_deactivated_user_is_signed_out_and_cannot_sign_in(gateway, tenants, conn):
    admin, user = tenants.user(role="admin"), tenants.user(role="user")
    with gateway.client(admin.token) as client:
        off = client.patch(f"/v1/users/{user.user_id}", json={"active": False})
        assert off.status_code == 200 and off.json()["active"] is False
        assert me(gateway, user.token).status_code == 401
        # The right password reads exactly like a wrong one
        refused = login(gateway, user.email, TEST_PASSWORD)
        assert refused.status_code == 401
        assert refused.json() == login(gateway, user.email, WRONG).json()

        on = client.patch(f"/v1/users/{user.user_id}", json={"active": True})
        assert on.status_code == 200 and on.json()["active"] is True
    assert login(gateway, user.email, TEST_PASSWORD).status_code == 200


def test_an_admin_password_reset_ends_sessions_and_lifts_a_lockout(throttled, tenants):
    gateway = throttled(login_max_attempts_per_account="2", login_max_attempts_per_address="1000",
                        login_lockout_s="600")
    admin, user = tenants.user(role="admin"), tenants.user(role="user")
    for _ in range(2):
        login(gateway, user.email, WRONG)
    assert_throttled(login(gateway, user.email, TEST_PASSWORD))
    with gateway.client(admin.token) as client:
        reset = client.post(f"/v1/users/{user.user_id}/password", json={"password": "fresh one!"})
    assert reset.status_code == 200, reset.text
    assert me(gateway, user.token).status_code == 401
    assert login(gateway, user.email, "fresh one!").status_code == 200


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return stack.ingest(list(args), {**env, "INGEST_PASSWORD": "cli-set password"})


def test_cli_tokens_and_user_commands_follow_the_same_rule(gateway, stack_env, tenants):
    user = tenants.user(role="user", tenant="acme")
    minted = _cli(stack_env, "token", "--email", user.email)
    assert minted.returncode == 0, minted.stderr
    token = minted.stdout.strip()
    assert me(gateway, token).status_code == 200

    listed = _cli(stack_env, "users", "list", "--tenant", "acme")
    assert listed.returncode == 0 and user.email in listed.stdout

    assert _cli(stack_env, "users", "deactivate", "--email", user.email).returncode == 0
    assert me(gateway, token).status_code == 401
    refused = _cli(stack_env, "token", "--email", user.email)
    assert refused.returncode == 1 and "No active user" in refused.stderr

    assert _cli(stack_env, "users", "reactivate", "--email", user.email).returncode == 0
    promoted = _cli(stack_env, "users", "set-role", "--email", user.email, "--role", "operator")
    assert promoted.returncode == 0, promoted.stderr
    reset = _cli(stack_env, "users", "reset-password", "--email", user.email)
    assert reset.returncode == 0, reset.stderr
    signed_in = login(gateway, user.email, "cli-set password")
    assert signed_in.status_code == 200 and signed_in.json()["user"]["role"] == "operator"
    # An operator's token works (operators are also admins of their tenant)
    assert me(gateway, signed_in.json()["access_token"]).json()["role"] == "operator"
