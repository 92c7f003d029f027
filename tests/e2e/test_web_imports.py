"""Issue 12 item 8 in Chromium: the Imports page and the batch page.

No worker runs here: the records pipeline lives on another branch (recordsworker), so where a
batch must move past `pending`, tests/support/records.py writes what the pipeline leaves
behind (the batch walked through the status machine, its counts, its row errors). The upload,
the page's live updates, the raw-row rule, CSRF and tenancy are all the real gateway's.
"""

from __future__ import annotations

import re

import pytest

from tests.support import browser, records

pytestmark = pytest.mark.slow

PHONE = {"width": 390, "height": 844}


def _batches(conn, tenant_id) -> list[dict]:
    return conn.execute("SELECT batch_id, status, threshold_text, source, source_reference, "
                        "force_partial FROM (SELECT *, error_threshold_percent::text AS "
                        "threshold_text FROM import_batches) b WHERE tenant_id = %s",
                        (tenant_id,)).fetchall()


def _errors(batch_id: str) -> list[dict]:
    """Three critical amount errors and one warning, each with its raw row."""
    rows = [{"row_number": n, "field": "amount", "code": "JUDGMENT_AMOUNT_INVALID",
             "message": "Amount 'NOT_A_NUMBER' is not a number",
             "raw": {"File #": f"2024-CV-{n:05d}", "Amount": "NOT_A_NUMBER"}} for n in (2, 5, 9)]
    rows.append({"row_number": 7, "field": "case_number", "code": "JUDGMENT_CASE_NUMBER_MISSING",
                 "message": "Case number is required", "raw": {"File #": "", "Amount": "100"}})
    return rows


def test_an_import_uploads_with_progress_goes_live_and_a_second_copy_is_a_duplicate(
        gateway, conn, tenants, context, out_dir, tmp_path):
    from playwright.sync_api import expect

    user = tenants.user(role="user")
    page = context.new_page()
    browser.sign_in(page, gateway.url, user.email)
    browser.nav(page, "Imports").click()
    expect(page).to_have_url(re.compile(r"/imports$"))
    expect(page.locator("[data-imports]")).to_contain_text("No imports yet.")
    # The contract list is the registry's
    expect(page.locator("#contract option")).to_have_text(
        ["judgments (version 1.0.0)", "plaintiffs (version 1.0.0)",
         "ad_metrics (version 2.0.0)"])
    csv_path = tmp_path / "judgments-jan.csv"
    csv_path.write_bytes(records.judgments_csv(3, seed="W"))

    page.select_option("#contract", "judgments")
    page.get_by_label("Error limit").fill("12.5")
    page.select_option("#source", "jbi")
    page.get_by_label("Source reference").fill("JBI-2024-01")
    page.set_input_files("#import-file", str(csv_path))
    page.get_by_role("button", name="Upload and import").click()

    item = page.locator(".import-item", has_text="judgments-jan.csv")
    expect(item).to_have_attribute("data-outcome", "accepted")
    expect(item.locator("[data-field=percent]")).to_have_text("100%")
    expect(item.locator("[data-field=status]")).to_have_text("Pending")
    [batch] = _batches(conn, user.tenant_id)
    assert (batch["status"], batch["threshold_text"], batch["source"],
            batch["source_reference"], batch["force_partial"]) == (
        "pending", "12.50", "jbi", "JBI-2024-01", False)
    batch_id = str(batch["batch_id"])
    expect(item.locator("[data-field=link]")).to_have_attribute("href", f"/imports/{batch_id}")
    browser.shot(page, out_dir, "01-imports-pending")

    # The pipeline's stand-in finishes it: the list follows without a reload
    records.finish_batch(conn, batch_id, rows_total=3, rows_valid=3, rows_inserted=3)
    expect(item.locator("[data-field=status]")).to_have_text("Completed", timeout=30_000)
    expect(item.locator("[data-field=summary]")).to_have_text(
        "Completed: 3 rows accepted, 0 invalid, 0 duplicate.")

    # The same file again: shown as already imported, the same batch, nothing new
    page.set_input_files("#import-file", str(csv_path))
    page.get_by_role("button", name="Upload and import").click()
    again = page.locator(".import-item[data-outcome=duplicate]")
    expect(again).to_contain_text(f"Already imported: batch {batch_id[:8]} (Completed)")
    expect(again.get_by_role("link", name=batch_id[:8])).to_have_attribute(
        "href", f"/imports/{batch_id}")
    assert len(_batches(conn, user.tenant_id)) == 1
    browser.shot(page, out_dir, "02-imports-duplicate")
    page.set_viewport_size(PHONE)
    browser.shot(page, out_dir, "03-imports-390")
    page.set_viewport_size(browser.LAPTOP)

    # The list survives a reload (server-rendered, the user's own batches)
    page.reload()
    expect(page.locator(".import-item")).to_have_count(1)
    expect(page.locator(".import-item [data-field=summary]")).to_have_text(
        "Completed: 3 rows accepted, 0 invalid, 0 duplicate.")

    # The batch page of a running import updates live and re-renders when it finishes
    with gateway.client(user.token) as client:
        second = records.upload(client, "second.csv", records.judgments_csv(4, seed="X")
                                ).json()["batch_id"]
    records.walk(conn, second, "processing")
    page.goto(f"{gateway.url}/imports/{second}")
    expect(page.locator("[data-field=status]")).to_have_text("Processing")
    expect(page.locator("[data-field=live_note]")).to_be_visible()
    records.add_errors(conn, second, _errors(second)[:1])
    records.finish_batch(conn, second, rows_total=4, rows_valid=3, rows_invalid=1,
                         rows_inserted=2, rows_unchanged=1)
    expect(page.locator("[data-field=status]")).to_have_text("Completed", timeout=30_000)
    expect(page.locator("[data-field=live_note]")).to_have_count(0)
    counts = {f: page.locator(f"[data-field=counts] [data-field={f}]").inner_text()
              for f in ("total", "valid", "invalid", "duplicate", "inserted", "updated",
                        "unchanged")}
    assert counts == {"total": "4", "valid": "3", "invalid": "1", "duplicate": "0",
                      "inserted": "2", "updated": "0", "unchanged": "1"}
    expect(page.locator("[data-field=error_rate]")).to_have_text("25.0%")
    expect(page.locator("[data-field=budget_verdict]")).to_have_text("over the limit")
    expect(page.locator("[data-field=code_chart] tbody tr")).to_have_count(1)


