"""The Records pages in Chromium: judgments searched by a case number in another spelling and
filtered, plaintiffs with contact details for an admin and without for a plain user, and the
duplicate candidates most likely first. Records are written as the records pipeline promotes
them (tests/support/records_rows.py). Screenshots, desktop and 390 px, under test-output/."""

from __future__ import annotations

from datetime import date

import pytest

from tests.support import browser
from tests.support import records_rows as rows

pytestmark = pytest.mark.slow


def test_records_pages_search_filter_and_show_duplicates(gateway, tenants, conn, context,
                                                         out_dir):
    from playwright.sync_api import expect

    admin = tenants.user(role="admin")
    plain = tenants.user(role="user")
    t = admin.tenant_id
    j1 = rows.judgment(conn, t, "2024-CV-12345", plaintiff_name="Acme Collections LLC",
                       county="Kings", amount="12500.00", filed_date=date(2024, 1, 15))
    rows.judgment(conn, t, "2023-SC-00077", plaintiff_name="Zenith Funding", county="Queens",
                  amount="800.00", filed_date=date(2023, 6, 2))
    acme = rows.plaintiff(conn, t, "Acme Collections LLC", address_line1="1 Main St",
                          city="Brooklyn", state="NY", zip="11201", phone="+17185550100",
                          email="ar@acme.test")
    rows.link(conn, t, acme, j1)
    rows.plaintiff(conn, t, "Acme Collection LLC", address_line1="1 Main St", city="Brooklyn",
                   state="NY", zip="11201")
    rows.plaintiff(conn, t, "Riverside Capital Partners Holdings", zip="60601")
    rows.plaintiff(conn, t, "Riverside Capitol Partners Holdings", zip="94105")
    rows.judgment(conn, tenants.user(tenant="globex").tenant_id, "2024-CV-12346")

    page = context.new_page()
    browser.sign_in(page, gateway.url, admin.email)
    browser.nav(page, "Records").click()
    table = page.locator("table[data-judgments] tbody tr")
    expect(table).to_have_count(2)

    # A case number typed another way finds the judgment; another tenant's never shows
    page.get_by_label("Case number or name").fill("cv 12345")
    page.get_by_role("button", name="Search").click()
    expect(table).to_have_count(1)
    expect(table.first).to_contain_text("2024-CV-12345")
    expect(table.first).to_contain_text("$12,500.00")
    browser.shot(page, out_dir, "01-judgments-search")

    # Filters: county and an amount range
    page.get_by_role("link", name="Clear").click()
    page.get_by_label("County").fill("queens")
    page.get_by_label("Amount from $").fill("500")
    page.get_by_role("button", name="Search").click()
    expect(table).to_have_count(1)
    expect(table.first).to_contain_text("2023-SC-00077")

    # A reversed range is what /schema allows: it matches nothing (ADR 0200); a date that
    # cannot be read is a 400 page that says what to fix
    page.goto(f"{gateway.url}/records/judgments?filed_from=2024-05-01&filed_to=2024-01-01")
    expect(table).to_have_count(0)
    expect(page.locator("main")).to_contain_text("0 judgments matching")
    response = page.goto(f"{gateway.url}/records/judgments?filed_from=2024-13-45")
    assert response.status == 400
    expect(page.locator("main")).to_contain_text("filed_from could not be read")

    # The plaintiff column links to the judgment's plaintiffs, with contacts for an admin
    page.goto(f"{gateway.url}/records/judgments")
    page.get_by_role("link", name="Acme Collections LLC").click()
    people = page.locator("table[data-plaintiffs] tbody tr")
    expect(people).to_have_count(1)
    expect(people.first).to_contain_text("ar@acme.test")
    expect(people.first).to_contain_text("+17185550100")
    browser.shot(page, out_dir, "02-plaintiffs-admin")

    # Duplicate candidates, most likely first: same name and address before a near name
    page.get_by_role("link", name="Duplicate candidates").click()
    pairs = page.locator("table[data-duplicates] tbody tr")
    expect(pairs).to_have_count(2)
    expect(pairs.nth(0)).to_contain_text("Acme Collection")
    expect(pairs.nth(0)).to_contain_text("address, ZIP")
    expect(pairs.nth(1)).to_contain_text("Riverside")
    expect(pairs.nth(1)).to_contain_text("name only")
    browser.shot(page, out_dir, "03-duplicates")
    page.set_viewport_size(browser.PHONE)
    browser.shot(page, out_dir, "04-duplicates-390")

    # A plain user sees the plaintiffs without e-mail or phone
    other = context.browser.new_context()
    try:
        page2 = other.new_page()
        browser.sign_in(page2, gateway.url, plain.email)
        page2.goto(f"{gateway.url}/records/plaintiffs")
        people2 = page2.locator("table[data-plaintiffs] tbody tr")
        expect(people2).to_have_count(4)
        expect(page2.locator("main")).to_contain_text("E-mail and phone are shown to admins only")
        expect(page2.locator("main")).not_to_contain_text("ar@acme.test")
        expect(page2.locator("main")).not_to_contain_text("+17185550100")
        page2.set_viewport_size(browser.PHONE)
        browser.shot(page2, out_dir, "05-plaintiffs-user-390")
    finally:
        other.close()
