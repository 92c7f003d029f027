"""The Imports pages over HTTP with a session cookie (no browser needed): tenancy, the raw-row
rule, the code filter and the upload's CSRF check. tests/e2e/test_web_imports.py drives the
same pages in Chromium. No worker runs: tests/support/records.py writes what the records
pipeline leaves on a batch."""

from __future__ import annotations

from tests.integration.test_web import page_csrf, sign_in
from tests.support import records


def _failed_batch(gateway, conn, user) -> str:
    with gateway.client(user.token) as client:
        batch_id = records.upload(client, "ledger.csv", records.judgments_csv(3, seed="L")
                                  ).json()["batch_id"]
    records.add_errors(conn, batch_id, [
        {"row_number": 2, "field": "amount", "code": "JUDGMENT_AMOUNT_INVALID",
         "message": "Amount is not a number", "raw": {"File #": "RAW-SECRET-2"}},
        {"row_number": 3, "field": "case_number", "code": "JUDGMENT_CASE_NUMBER_MISSING",
         "message": "Case number is required", "raw": {"File #": "RAW-SECRET-3"}}])
    records.finish_batch(conn, batch_id, "failed", rows_total=3, rows_valid=1, rows_invalid=2,
                         rejection_reason="Error rate 66.7% exceeded limit 10.0% (2/3 rows "
                                          "invalid)")
    return batch_id


def test_the_batch_page_is_the_tenants_own_and_raw_rows_are_the_uploaders(
        gateway, conn, tenants):
    uploader = tenants.user(tenant="acme", role="user")
    colleague = tenants.user(tenant="acme", role="user")
    admin = tenants.user(tenant="acme", role="admin")
    outsider = tenants.user(tenant="globex", role="admin")
    batch_id = _failed_batch(gateway, conn, uploader)

    for who, sees_raw in ((uploader, True), (admin, True), (colleague, False)):
        with sign_in(gateway, who.email) as browser:
            page = browser.get(f"/imports/{batch_id}")
            assert page.status_code == 200, page.text
            assert "Error rate 66.7% exceeded limit 10.0%" in page.text
            assert ("RAW-SECRET-2" in page.text) is sees_raw, who.role
            filtered = browser.get(f"/imports/{batch_id}",
                                   params={"code": "JUDGMENT_CASE_NUMBER_MISSING"})
            assert "Case number is required" in filtered.text
            assert "Amount is not a number" not in filtered.text

    with sign_in(gateway, outsider.email) as browser:
        page = browser.get(f"/imports/{batch_id}")
        assert page.status_code == 404
        assert page.headers["content-type"].startswith("text/html")
        assert "ledger.csv" not in page.text and "RAW-SECRET" not in page.text
        assert "ledger.csv" not in browser.get("/imports").text
        assert browser.get("/imports/not-a-uuid").status_code == 404


def test_the_imports_list_is_the_users_own(gateway, conn, tenants):
    mine, theirs = tenants.user(role="user"), tenants.user(role="user")
    with gateway.client(mine.token) as client:
        records.upload(client, "mine.csv", records.judgments_csv(1, seed="M"))
    with gateway.client(theirs.token) as client:
        records.upload(client, "theirs.csv", records.judgments_csv(1, seed="T"))
    with sign_in(gateway, mine.email) as browser:
        page = browser.get("/imports")
        assert page.status_code == 200
        assert "mine.csv" in page.text and "theirs.csv" not in page.text


def test_an_upload_with_the_cookie_but_no_csrf_header_creates_nothing(gateway, conn, tenants):
    user = tenants.user(role="user")
    with sign_in(gateway, user.email) as browser:
        form = {"contract": "judgments"}
        files = {"file": ("j.csv", records.judgments_csv(1))}
        refused = browser.post("/v1/imports", data=form, files=files)
        assert refused.status_code == 403
        assert conn.execute("SELECT count(*) AS n FROM import_batches").fetchone()["n"] == 0
        accepted = browser.post("/v1/imports", data=form, files=files,
                                headers={"X-CSRF-Token": page_csrf(browser, "/imports")})
        assert accepted.status_code == 202, accepted.text
