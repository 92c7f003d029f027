"""User management by a tenant's admin over the API and the web session: tenant isolation,
refusals that change nothing, the operator and self rules, and CSRF (docs/decisions/0057)."""

from __future__ import annotations

import pytest

from tests.integration.test_web import page_csrf, sign_in


def snapshot(conn, user) -> dict:
    return conn.execute("SELECT role, deactivated_at, password_hash, token_version FROM users "
                        "WHERE user_id = %s", (user.user_id,)).fetchone()


def test_an_admin_lists_only_their_own_tenants_users(gateway, tenants):
    admin, colleague = tenants.user(role="admin"), tenants.user(role="user")
    stranger = tenants.user(tenant="globex", role="user")
    with gateway.client(admin.token) as client:
        answer = client.get("/v1/users")
    assert answer.status_code == 200, answer.text
    emails = {u["email"] for u in answer.json()["items"]}
    assert emails == {admin.email, colleague.email}
    assert stranger.email not in emails
    assert all("password_hash" not in u and "token_version" not in u
               for u in answer.json()["items"])


@pytest.mark.parametrize("call", [
    ("PATCH", "", {"role": "admin"}), ("PATCH", "", {"active": False}),
    ("POST", "/password", {"password": "taken over!"})])
def test_another_tenants_user_is_404_and_unchanged(gateway, tenants, conn, call):
    admin = tenants.user(role="admin")
    stranger = tenants.user(tenant="globex", role="user")
    before = snapshot(conn, stranger)
    method, suffix, body = call
    with gateway.client(admin.token) as client:
        answer = client.request(method, f"/v1/users/{stranger.user_id}{suffix}", json=body)
    assert answer.status_code == 404, answer.text
    assert answer.json()["code"] == "not_found"
    assert snapshot(conn, stranger) == before


@pytest.mark.parametrize("call", [
    ("GET", "", None), ("PATCH", "/{id}", {"role": "admin"}),
    ("PATCH", "/{id}", {"active": False}), ("POST", "/{id}/password", {"password": "x" * 12})])
def test_a_plain_user_is_403_and_nothing_changes(gateway, tenants, conn, call):
    user, colleague = tenants.user(role="user"), tenants.user(role="user")
    before = snapshot(conn, colleague)
    method, path, body = call
    with gateway.client(user.token) as client:
        answer = client.request(method, "/v1/users" + path.format(id=colleague.user_id),
                                json=body)
    assert answer.status_code == 403, answer.text
    assert answer.json()["code"] == "forbidden"
    assert snapshot(conn, colleague) == before


def test_an_admin_cannot_alter_an_operator_or_themselves(gateway, tenants, conn):
    admin, operator = tenants.user(role="admin"), tenants.user(role="operator")
    before_op, before_me = snapshot(conn, operator), snapshot(conn, admin)
    with gateway.client(admin.token) as client:
        for body in ({"role": "user"}, {"active": False}):
            refused = client.patch(f"/v1/users/{operator.user_id}", json=body)
            assert refused.status_code == 403 and "CLI" in refused.json()["detail"]
            mine = client.patch(f"/v1/users/{admin.user_id}", json=body)
            assert mine.status_code == 409 and "your own account" in mine.json()["detail"]
        # and nobody is made an operator through the API
        other = tenants.user(role="user")
        promoted = client.patch(f"/v1/users/{other.user_id}", json={"role": "operator"})
        assert promoted.status_code == 400
    assert snapshot(conn, operator) == before_op and snapshot(conn, admin) == before_me
    assert snapshot(conn, other)["role"] == "user"


def test_user_changes_from_the_web_session_need_the_csrf_header(gateway, tenants, conn):
    admin, user = tenants.user(role="admin"), tenants.user(role="user")
    before = snapshot(conn, user)
    with sign_in(gateway, admin.email) as browser:
        page = browser.get("/admin/users")
        assert page.status_code == 200 and user.email in page.text
        # Another site's request rides on the cookie but cannot read the CSRF token
        for method, suffix, body in (("PATCH", "", {"role": "admin"}),
                                     ("PATCH", "", {"active": False}),
                                     ("POST", "/password", {"password": "taken over!"})):
            forged = browser.request(method, f"/v1/users/{user.user_id}{suffix}", json=body)
            assert forged.status_code == 403, forged.text
        forged_create = browser.post("/v1/users", json={"email": "mole@acme.test",
                                                        "password": "long enough"})
        assert forged_create.status_code == 403
        assert snapshot(conn, user) == before
        assert conn.execute("SELECT 1 FROM users WHERE email = 'mole@acme.test'").fetchone() is None

        # Our own page's script sends the header, and the change is made
        csrf = page_csrf(browser, "/admin/users")
        made = browser.patch(f"/v1/users/{user.user_id}", json={"role": "admin"},
                             headers={"X-CSRF-Token": csrf})
        assert made.status_code == 200, made.text
    assert snapshot(conn, user)["role"] == "admin"


def test_a_plain_user_cannot_open_the_users_page(gateway, tenants):
    user = tenants.user(role="user")
    with sign_in(gateway, user.email) as browser:
        page = browser.get("/admin/users")
    assert page.status_code == 403
    assert 'href="/admin/users"' not in page.text


@pytest.mark.parametrize("lax", [0, "false", None])
def test_a_switch_is_json_true_or_false(gateway, tenants, conn, lax):
    """Litestar alone would take 0 and "false" as false and deactivate the colleague (ADR 0331);
    null is the field left out: a change of nothing, which must not end their sessions."""
    admin, colleague = tenants.user(role="admin"), tenants.user(role="user")
    before = snapshot(conn, colleague)
    with gateway.client(admin.token) as client:
        answer = client.patch(f"/v1/users/{colleague.user_id}", json={"active": lax})
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == "invalid_request"
    assert "active" in answer.json()["detail"]
    assert snapshot(conn, colleague) == before
