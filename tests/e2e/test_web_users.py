"""The admin's users page in Chromium: add a user, change a role, deactivate, reset a password;
each change ends that user's sessions. Screenshots land in the test's folder."""

from __future__ import annotations

import pytest

from tests.conftest import TEST_PASSWORD
from tests.support import browser

pytestmark = pytest.mark.slow


def test_an_admin_manages_the_tenants_users(gateway, tenants, conn, context, out_dir):
    from playwright.sync_api import expect

    admin, user = tenants.user(role="admin"), tenants.user(role="user")
    tenants.user(tenant="globex", role="user", email="stranger@globex.test")
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the confirm() of a deactivation
    browser.sign_in(page, gateway.url, admin.email)

    browser.nav(page, "Users").click()
    expect(page.get_by_role("heading", name="Users", exact=True)).to_be_visible()
    expect(page.locator("tr", has_text=admin.email)).to_contain_text("(you)")
    expect(page.locator("table")).not_to_contain_text("stranger@globex.test")
    browser.shot(page, out_dir, "01-users")

    # ── add a user ──────────────────────────────────────────────────────────────────────
    page.get_by_label("E-mail").fill("new-hire@acme.test")
    page.get_by_label("Password", exact=True).fill("welcome aboard")
    page.get_by_role("button", name="Add user").click()
    expect(page.locator("tr", has_text="new-hire@acme.test")).to_contain_text("Active")

    # ── change a role: the user's token stops working ───────────────────────────────────
    row = page.locator("tr", has_text=user.email)
    row.get_by_label(f"Role of {user.email}").select_option("admin")
    result = page.locator('[data-field="action_result"]')
    expect(result).to_have_text(f"{user.email} is now an admin; their sessions ended.")
    with gateway.client(user.token) as api:
        assert api.get("/v1/auth/me").status_code == 401
    assert conn.execute("SELECT role FROM users WHERE user_id = %s",
                        (user.user_id,)).fetchone()["role"] == "admin"

    # ── deactivate, then reactivate ─────────────────────────────────────────────────────
    row.get_by_role("button", name="Deactivate").click()
    expect(result).to_have_text(f"{user.email} is deactivated and signed out.")
    expect(row.locator('[data-field="status"]')).to_have_text("Deactivated")
    browser.shot(page, out_dir, "02-user-deactivated")
    with gateway.client() as api:
        refused = api.post("/v1/auth/login", json={"tenant": user.tenant, "email": user.email,
                                                   "password": TEST_PASSWORD})
        assert refused.status_code == 401
    row.get_by_role("button", name="Reactivate").click()
    expect(row.locator('[data-field="status"]')).to_have_text("Active")

    # ── reset a password ────────────────────────────────────────────────────────────────
    row.get_by_label("New password").fill("a reset password")
    row.get_by_role("button", name="Reset password").click()
    expect(result).to_have_text(f"New password set for {user.email}; their sessions ended.")
    with gateway.client() as api:
        ok = api.post("/v1/auth/login", json={"tenant": user.tenant, "email": user.email,
                                              "password": "a reset password"})
        assert ok.status_code == 200, ok.text
    browser.shot(page, out_dir, "03-password-reset")

    # ── sign out: the copied session cookie no longer works ─────────────────────────────
    cookies = context.cookies()
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/login?signed_out=true")
    thief = context.browser.new_context()
    thief.add_cookies(cookies)
    stolen = thief.new_page()
    stolen.goto(f"{gateway.url}/admin/users")
    expect(stolen).to_have_url(f"{gateway.url}/login?next=%2Fadmin%2Fusers&expired=true")
    thief.close()
