"""Issue 11 in Chromium, end to end with a real worker: a run the queue lost is failed by the
crash guard as passing, retried from its page, and followed to success from the live stream;
an edited file uploaded as a new version becomes version 2 of the same document."""

from __future__ import annotations

import pytest

from tests.support import browser, ops, stack
from tests.support.stack import wait_until

pytestmark = pytest.mark.slow

STATUS = "[data-run] .run-state [data-field=status]"


def _runs(conn, tenant_id) -> list[dict]:
    return conn.execute("SELECT run_id, doc_id, status FROM ingestion_runs WHERE tenant_id = %s "
                        "ORDER BY created_at", (tenant_id,)).fetchall()


def _status(conn, run_id) -> str:
    return conn.execute("SELECT status FROM ingestion_runs WHERE run_id = %s",
                        (run_id,)).fetchone()["status"]


def test_a_lost_job_is_retried_from_its_page_and_an_edited_file_becomes_version_2(
        stack_env, tenants, conn, queues, context, out_dir, tmp_path):
    from playwright.sync_api import expect

    # A crash guard that gives up on a queued run after 3 s without republishing it: what the
    # product does after an hour (and three republishes) of no worker picking a job up.
    env = {**stack_env, "CRASH_GUARD_INTERVAL_S": "0.5", "CRASH_GUARD_QUEUED_TTL_HOURS": str(3 / 3600),
           "CRASH_GUARD_MAX_REPUBLISHES": "0", "CRASH_GUARD_REPUBLISH_AFTER_S": "0.5"}
    gateway = stack.start_gateway(env, out_dir)
    worker = None
    try:
        user = tenants.user(role="user")
        page = context.new_page()
        browser.sign_in(page, gateway.url, user.email)

        # Given notes.md uploaded from the upload page while no worker runs, and its job then
        # lost by the queue
        notes = tmp_path / "notes.md"
        notes.write_bytes(b"# Notes\n\nThe first version is about herons.\n")
        page.set_input_files("#files", str(notes))
        expect(page.locator(".upload", has_text="notes.md")).to_have_attribute(
            "data-outcome", "queued")
        [first] = _runs(conn, user.tenant_id)
        wait_until(lambda: conn.execute("SELECT published_at FROM job_outbox WHERE run_id = %s",
                                        (first["run_id"],)).fetchone()["published_at"],
                   timeout=15, message="job published")
        assert len(ops.drain(queues, queues.url)) == 1

        # When the crash guard fails it, its page says so and that retrying helps
        page.goto(f"{gateway.url}/runs/{first['run_id']}")
        expect(page.locator(STATUS)).to_have_text("Failed", timeout=30_000)
        expect(page.locator("[data-field=advice]")).to_contain_text("No worker picked the job up")
        expect(page.locator("[data-field=attempts]")).to_have_text(
            "No worker has picked this run up yet.")
        retry = page.get_by_role("button", name="Retry this run")
        expect(retry).to_be_visible()
        browser.shot(page, out_dir, "01-run-never-picked-up")

        # When workers are back and the user retries from the page
        worker = stack.start_worker(stack_env, out_dir)
        stack.wait_for_log(worker, '"event":"worker started"')
        expect(page.locator("html")).to_have_attribute("data-live", "open")
        page.evaluate("window.samePage = true")  # gone if the page were loaded again
        retry.click()

        # Then the open page follows the run to success, told by the live stream: it shows
        # it within seconds of the database, where polling alone would wait 15 s
        wait_until(lambda: _status(conn, first["run_id"]) == "succeeded", timeout=120,
                   message="retried run succeeded")
        expect(page.locator(STATUS)).to_have_text("Succeeded", timeout=5_000)
        assert page.evaluate("window.samePage === true"), "the page was reloaded"
        # and its one attempt is the retry, which a worker picked up and finished
        attempts = page.locator("[data-field=attempts] tr")
        expect(attempts).to_have_count(1)
        expect(attempts.first).to_contain_text("Retry")
        expect(attempts.first).to_contain_text("Succeeded")
        expect(attempts.first.locator("[data-label=Worker]")).not_to_have_text("—")
        expect(page.locator("[data-field=error_box]")).to_be_hidden()
        browser.shot(page, out_dir, "02-run-retried-succeeded")
        # and the stats, drawn live by the page's script, read as the server renders them
        stats = page.locator("[data-field=stats] > *")
        expect(stats.first).to_have_text("Documents processed")
        drawn_live = stats.all_inner_texts()
        page.reload()
        expect(stats).to_have_text(drawn_live)
        assert not any("_" in text for text in drawn_live), drawn_live

        # When an edited notes.md is uploaded and offered as a new version, and taken
        notes.write_bytes(b"# Notes\n\nThe second version is about egrets.\n")
        page.goto(f"{gateway.url}/upload")
        page.set_input_files("#files", str(notes))
        row = page.locator(".upload", has_text="notes.md").first
        expect(row).to_contain_text("Upload as a new version of notes.md?")
        row.get_by_role("button", name="Upload as a new version").click()
        expect(row).to_have_attribute("data-outcome", "queued")
        wait_until(lambda: len(_runs(conn, user.tenant_id)) == 2, timeout=15,
                   message="second run")
        second = _runs(conn, user.tenant_id)[1]
        assert second["doc_id"] == first["doc_id"]
        wait_until(lambda: _status(conn, second["run_id"]) == "succeeded", timeout=120,
                   message="version 2 succeeded")

        # Then the document's page serves version 2, keeps version 1 as inactive, and shows
        # the edited text
        page.goto(f"{gateway.url}/documents/{first['doc_id']}")
        expect(page.locator("section:has(> h2:text-is('Active version')) "
                            "dt:text-is('Version') + dd")).to_have_text("2")
        versions = page.locator("section:has(> h2:text-is('Versions'))")
        expect(versions.locator("tbody tr")).to_have_count(2)
        expect(versions.locator("tbody tr").nth(0)).to_contain_text("Active")
        expect(versions.locator("tbody tr").nth(1)).to_contain_text("Inactive")
        expect(page.locator("[data-chunks]")).to_contain_text("egrets")
        expect(page.locator("[data-chunks]")).not_to_contain_text("herons")
        browser.shot(page, out_dir, "03-document-version-2")
        page.set_viewport_size({"width": 390, "height": 844})
        browser.shot(page, out_dir, "04-document-version-2-390")
    finally:
        if worker is not None:
            worker.stop()
        gateway.stop()
