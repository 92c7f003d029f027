"""Documents and sources in Chromium, as a tenant admin: search inside documents, the state
filter, honest text and Reactivate in place, paged chunks, the header, the HTML 404 page, and
the source form's Test connection with its errors next to the field. Screenshots, desktop and
390 px, land in the test's folder under test-output/."""

from __future__ import annotations

import re
import uuid

import pytest

from gateway.sources import access as source_access
from tests.integration.test_documents_search import add_document, add_failed_upload
from tests.support import browser, s3sync

pytestmark = pytest.mark.slow


def test_an_admin_searches_filters_and_reactivates_documents(gateway, tenants, conn, context,
                                                             out_dir):
    from playwright.sync_api import expect

    admin = tenants.user(role="admin")
    t = admin.tenant_id
    add_document(conn, t, "field-guide.md", ["The dragonfly hunts.", "A dragonfly larva.",
                                             "The dragonfly nymph."] + [
        f"Paragraph {i} about ponds." for i in range(22)], minutes=1)
    add_document(conn, t, "notes.md", ["A dragonfly rested; another dragonfly came."], minutes=2)
    add_document(conn, t, "diary.md", ["Saw one dragonfly today."], minutes=3)
    add_document(conn, t, "bees.md", ["Bees make honey."], minutes=4)
    off = add_document(conn, t, "old.md", ["Kept for the archive."], minutes=5, active=False)
    _, failed_run = add_failed_upload(conn, t, "broken.pdf", minutes=6)
    add_document(conn, tenants.user(tenant="globex").tenant_id, "theirs.md", ["dragonfly"])

    page = context.new_page()
    browser.sign_in(page, gateway.url, admin.email)
    # The header says who is signed in
    expect(page.locator(".who")).to_have_text(f"{admin.email} · Admin")

    # Search finds the three documents that contain the word, best first
    browser.nav(page, "Documents").click()
    page.get_by_label("Search documents").fill("dragonfly")
    page.get_by_role("button", name="Search").click()
    rows = page.locator("table[data-documents] tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("field-guide.md")
    expect(rows.nth(2)).to_contain_text("diary.md")
    browser.shot(page, out_dir, "01-documents-search")

    # The failed document is reachable, says so and links its run
    page.get_by_role("link", name="Failed", exact=True).click()
    expect(rows).to_have_count(0)  # the search still applies: no failed document contains it
    page.get_by_role("link", name="Clear").click()
    expect(rows).to_have_count(1)
    rows.first.get_by_role("link", name="broken.pdf").click()
    expect(page.get_by_role("alert")).to_contain_text(
        "This document was never ingested: its only run failed")
    expect(page.get_by_role("link", name="Open the failed run")).to_have_attribute(
        "href", f"/runs/{failed_run}")
    browser.shot(page, out_dir, "02-document-failed")

    # The inactive one: honest text, Reactivate, and the page updates in place
    page.goto(f"{gateway.url}/documents?status=inactive")
    page.get_by_role("link", name="old.md").click()
    expect(page.get_by_text("This document is not served: version 1 was deactivated")).to_be_visible()
    expect(page.locator('[data-field="source"]')).to_contain_text("Uploaded file old.md")
    page.evaluate("window.__noReload = true")
    page.get_by_role("button", name="Reactivate this document").click()
    expect(page.locator('[data-field="action_result"]')).to_have_text("Version 1 is served again.")
    expect(page.locator('[data-field="state"]')).to_have_text("Active")
    expect(page.get_by_role("button", name="Deactivate this document")).to_be_visible()
    assert page.evaluate("window.__noReload") is True
    browser.shot(page, out_dir, "03-document-reactivated")
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Deactivate this document").click()
    expect(page.locator('[data-field="state"]')).to_have_text("Inactive")
    expect(page.get_by_role("button", name="Reactivate this document")).to_be_visible()
    assert page.evaluate("window.__noReload") is True
    assert conn.execute("SELECT count(*) AS n FROM document_versions WHERE doc_id = %s AND "
                        "is_active", (off,)).fetchone()["n"] == 0

    # Every chunk is reachable, 20 a page
    page.goto(f"{gateway.url}/documents?search=field-guide")
    page.get_by_role("link", name="field-guide.md").click()
    expect(page.locator("ol.chunks li")).to_have_count(20)
    page.get_by_role("link", name="Next chunks →").click()
    expect(page.locator("ol.chunks li")).to_have_count(5)
    expect(page.locator("ol.chunks")).to_contain_text("Paragraph 21 about ponds.")
    # A search hit's link (?chunk=N#chunk-N) opens the page that holds that chunk
    doc_path = page.url.split("?")[0]
    page.goto(f"{doc_path}?chunk=24#chunk-24")
    expect(page.locator("ol.chunks li")).to_have_count(5)
    expect(page.locator("#chunk-24")).to_contain_text("Paragraph 21 about ponds.")

    # An unknown address is the HTML 404 page, in the site's frame
    page.goto(f"{gateway.url}/no/such/page")
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()

    # The same pages at 390 px
    page.set_viewport_size(browser.PHONE)
    page.goto(f"{gateway.url}/documents?search=dragonfly")
    expect(rows).to_have_count(3)
    browser.shot(page, out_dir, "04-documents-search-phone")
    page.goto(f"{gateway.url}/documents/{off}")
    browser.shot(page, out_dir, "05-document-inactive-phone")


def test_the_source_form_tests_the_connection_and_puts_errors_by_their_field(
        gateway, tenants, conn, s3, context, out_dir):
    from playwright.sync_api import expect

    admin = tenants.user(role="admin")
    bucket = s3sync.new_bucket(s3, {"docs/a.md": b"# a\n", "docs/b.md": b"# b\n"})
    source_access.grant(conn, tenant_id=admin.tenant_id, bucket=bucket, prefix="",
                        granted_by="test", platform=())
    page = context.new_page()
    browser.sign_in(page, gateway.url, admin.email)
    browser.nav(page, "Sources").click()
    form = page.locator('[data-source-form="create"]')

    # A bucket the tenant may not read: the refusal sits by the Bucket field
    form.get_by_label("Bucket").fill(f"other-{uuid.uuid4().hex[:6]}")
    form.get_by_role("button", name="Test connection").click()
    expect(form.locator('[data-error-for="bucket"]')).to_contain_text("has no grant for bucket")
    # A schedule out of bounds: by the schedule field
    form.get_by_label("Bucket").fill(bucket)
    form.get_by_label("Sync every (minutes)").fill("2")
    form.get_by_role("button", name="Add source").click()
    expect(form.locator('[data-error-for="sync_every_minutes"]')).to_contain_text("5 to 10080")
    expect(form.locator('[data-field="form_error"]')).to_be_hidden()
    browser.shot(page, out_dir, "01-source-form-errors")

    # The granted bucket lists
    form.get_by_label("Prefix").fill("docs/")
    form.get_by_role("button", name="Test connection").click()
    expect(form.locator('[data-field="test_result"]')).to_have_text(
        f"Connected: bucket '{bucket}' lists 2 objects under 'docs/'.")
    form.get_by_label("Sync every (minutes)").fill("60")
    form.get_by_role("button", name="Add source").click()
    expect(page).to_have_url(re.compile(r"/admin/sources/[0-9a-f-]{36}$"))
    expect(page.get_by_label("Sync every (minutes)")).to_have_value("60")

    # Sync now, then how its files ingested; Delete is away from Sync now
    page.get_by_role("button", name="Sync now").click()
    panel = page.locator("[data-sync]")
    expect(panel).not_to_have_attribute("data-status", "running", timeout=60_000)
    expect(panel.locator('[data-field="ingest"]')).to_contain_text(
        "2 files queued by this sync: 0 succeeded, 0 failed, 2 still queued.")
    expect(panel.locator('[data-field="sync_runs"] a')).to_have_count(2)
    sync_box = page.get_by_role("button", name="Sync now").bounding_box()
    delete_box = page.get_by_role("button", name="Delete source").bounding_box()
    assert delete_box["y"] - sync_box["y"] > 200
    browser.shot(page, out_dir, "02-source-synced")
    page.set_viewport_size(browser.PHONE)
    browser.shot(page, out_dir, "03-source-phone")