def test_a_failed_batch_shows_its_reason_budget_codes_and_raw_rows_to_its_uploader_only(
        gateway, conn, tenants, context, out_dir):
    from playwright.sync_api import expect

    uploader = tenants.user(role="user")
    colleague = tenants.user(role="user")
    with gateway.client(uploader.token) as client:
        batch_id = records.upload(client, "bad-export.csv", records.judgments_csv(5, seed="F")
                                  ).json()["batch_id"]
    records.add_errors(conn, batch_id, _errors(batch_id))
    reason = "Error rate 85.0% exceeded limit 10.0% (85/100 rows invalid)"
    records.finish_batch(conn, batch_id, "failed", rows_total=100, rows_valid=15,
                         rows_invalid=85, rejection_reason=reason)

    page = context.new_page()
    browser.sign_in(page, gateway.url, uploader.email)
    page.goto(f"{gateway.url}/imports/{batch_id}")
    expect(page.locator("[data-field=status]")).to_have_text("Failed")
    expect(page.locator("[data-field=rejection]")).to_have_text(f"Rejected: {reason}")
    # The budget bar: 85 of 100 filled, over the limit, the limit drawn at 10
    bar = page.locator("svg[data-field=budget]")
    expect(bar).to_have_class(re.compile(r"\bis-over\b"))
    expect(bar.locator("[data-field=rate_rect]")).to_have_attribute("width", "85.0")
    expect(bar.locator("[data-field=limit_line]")).to_have_attribute("x1", "10.0")
    expect(page.locator("[data-field=error_rate]")).to_have_text("85.0%")
    # The chart: codes by frequency, bars relative to the most frequent
    chart = page.locator("[data-field=code_chart] tbody tr")
    expect(chart).to_have_count(2)
    expect(chart.nth(0)).to_have_attribute("data-code", "JUDGMENT_AMOUNT_INVALID")
    expect(chart.nth(0).locator("td").nth(1)).to_have_text("3")
    expect(chart.nth(0).locator("rect")).to_have_attribute("width", "100.0")
    expect(chart.nth(1).locator("rect")).to_have_attribute("width", "33.3")
    # The table in row order, raw rows for the uploader; the export link
    table = page.locator("[data-field=errors] tbody tr")
    expect(table).to_have_count(4)
    expect(table.locator("td[data-label=Row]")).to_have_text(["2", "5", "7", "9"])
    expect(table.nth(0).locator("[data-field=raw]")).to_contain_text("NOT_A_NUMBER")
    expect(page.locator("[data-field=export]")).to_have_attribute(
        "href", f"/v1/imports/{batch_id}/errors.csv")
    browser.shot(page, out_dir, "01-batch-failed")
    page.set_viewport_size(PHONE)
    browser.shot(page, out_dir, "02-batch-failed-390")
    page.set_viewport_size(browser.LAPTOP)

    # Filter by code: only that code's rows, the filter kept in the address
    page.select_option("#code", "JUDGMENT_CASE_NUMBER_MISSING")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"code=JUDGMENT_CASE_NUMBER_MISSING"))
    expect(table).to_have_count(1)
    expect(table.locator("[data-field=code]")).to_have_text(["JUDGMENT_CASE_NUMBER_MISSING"])
    expect(page.locator("[data-field=errors_total]")).to_contain_text(
        "1 error with code JUDGMENT_CASE_NUMBER_MISSING")
    browser.shot(page, out_dir, "03-batch-filtered")

    # A plain user of the tenant who did not upload it: the same errors, no raw rows
    other = context.browser.new_context(viewport=browser.LAPTOP)
    try:
        page2 = other.new_page()
        browser.sign_in(page2, gateway.url, colleague.email)
        page2.goto(f"{gateway.url}/imports/{batch_id}")
        rows2 = page2.locator("[data-field=errors] tbody tr")
        expect(rows2).to_have_count(4)
        expect(page2.locator("[data-field=errors] th", has_text="Raw row")).to_have_count(0)
        expect(page2.locator("[data-field=raw]")).to_have_count(0)
        expect(page2.locator("[data-field=raw_note]")).to_be_visible()
        assert "NOT_A_NUMBER\"" not in page2.content() and "2024-CV-00002" not in page2.content()
        browser.shot(page2, out_dir, "04-batch-plain-user")
    finally:
        other.close()


