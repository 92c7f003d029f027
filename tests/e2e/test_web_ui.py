"""The web UI in Chromium, as a user: sign in, upload, follow runs live, read documents, sign out.

A gateway and a worker run as processes (tests/support/stack.py); the browser is Debian's
Chromium driven by Playwright (tests/support/browser.py). Screenshots of every page land in the
test's folder under test-output/ for reviewers.
"""

from __future__ import annotations

import re

import pytest

from gateway.web import reads
from tests.conftest import TEST_PASSWORD, tenant_of
from tests.support import browser, documents, stack

pytestmark = pytest.mark.slow


def _files(tmp_path):
    """Three documents: a long one (its run stays `running` for seconds), HTML and PDF."""
    files = {
        "handbook.md": documents.make_markdown(40),
        "field-notes.html": documents.make_html(
            "Field notes", [("Stations", documents.prose(200, seed=5))]),
        "report.pdf": documents.make_pdf([documents.prose(250, seed=1)]),
    }
    paths = []
    for name, data in files.items():
        path = tmp_path / name
        path.write_bytes(data)
        paths.append(path)
    return paths


RECORD_PROGRESS = """() => {
  window.__progress = {};
  new MutationObserver(() => {
    document.querySelectorAll('.upload').forEach((li) => {
      const name = li.querySelector('[data-field="name"]').textContent;
      const value = Number(li.querySelector('progress').value);
      const seen = (window.__progress[name] = window.__progress[name] || []);
      if (seen[seen.length - 1] !== value) seen.push(value);
    });
  }).observe(document.body, {subtree: true, childList: true, attributes: true,
                             characterData: true});
}"""

RECORD_STATUS = """() => {
  window.__noReload = true;
  const pill = () => document.querySelector('[data-run] [data-field="status"]').textContent;
  window.__statuses = [pill()];
  new MutationObserver(() => {
    const now = pill();
    if (window.__statuses[window.__statuses.length - 1] !== now) window.__statuses.push(now);
  }).observe(document.querySelector('[data-run]'), {subtree: true, childList: true,
                                                    characterData: true});
}"""


