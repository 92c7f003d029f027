"""The Ad clients admin page in Chromium (issue 13 item 2: clients "created by admins"): an
admin adds a client, sees it listed and offered by the Imports page's ad-metrics form; a name
the tenant already has and an empty name are refused with the API's sentence; the form needs
the CSRF header like every other; another tenant's admin never sees the client; a user
cannot open the page nor create a client through the API."""

from __future__ import annotations

import pytest

from tests.support import browser

pytestmark = pytest.mark.slow

# What POST /v1/clients answers with the page's session cookie and CSRF header (or without it).
_POST = """async ([name, withCsrf]) => {
  const headers = {'Content-Type': 'application/json', Accept: 'application/json'};
  if (withCsrf) headers['X-CSRF-Token'] =
    document.querySelector('meta[name="csrf-token"]').content;
  const r = await fetch('/v1/clients', {method: 'POST', headers,
                                        body: JSON.stringify({name: name})});
  return {status: r.status, body: await r.json()};
}"""


def _clients(conn, tenant_id) -> list[dict]:
    return conn.execute("SELECT client_id::text AS client_id, name, created_by FROM ad_clients "
                        "WHERE tenant_id = %s ORDER BY name", (tenant_id,)).fetchall()


def test_an_admin_adds_a_client_that_the_imports_page_then_offers(
        gateway, conn, tenants, context, out_dir):
    from playwright.sync_api import expect

    admin = tenants.user(role="admin")
    page = context.new_page()
    browser.sign_in(page, gateway.url, admin.email)
    browser.nav(page, "Ad clients").click()
    expect(page.get_by_role("heading", name="Ad clients", exact=True)).to_be_visible()
    table = page.locator("[data-clients]")
    expect(table).to_contain_text("No clients yet.")

    # ── add one: listed at once, stored for this tenant by this admin ───────────────────────
    page.get_by_label("Client name").fill("  Acme   Shoes ")
    page.get_by_role("button", name="Add client").click()
    expect(page.locator('[data-field="action_result"]')).to_contain_text(
        "Client Acme Shoes added")
    [stored] = _clients(conn, admin.tenant_id)
    assert (stored["name"], stored["created_by"]) == ("Acme Shoes", admin.user_id)
    row = page.locator("tr[data-client-id]", has_text="Acme Shoes")
    expect(row).to_have_attribute("data-client-id", stored["client_id"])
    expect(row.locator('[data-field="client_id"]')).to_have_text(stored["client_id"])
    expect(table).not_to_contain_text("No clients yet.")
    expect(page.get_by_label("Client name")).to_have_value("")
    browser.shot(page, out_dir, "01-client-added")

    # ── a name the tenant already has (same after trimming): the API's 409 sentence ────────
    page.get_by_label("Client name").fill("Acme Shoes")
    page.get_by_role("button", name="Add client").click()
    error = page.locator('[data-field="form_error"]')
    expect(error).to_have_text("Your tenant already has a client of that name; pick another name.")
    # ── an empty name: the API's 400 sentence ──────────────────────────────────────────────
    page.get_by_label("Client name").fill("   ")
    page.get_by_role("button", name="Add client").click()
    expect(error).to_have_text("name must be 1 to 200 characters of text, e.g. 'Acme Shoes'.")
    browser.shot(page, out_dir, "02-client-refused")
    assert len(_clients(conn, admin.tenant_id)) == 1

    # ── the page's form is CSRF-protected like the others: no header, no client ────────────
    answer = page.evaluate(_POST, ["Forged Co", False])
    assert answer["status"] == 403
    assert [c["name"] for c in _clients(conn, admin.tenant_id)] == ["Acme Shoes"]

    # ── after a reload the server-rendered list has it, with its created time ─────────────
    page.reload()
    row = page.locator("tr[data-client-id]")
    expect(row).to_have_count(1)
    expect(row.locator('[data-field="name"]')).to_have_text("Acme Shoes")
    expect(row.locator("time")).not_to_have_text("—")

    # ── the Imports page offers it, and links admins to this page ─────────────────────────
    page.goto(f"{gateway.url}/imports")
    page.select_option("#contract", "ad_metrics")
    expect(page.locator("#client_id option")).to_have_text(
        ["None (this workspace's own account)", "Acme Shoes"])
    expect(page.locator("#client_id option", has_text="Acme Shoes")).to_have_attribute(
        "value", stored["client_id"])
    page.get_by_role("link", name="Manage clients").click()
    expect(page.get_by_role("heading", name="Ad clients", exact=True)).to_be_visible()

    # ── a phone-sized screen: the list and form fit without scrolling sideways ────────────
    page.set_viewport_size(browser.PHONE)
    expect(page.locator("tr[data-client-id]")).to_have_count(1)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= browser.PHONE["width"], f"the clients page scrolls sideways ({width}px)"
    browser.shot(page, out_dir, "03-clients-390")


