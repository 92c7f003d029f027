"""Issue 11 in Chromium: the upload page refuses in the browser, counts, cancels, warns, offers
new versions and remembers recent uploads; the runs pages filter and say whether to retry."""

from __future__ import annotations

import re

import pytest

from tests.support import browser
from tests.support.stack import wait_until

pytestmark = pytest.mark.slow


def _runs(conn, tenant_id) -> int:
    return conn.execute("SELECT count(*) AS n FROM ingestion_runs WHERE tenant_id = %s",
                        (tenant_id,)).fetchone()["n"]


def test_the_upload_page_checks_counts_cancels_and_offers_a_new_version(
        gateway, conn, tenants, context, out_dir, tmp_path):
    from playwright.sync_api import expect

    user = tenants.user(role="user")
    page = context.new_page()
    browser.sign_in(page, gateway.url, user.email)
    files = {"tool.exe": b"MZ" + b"\x00" * 100, "bundle.zip": b"PK\x03\x04" + b"\x00" * 50,
             "empty.txt": b"", "notes.md": b"# Notes\n\nFirst version.\n"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)

    # Refused types and empty files never leave the browser, and their rows are errors
    page.set_input_files("#files", [str(tmp_path / n) for n in files])
    notes = page.locator(".upload", has_text="notes.md")
    expect(notes).to_have_attribute("data-outcome", "queued")
    for name in ("tool.exe", "bundle.zip", "empty.txt"):
        row = page.locator(".upload", has_text=name)
        expect(row).to_have_attribute("data-outcome", "refused")
        expect(row.locator("progress")).to_be_hidden()
    expect(page.locator("[data-field=summary]")).to_have_text(
        re.compile(r"^1 (queued|processing|ingested), 3 refused$"))
    assert _runs(conn, user.tenant_id) == 1
    first_doc = conn.execute("SELECT doc_id FROM ingestion_runs WHERE tenant_id = %s",
                             (user.tenant_id,)).fetchone()["doc_id"]
    browser.shot(page, out_dir, "01-upload-refused")

    # Recent uploads come from the API and survive a reload
    page.reload()
    expect(page.locator("[data-recent] li", has_text="notes.md")).to_be_visible()

    # An edited notes.md is offered as a new version; cancelling while asking sends nothing
    (tmp_path / "notes.md").write_bytes(b"# Notes\n\nSecond version.\n")
    page.set_input_files("#files", [str(tmp_path / "notes.md")])
    row = page.locator(".upload", has_text="notes.md").first
    expect(row).to_contain_text("Upload as a new version of notes.md?")
    # Leaving now asks first
    assert page.evaluate("() => { const e = new Event('beforeunload', {cancelable: true}); "
                         "window.dispatchEvent(e); return e.defaultPrevented; }")
    row.get_by_role("button", name="Cancel").click()
    expect(row).to_have_attribute("data-outcome", "cancelled")
    assert _runs(conn, user.tenant_id) == 1
    # Try again, and take the offer: the run is a new version of the same document
    row.get_by_role("button", name="Try again").click()
    row.get_by_role("button", name="Upload as a new version").click()
    expect(row).to_have_attribute("data-outcome", "queued")
    wait_until(lambda: _runs(conn, user.tenant_id) == 2, timeout=15, message="second run")
    docs = {r["doc_id"] for r in conn.execute(
        "SELECT doc_id FROM ingestion_runs WHERE tenant_id = %s", (user.tenant_id,))}
    assert docs == {first_doc}
    assert not page.evaluate("() => { const e = new Event('beforeunload', {cancelable: true}); "
                             "window.dispatchEvent(e); return e.defaultPrevented; }")
    browser.shot(page, out_dir, "02-upload-new-version")
    page.set_viewport_size({"width": 390, "height": 844})
    browser.shot(page, out_dir, "03-upload-390")

    # The runs page filters as you type
    page.set_viewport_size(browser.LAPTOP)
    page.goto(f"{gateway.url}/runs")
    expect(page.locator("[data-runs] tbody tr")).to_have_count(2)
    page.get_by_label("File name").fill("nothing-like-this")
    expect(page.locator("[data-runs] tbody tr")).to_have_count(0)
    expect(page).to_have_url(re.compile(r"filename=nothing-like-this"))
    page.get_by_label("File name").fill("NOTES")
    expect(page.locator("[data-runs] tbody tr")).to_have_count(2)
    created = page.locator("[data-runs] tbody tr time").first
    expect(created).to_have_text(re.compile(r"ago|just now"))
    assert created.get_attribute("title")
    browser.shot(page, out_dir, "04-runs-filtered")
    page.set_viewport_size({"width": 390, "height": 844})
    browser.shot(page, out_dir, "05-runs-390")


def test_a_failed_run_page_says_whether_retrying_helps(gateway, conn, tenants, context, out_dir):
    from playwright.sync_api import expect

    user = tenants.user(role="user")
    page = context.new_page()
    browser.sign_in(page, gateway.url, user.email)
    with gateway.client(user.token) as client:
        run_id = client.post("/v1/ingest", files={"file": ("scan.txt", b"words\n" * 10)}
                             ).json()["run_id"]
    # As the worker records a corrupt file after reading it
    conn.execute("UPDATE ingestion_runs SET status = 'running', started_at = now() WHERE run_id = %s",
                 (run_id,))
    conn.execute("INSERT INTO run_attempts (run_id, attempt_no, tenant_id, kind, worker, queued_at, "
                 "started_at) VALUES (%s, 1, %s, 'delivery', 'w-1', now() - interval '3 s', "
                 "now())", (run_id, user.tenant_id))
    conn.execute("UPDATE ingestion_runs SET status = 'failed', stage = 'extract', finished_at = now(), "
                 "error = 'extract: the file is corrupt.', error_code = 'extraction_error', "
                 "stats = '{\"stages\": {\"read_ms\": 12}}' WHERE run_id = %s", (run_id,))
    page.goto(f"{gateway.url}/runs/{run_id}")
    expect(page.locator("[data-field=advice]")).to_contain_text("Fix or re-export it")
    expect(page.get_by_role("button", name="Retry anyway")).to_be_visible()
    timeline = page.locator("[data-field=timeline]")
    expect(timeline).to_contain_text("Read the file")
    expect(timeline.locator(".step-done")).to_contain_text("12 ms")
    expect(timeline.locator(".step-failed")).to_contain_text("Extract the text")
    expect(page.locator("[data-field=attempts] tr")).to_have_count(1)
    expect(page.locator("[data-field=attempts]")).to_contain_text("First pick-up")
    expect(page.locator("[data-field=attempts]")).to_contain_text("3.0 s")
    browser.shot(page, out_dir, "01-run-not-retryable")
    page.set_viewport_size({"width": 390, "height": 844})
    browser.shot(page, out_dir, "02-run-390")