def test_upload_without_csrf_header_is_refused_and_another_tenants_batch_is_a_404_page(
        gateway, conn, tenants, context, out_dir):
    from playwright.sync_api import expect

    alice = tenants.user(tenant="acme", role="admin")
    mallory = tenants.user(tenant="evil", role="admin")
    page = context.new_page()
    browser.sign_in(page, gateway.url, alice.email)
    page.goto(f"{gateway.url}/imports")

    # The session cookie alone does not upload: 403, and no batch, run or job exists
    status = page.evaluate("""async () => {
        const form = new FormData();
        form.append("contract", "judgments");
        form.append("file", new Blob(["File #,Plaintiff\\n1,A\\n"]), "forged.csv");
        const r = await fetch("/v1/imports", {method: "POST", body: form,
                                              credentials: "same-origin"});
        return r.status;
    }""")
    assert status == 403
    assert conn.execute("SELECT count(*) AS n FROM import_batches").fetchone()["n"] == 0
    assert conn.execute("SELECT count(*) AS n FROM job_outbox").fetchone()["n"] == 0

    with gateway.client(alice.token) as client:
        batch_id = records.upload(client, "acme-secret-judgments.csv",
                                  records.judgments_csv(2, seed="A")).json()["batch_id"]
    page.goto(f"{gateway.url}/imports/{batch_id}")
    expect(page.locator("[data-field=filename]")).to_have_text("acme-secret-judgments.csv")

    # Another tenant's admin, with the id in hand: the HTML 404 page, nothing of the batch
    other = context.browser.new_context(viewport=browser.LAPTOP)
    try:
        page2 = other.new_page()
        browser.sign_in(page2, gateway.url, mallory.email)
        response = page2.goto(f"{gateway.url}/imports/{batch_id}")
        assert response.status == 404
        assert response.headers["content-type"].startswith("text/html")
        expect(page2.get_by_role("heading", name="Not found")).to_be_visible()
        assert "acme-secret-judgments" not in page2.content()
        # Nor does the batch show in their Imports list
        page2.goto(f"{gateway.url}/imports")
        expect(page2.locator("[data-imports]")).to_contain_text("No imports yet.")
        # A malformed id is the same 404 page, not a server error
        assert page2.goto(f"{gateway.url}/imports/not-a-uuid").status == 404
        browser.shot(page2, out_dir, "01-other-tenant-404")
    finally:
        other.close()