def test_a_user_uploads_follows_runs_reads_documents_and_signs_out(
        gateway, stack_env, tenants, context, out_dir, tmp_path):
    from playwright.sync_api import expect

    user = tenants.user(role="user")
    page = context.new_page()
    worker = None
    try:
        # ── sign in ──────────────────────────────────────────────────────────────────────
        page.goto(f"{gateway.url}/runs")
        expect(page).to_have_url(re.compile(r"/login\?next=%2Fruns$"))
        browser.shot(page, out_dir, "01-login")
        # Sign-in names the tenant (docs/decisions/0202)
        page.get_by_label("Tenant").fill(tenant_of(user.email))
        page.get_by_label("E-mail").fill(user.email)
        page.get_by_label("Password").fill("wrong password!")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_have_text(
            "The e-mail or password is wrong; check both and try again.")
        # The keyboard alone signs in: after a wrong password the password field has focus,
        # Shift+Tab goes back to the e-mail, Tab forth again, Enter sends
        expect(page.get_by_label("Password")).to_be_focused()
        page.keyboard.press("Shift+Tab")
        expect(page.get_by_label("E-mail")).to_be_focused()
        page.keyboard.press("Control+A")
        page.keyboard.type(user.email)
        page.keyboard.press("Tab")
        expect(page.get_by_label("Password")).to_be_focused()
        page.keyboard.type(TEST_PASSWORD)
        page.keyboard.press("Enter")
        expect(page).to_have_url(re.compile(r"/runs$"))
        expect(page.get_by_role("heading", name="Ingestion runs")).to_be_visible()

        # ── upload three files at once; each bar reaches 100 % ───────────────────────────
        browser.nav(page, "Upload").click()
        expect(page.locator("#upload-rules")).to_contain_text("50.0 MB")
        expect(page.locator("#upload-rules")).to_contain_text("PDF, DOCX, HTML, TXT, MD")
        browser.shot(page, out_dir, "02-upload-empty")
        page.evaluate(RECORD_PROGRESS)
        paths = _files(tmp_path)
        page.set_input_files("#files", [str(p) for p in paths])
        items = page.locator(".upload")
        expect(items).to_have_count(3)
        for path in paths:
            item = items.filter(has_text=path.name)
            expect(item).to_have_attribute("data-outcome", "queued")
            expect(item.locator("progress")).to_have_attribute("value", "100")
            expect(item.get_by_role("link", name="Follow its run")).to_be_visible()
        seen = page.evaluate("window.__progress")
        for path in paths:
            assert seen[path.name][-1] == 100, seen
            assert seen[path.name] == sorted(seen[path.name]), seen
        browser.shot(page, out_dir, "03-upload-queued")

        # ── a run goes queued → running → succeeded without a reload ─────────────────────
        page.locator(".upload", has_text="handbook.md").get_by_role(
            "link", name="Follow its run").click()
        status = page.locator('[data-run] [data-field="status"]')
        expect(status).to_have_text("Queued")
        page.evaluate(RECORD_STATUS)
        browser.shot(page, out_dir, "04-run-queued")
        worker = stack.start_worker(stack_env, out_dir)
        expect(status).to_have_text("Succeeded", timeout=240_000)
        assert page.evaluate("window.__noReload") is True
        statuses = page.evaluate("window.__statuses")
        assert statuses == ["Queued", "Running", "Succeeded"], statuses
        expect(page.locator('[data-field="progress_text"]')).to_have_text("100%")
        expect(page.locator('[data-field="processing"]')).not_to_have_text("—")
        # in words, redrawn live by static/runs.js as format.stats_entries renders them
        stats = page.locator('[data-field="stats"]')
        expect(stats).to_contain_text("Chunks")
        expect(stats).to_contain_text("Time per stage")
        expect(stats).to_contain_text("Compute embeddings")
        expect(stats).not_to_contain_text("_")
        expect(page.locator("[data-retry]")).to_be_hidden()
        browser.shot(page, out_dir, "05-run-succeeded")

        # ── the runs table, filtered ─────────────────────────────────────────────────────
        with gateway.client(user.token) as api:
            stack.wait_until(lambda: all(
                r["status"] == "succeeded" for r in api.get("/v1/ingestion-runs").json()["items"]),
                timeout=240, interval=1, message="every upload processed")
        browser.nav(page, "Runs").click()
        rows = page.locator("table.runs tbody tr")
        expect(rows).to_have_count(3)
        page.get_by_label("Status").select_option("succeeded")
        page.get_by_role("button", name="Filter").click()
        expect(page).to_have_url(re.compile(r"status=succeeded"))
        expect(rows).to_have_count(3)
        expect(rows.first.locator('[data-field="status"]')).to_have_text("Succeeded")
        browser.shot(page, out_dir, "06-runs")

        # ── the same file again: offered as a new version (ADR 0102), kept apart it is ──
        # ── skipped; too large and unsupported files are refused in the browser (issue 11) ──
        browser.nav(page, "Upload").click()
        posts = []
        page.on("request", lambda r: posts.append(r) if r.url.endswith("/v1/ingest") else None)
        huge = tmp_path / "huge.pdf"
        with open(huge, "wb") as f:
            f.truncate(60 * 1024 * 1024)
        odd = tmp_path / "clip.mp4"
        odd.write_bytes(b"\x00\x00\x00\x18ftypmp42")
        page.set_input_files("#files", [str(paths[0]), str(huge), str(odd)])
        # and a file dropped on the zone uploads like a picked one
        dropped = page.evaluate_handle("""() => {
            const data = new DataTransfer();
            data.items.add(new File(["# Dropped\\n\\nA note dropped on the page."],
                                    "dropped.md", {type: "text/markdown"}));
            return data;
        }""")
        page.dispatch_event("[data-dropzone]", "drop", {"dataTransfer": dropped})
        expect(page.locator(".upload", has_text="dropped.md")).to_have_attribute(
            "data-outcome", "queued")
        too_large = page.locator(".upload", has_text="huge.pdf")
        expect(too_large).to_have_attribute("data-outcome", "refused")
        expect(too_large).to_contain_text("Too large: huge.pdf is 60.0 MB, over the 50.0 MB limit")
        expect(too_large.locator("progress")).to_be_hidden()
        unsupported = page.locator(".upload", has_text="clip.mp4")
        expect(unsupported).to_have_attribute("data-outcome", "refused")
        expect(unsupported).to_contain_text("Unsupported type: .mp4 files are not accepted")
        expect(unsupported.locator("progress")).to_be_hidden()
        # handbook.md names an uploaded document: the page asks before sending anything
        again = page.locator(".upload", has_text="handbook.md")
        expect(again).to_have_attribute("data-outcome", "deciding")
        expect(again).to_contain_text("Upload as a new version of handbook.md?")
        summary = page.locator("[data-field=summary]")
        # (the worker runs: dropped.md's run may already be on its way)
        expect(summary).to_have_text(re.compile(
            r"^1 waiting, 1 (queued|processing|ingested), 2 refused$"))
        assert len(posts) == 1, [p.url for p in posts]  # dropped.md only, so far
        browser.shot(page, out_dir, "07-upload-new-version-offer")
        # Kept as a separate document, the same bytes are recognised and nothing is ingested
        again.get_by_role("button", name="Keep it as a separate document").click()
        expect(again).to_have_attribute("data-outcome", "skipped")
        expect(again).to_contain_text("Skipped: already ingested")
        assert len(posts) == 2  # the 60 MB and the .mp4 file never left the browser
        # and the summary follows the queued file's run to its end, without a reload
        expect(summary).to_have_text("1 ingested, 1 skipped, 2 refused", timeout=120_000)
        browser.shot(page, out_dir, "07-upload-skipped-and-refused")

        # ── the document and its chunks ──────────────────────────────────────────────────
        browser.nav(page, "Documents").click()
        # Search reads inside documents and titles (issue 11); only handbook.md has the word
        page.get_by_label("Search documents").fill("handbook")
        page.get_by_role("button", name="Search").click()
        expect(page.locator("table.data tbody tr")).to_have_count(1)
        browser.shot(page, out_dir, "08-documents")
        page.get_by_role("link", name="handbook.md").click()
        expect(page.get_by_role("heading", name="handbook.md")).to_be_visible()
        # Every chunk is reachable, a page of them at a time (not only a five-chunk preview)
        active = page.locator("tr.is-active")
        expect(active).to_contain_text("Active")
        total = int(active.locator('[data-label="Chunks"]').inner_text())
        assert total > reads.CHUNKS_PER_PAGE, total  # 40 sections: the pager is exercised
        expect(page.locator("[data-chunks] h2")).to_contain_text(f"({total} in all; page 1 of")
        chunks = page.locator("ol.chunks li")
        expect(chunks).to_have_count(reads.CHUNKS_PER_PAGE)
        expect(chunks.first).to_contain_text("Generated handbook")
        page.get_by_role("link", name="Next chunks").click()
        expect(chunks.first).to_have_attribute("value", str(reads.CHUNKS_PER_PAGE + 1))
        page.get_by_role("link", name="Previous chunks").click()
        expect(chunks.first).to_contain_text("Generated handbook")
        expect(page.get_by_role("button", name="Deactivate this document")).to_have_count(0)
        browser.shot(page, out_dir, "09-document")

        # ── a failed run shows its error in full and can be retried by its user ──────────
        browser.nav(page, "Upload").click()
        broken = tmp_path / "broken.pdf"
        broken.write_bytes(documents.make_corrupt_pdf())
        page.set_input_files("#files", str(broken))
        item = page.locator(".upload", has_text="broken.pdf")
        expect(item).to_have_attribute("data-status", "failed", timeout=120_000)
        item.get_by_role("link", name="Open the run").click()
        expect(page.locator('[data-run] [data-field="status"]')).to_have_text("Failed")
        expect(page.locator('[data-field="error"]')).not_to_be_empty()
        # A corrupt file is the file's fault (ADR 0101): the page says to fix it, and Retry is
        # offered only as a secondary "anyway"
        expect(page.locator('[data-field="advice"]')).to_contain_text("Fix or re-export it")
        expect(page.get_by_role("button", name="Retry this run")).to_have_count(0)
        retry = page.get_by_role("button", name="Retry anyway")
        expect(retry).to_be_visible()
        expect(retry).to_have_class("secondary")
        browser.shot(page, out_dir, "10-run-failed")
        expect(page.locator('[data-field="delivery_count"]')).to_have_text("1")
        retry.click()
        # The worker takes the requeued run again, and the page follows it to its end
        expect(page.locator('[data-field="delivery_count"]')).to_have_text("2", timeout=120_000)
        expect(page.locator('[data-field="retry_result"]')).to_have_text(
            "The retry failed too; the error below says why. Fix the file and upload it again.",
            timeout=120_000)
        expect(page.locator('[data-run] [data-field="status"]')).to_have_text("Failed")
        browser.shot(page, out_dir, "11-run-retried")

        # ── a phone-sized screen ─────────────────────────────────────────────────────────
        phone = context.browser.new_context(viewport=browser.PHONE,
                                            storage_state=context.storage_state())
        small = phone.new_page()
        small.goto(f"{gateway.url}/runs")
        expect(small.locator("table.runs tbody tr").first).to_be_visible()
        width = small.evaluate("document.documentElement.scrollWidth")
        assert width <= browser.PHONE["width"], f"the runs page scrolls sideways ({width}px)"
        browser.shot(small, out_dir, "12-runs-phone")
        phone.close()

        # ── admin pages are not for users ────────────────────────────────────────────────
        expect(browser.nav(page, "Sources")).to_have_count(0)
        for path in ("/admin", "/admin/sources", "/admin/dlq"):
            response = page.goto(f"{gateway.url}{path}")
            assert response.status == 403, path
            expect(page.get_by_role("alert")).to_have_text(
                "Only admins may do this; ask an admin of your tenant.")
        browser.shot(page, out_dir, "13-admin-forbidden")

        # ── signing out ends the session ─────────────────────────────────────────────────
        page.goto(f"{gateway.url}/upload")
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(re.compile(r"/login\?signed_out=true$"))
        expect(page.get_by_role("status")).to_have_text("You are signed out.")
        assert not [c for c in context.cookies() if c["name"] == "df_session"]
        browser.shot(page, out_dir, "14-signed-out")
        page.goto(f"{gateway.url}/runs")
        expect(page).to_have_url(re.compile(r"/login\?next=%2Fruns$"))
    finally:
        if worker is not None:
            worker.stop()
