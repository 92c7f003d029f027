"""The web UI in Chromium, as an admin: the overview, an S3 source synced from the browser with
live counters, a document deactivated, and a dead letter inspected and redriven.

A gateway and a worker run as processes, S3 and SQS are moto's; screenshots of every page land
in the test's folder under test-output/.
"""

from __future__ import annotations

import re
import uuid

import pytest

from gateway.operations import dlq
from gateway.sources import access as source_access
from shared import objectstore
from tests.support import browser, ops, stack

pytestmark = pytest.mark.slow


def _bucket(s3) -> str:
    """Three handbooks and one file of a type the service does not ingest."""
    bucket = f"kb-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    for i in range(3):
        body = f"# Handbook {i}\n\nHow team {i} onboards new colleagues, step by step.\n"
        s3.put_object(Bucket=bucket, Key=f"handbooks/handbook-{i}.md", Body=body.encode())
    s3.put_object(Bucket=bucket, Key="handbooks/installer.exe", Body=b"MZ not a document")
    return bucket


def test_an_admin_syncs_a_source_deactivates_a_document_and_redrives_a_dead_letter(
        gateway, stack_env, tenants, conn, queues, s3, context, out_dir):
    from playwright.sync_api import expect

    admin = tenants.user(role="admin")
    bucket = _bucket(s3)
    source_access.grant(conn, tenant_id=admin.tenant_id, bucket=bucket, prefix="",
                        granted_by="test", platform=())
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the confirm() of destructive actions
    worker = None
    try:
        browser.sign_in(page, gateway.url, admin.email)

        # ── the overview shows the /api/metrics figures ──────────────────────────────────
        browser.nav(page, "Overview").click()
        expect(page.get_by_role("heading", name="Overview")).to_be_visible()
        expect(page.locator('[data-figure="backlog_count"]')).to_have_text("0")
        expect(page.locator('[data-figure="failed_24h"]')).to_have_text("0")
        browser.shot(page, out_dir, "01-overview")

        # ── create a source on a moto bucket ─────────────────────────────────────────────
        browser.nav(page, "Sources").click()
        expect(page.get_by_text("No sources yet; add one below.")).to_be_visible()
        page.get_by_label("Name").fill("Handbooks")
        page.get_by_label("Bucket").fill(bucket)
        page.get_by_label("Prefix").fill("handbooks/")
        page.get_by_role("button", name="Add source").click()
        expect(page).to_have_url(re.compile(r"/admin/sources/[0-9a-f-]{36}$"))
        source_id = page.url.rsplit("/", 1)[-1]
        expect(page.get_by_role("heading", name="Handbooks")).to_be_visible()
        expect(page.get_by_label("Bucket")).to_have_value(bucket)

        # ── Sync now: the counters arrive without a reload ───────────────────────────────
        page.evaluate("window.__noReload = true")
        page.get_by_role("button", name="Sync now").click()
        panel = page.locator("[data-sync]")
        expect(panel).to_be_visible()
        expect(panel).not_to_have_attribute("data-status", "running", timeout=60_000)
        expect(panel.locator('[data-counter="listed"]')).to_have_text("4")
        expect(panel.locator('[data-counter="new"]')).to_have_text("3")
        expect(panel.locator('[data-counter="skipped"]')).to_have_text("1")
        expect(panel.locator('[data-counter="failed"]')).to_have_text("0")
        expect(panel.locator('[data-field="ingest"]')).to_contain_text("3 files queued by this sync")
        expect(panel.get_by_role("table")).to_contain_text("handbooks/installer.exe")
        expect(page.locator('[data-field="syncs"] tr')).to_have_count(1)
        assert page.evaluate("window.__noReload") is True
        browser.shot(page, out_dir, "02-source-synced")

        # ── edit it ──────────────────────────────────────────────────────────────────────
        page.get_by_label("Name").fill("HR handbooks")
        page.get_by_role("button", name="Save changes").click()
        expect(page.locator('[data-field="action_result"]')).to_have_text(
            "Saved; the changes apply from the next sync.")
        expect(page.get_by_role("heading", name="HR handbooks")).to_be_visible()
        browser.nav(page, "Sources").click()
        row = page.locator("tr", has_text="HR handbooks")
        expect(row).to_contain_text(f"{bucket}/handbooks/")
        expect(row).to_contain_text("Succeeded")
        browser.shot(page, out_dir, "03-sources")

        # ── a worker ingests the synced objects; an admin deactivates one document ──────
        worker = stack.start_worker(stack_env, out_dir)
        with gateway.client(admin.token) as api:
            stack.wait_until(lambda: api.get("/v1/documents").json()["total"] == 3,
                             timeout=240, interval=1, message="three synced documents")
        browser.nav(page, "Documents").click()
        expect(page.locator("table.data tbody tr")).to_have_count(3)
        page.get_by_role("link", name="handbook-0.md").click()
        expect(page.locator("ol.chunks li").first).to_contain_text("How team 0 onboards")
        page.get_by_role("button", name="Deactivate this document").click()
        expect(page.locator('[data-field="action_result"]')).to_have_text(
            "Version 1 is deactivated and no longer served.")
        # The page shows the new state in place; an S3 document never says "upload again"
        expect(page.get_by_text("This document is not served: version 1 was deactivated")
               ).to_be_visible()
        expect(page.locator('[data-field="notice"]')).not_to_contain_text("upload")
        expect(page.locator('[data-field="source"]')).to_contain_text(
            "S3 object handbooks/handbook-0.md")
        browser.shot(page, out_dir, "04-document-deactivated")
        browser.nav(page, "Documents").click()
        expect(page.locator("table.data tbody tr")).to_have_count(2)

        # ── a poison message in the DLQ: inspect it, redrive it ──────────────────────────
        store_root = objectstore.file_path(stack_env["UPLOAD_STORE_URI"])
        stuck = ops.make_run(conn, store_root, admin, status="failed", name="stuck.md",
                             error="read: S3Timeout (transient).")
        ops.to_dlq(queues, stuck.body)
        dead = dlq.DeadLetterQueue(queues.client, queues.dlq_url)
        dlq.archive(dead, conn)  # what the gateway's housekeeping does every 30 s
        # If that housekeeping received the message first, its row lands a moment later
        stack.wait_until(lambda: dlq.open_count(conn, admin.tenant_id) == 1, timeout=60,
                         message="the dead letter archived")
        browser.nav(page, "Dead letters").click()
        rows = page.locator('[data-field="rows"] tr')
        expect(page.locator('[data-field="loading"]')).to_be_hidden()
        expect(page.locator('[data-field="error"]')).to_be_hidden()  # the list request was served
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text(str(stuck.run_id)[:8])
        expect(rows.first).to_contain_text("Failed")
        browser.shot(page, out_dir, "05-dlq")

        rows.first.get_by_role("link").first.click()
        expect(page.locator('[data-field="body"]')).to_contain_text(str(stuck.run_id))
        expect(page.locator('[data-field="reason"]')).to_contain_text("run is failed")
        browser.shot(page, out_dir, "06-dlq-message")

        page.get_by_role("link", name="← Dead letters").click()
        expect(rows).to_have_count(1)
        rows.first.get_by_role("checkbox").check()
        page.get_by_role("button", name="Redrive selected (1)").click()
        expect(page.locator('[data-field="action_result"]')).to_have_text("Done: 1 redriven.")
        expect(page.get_by_text("No open dead letter of your tenant.")).to_be_visible()
        browser.shot(page, out_dir, "07-dlq-redriven")

        # The reopened run is processed by the worker, and its page says so
        stack.wait_until(lambda: ops.depth(queues, queues.dlq_url) == 0 and conn.execute(
            "SELECT status FROM ingestion_runs WHERE run_id = %s",
            (stuck.run_id,)).fetchone()["status"] == "succeeded",
            timeout=240, interval=1, message="the redriven run succeeded")
        page.goto(f"{gateway.url}/runs/{stuck.run_id}")
        expect(page.locator('[data-run] [data-field="status"]')).to_have_text("Succeeded")
        [action] = ops.actions(conn, stuck.run_id)
        assert action["action"] == "redrive" and action["reason"] == "redriven from the web UI"

        # ── purging is for platform operators, not tenant admins ─────────────────────────
        expect(page.get_by_role("button", name="Purge")).to_have_count(0)
        expect(browser.nav(page, "All dead letters")).to_have_count(0)

        # ── the overview counts what happened ────────────────────────────────────────────
        browser.nav(page, "Overview").click()
        expect(page.locator('[data-figure="failed_24h"]')).to_have_text("0")
        browser.shot(page, out_dir, "08-overview-after")

        # ── the admin pages on a phone-sized screen ──────────────────────────────────────
        phone = context.browser.new_context(viewport=browser.PHONE,
                                            storage_state=context.storage_state())
        small = phone.new_page()
        small.goto(f"{gateway.url}/admin/sources/{source_id}")
        expect(small.locator('[data-sync] [data-counter="new"]')).to_have_text("3")
        width = small.evaluate("document.documentElement.scrollWidth")
        assert width <= browser.PHONE["width"], f"the source page scrolls sideways ({width}px)"
        browser.shot(small, out_dir, "09-source-phone")
        phone.close()
    finally:
        if worker is not None:
            worker.stop()