def test_an_ad_export_is_uploaded_with_its_platform_and_client(
        gateway, conn, tenants, context, out_dir, tmp_path):
    """The ad-metrics contract brings a platform, a client and the spec's sources; the
    records contracts never send them (issue 13)."""
    from playwright.sync_api import expect

    from tests.unit.test_contracts_ad_metrics import meta_export

    admin = tenants.user(role="admin")
    other = tenants.user(tenant="globex", role="admin")
    with gateway.client(admin.token) as client:
        acme_shoes = client.post("/v1/clients", json={"name": "Acme Shoes"}).json()["client_id"]
    with gateway.client(other.token) as client:
        client.post("/v1/clients", json={"name": "Globex Hidden"})
    page = context.new_page()
    browser.sign_in(page, gateway.url, admin.email)
    page.goto(f"{gateway.url}/imports")

    # Before ad_metrics is chosen, its fields are neither shown nor sent
    ad_fields = page.locator("[data-ad-fields]")
    expect(ad_fields).to_be_hidden()
    expect(page.locator("#source")).to_be_visible()
    page.select_option("#contract", "ad_metrics")
    expect(ad_fields).to_be_visible()
    expect(page.locator("#source")).to_be_hidden()
    # The platforms, and only this tenant's clients
    expect(page.locator("#platform option:not([disabled])")).to_have_text(
        ["Meta (Facebook, Instagram)", "Google Ads", "TikTok"])
    expect(page.locator("#client_id option")).to_have_text(
        ["None (this workspace's own account)", "Acme Shoes"])
    expect(page.locator("#ad_source option")).to_have_text(["manual", "api", "webhook"])

    export = tmp_path / "meta-march.csv"
    export.write_text(meta_export(), encoding="utf-8")
    page.select_option("#platform", "meta")
    page.select_option("#client_id", acme_shoes)
    page.select_option("#ad_source", "webhook")
    page.set_input_files("#import-file", str(export))
    browser.shot(page, out_dir, "01-ad-metrics-form")
    page.get_by_role("button", name="Upload and import").click()
    item = page.locator(".import-item", has_text="meta-march.csv")
    expect(item).to_have_attribute("data-outcome", "accepted")
    expect(item.locator("[data-field=contract]")).to_have_text("ad_metrics · meta")
    [batch] = conn.execute("SELECT contract, platform, client_id::text AS client_id, source, "
                           "created_by FROM import_batches WHERE tenant_id = %s",
                           (admin.tenant_id,)).fetchall()
    assert batch == {"contract": "ad_metrics", "platform": "meta", "client_id": acme_shoes,
                     "source": "webhook", "created_by": admin.user_id}

    # Back to judgments: the records source is sent again, no platform or client
    page.select_option("#contract", "judgments")
    expect(ad_fields).to_be_hidden()
    judgments = tmp_path / "j.csv"
    judgments.write_bytes(records.judgments_csv(2, seed="AD"))
    page.select_option("#source", "jbi")
    page.set_input_files("#import-file", str(judgments))
    page.get_by_role("button", name="Upload and import").click()
    expect(page.locator(".import-item", has_text="j.csv")).to_have_attribute(
        "data-outcome", "accepted")
    row = conn.execute("SELECT platform, client_id, source FROM import_batches "
                       "WHERE contract = 'judgments'").fetchone()
    assert row == {"platform": None, "client_id": None, "source": "jbi"}
    page.set_viewport_size(PHONE)
    page.select_option("#contract", "ad_metrics")
    browser.shot(page, out_dir, "02-ad-metrics-form-390")