def test_another_tenants_admin_never_sees_the_client(gateway, conn, tenants, context):
    from playwright.sync_api import expect

    admin = tenants.user(role="admin")
    stranger = tenants.user(tenant="globex", role="admin")
    with gateway.client(admin.token) as client:
        assert client.post("/v1/clients", json={"name": "Acme Secret"}).status_code == 201
    page = context.new_page()
    browser.sign_in(page, gateway.url, stranger.email)
    page.goto(f"{gateway.url}/admin/clients")
    expect(page.locator("[data-clients]")).to_contain_text("No clients yet.")
    expect(page.locator("body")).not_to_contain_text("Acme Secret")
    page.goto(f"{gateway.url}/imports")
    page.select_option("#contract", "ad_metrics")
    expect(page.locator("#client_id option")).to_have_text(
        ["None (this workspace's own account)"])
    # The same name is free in the other tenant: clients are never shared
    page.goto(f"{gateway.url}/admin/clients")
    page.get_by_label("Client name").fill("Acme Secret")
    page.get_by_role("button", name="Add client").click()
    expect(page.locator("tr[data-client-id]", has_text="Acme Secret")).to_have_count(1)
    assert [c["name"] for c in _clients(conn, stranger.tenant_id)] == ["Acme Secret"]
    assert len(_clients(conn, admin.tenant_id)) == 1


def test_a_user_cannot_open_the_page_nor_create_a_client(gateway, conn, tenants, context,
                                                         out_dir):
    from playwright.sync_api import expect

    admin = tenants.user(role="admin")
    user = tenants.user(role="user")
    with gateway.client(admin.token) as client:
        assert client.post("/v1/clients", json={"name": "Acme Shoes"}).status_code == 201
    page = context.new_page()
    browser.sign_in(page, gateway.url, user.email)
    expect(browser.nav(page, "Ad clients")).to_have_count(0)
    response = page.goto(f"{gateway.url}/admin/clients")
    assert response is not None and response.status == 403
    expect(page.get_by_role("alert")).to_have_text(
        "Only admins may do this; ask an admin of your tenant.")
    browser.shot(page, out_dir, "01-clients-forbidden")

    # The Imports page still offers the tenant's clients, without the admin's link
    page.goto(f"{gateway.url}/imports")
    page.select_option("#contract", "ad_metrics")
    expect(page.locator("#client_id option")).to_have_text(
        ["None (this workspace's own account)", "Acme Shoes"])
    expect(page.get_by_role("link", name="Manage clients")).to_have_count(0)
    expect(page.locator("#client-help")).to_contain_text("An admin of your tenant adds clients")

    # The API refuses the user even with a valid session and CSRF header
    answer = page.evaluate(_POST, ["User Made", True])
    assert answer["status"] == 403
    assert answer["body"]["detail"] == "Only admins may do this; ask an admin of your tenant."
    assert [c["name"] for c in _clients(conn, user.tenant_id)] == ["Acme Shoes"]
