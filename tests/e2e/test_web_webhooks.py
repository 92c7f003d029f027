"""The Webhooks admin page in Chromium (issue 13 item 9): add an endpoint and see its secret
once, send a test event that a real local receiver gets and verifies, read the delivery log,
refuse a metadata-service URL, delete; another tenant's admin never sees any of it."""

from __future__ import annotations

import json

import pytest
from standardwebhooks import Webhook

from tests.support import browser, stack
from tests.support.receiver import Receiver
from tests.support.stack import wait_until

pytestmark = pytest.mark.slow


def test_an_admin_manages_webhooks_and_reads_the_delivery_log(stack_env, tenants, conn,
                                                               context, out_dir):
    from playwright.sync_api import expect

    receiver = Receiver().start()
    env = {**stack_env, "WEBHOOK_URL_ALLOWLIST": json.dumps([receiver.url]),
           "WEBHOOK_DISPATCH_POLL_S": "0.1"}
    gw = stack.start_gateway(env, out_dir, name="gateway")
    worker = stack.start_worker(env, out_dir, name="worker")
    try:
        admin = tenants.user()
        stranger = tenants.user(tenant="globex")
        page = context.new_page()
        page.on("dialog", lambda dialog: dialog.accept())  # the confirm() of a delete
        browser.sign_in(page, gw.url, admin.email)

        browser.nav(page, "Webhooks").click()
        expect(page.get_by_role("heading", name="Webhooks", exact=True)).to_be_visible()
        expect(page.locator("[data-webhooks]")).to_contain_text("No webhooks yet.")

        # ── a metadata-service URL is refused with the reason ────────────────────────────
        page.get_by_label("Endpoint URL").fill("https://169.254.169.254/latest/meta-data/")
        page.get_by_role("button", name="Add webhook").click()
        expect(page.locator('[data-field="form_error"]')).to_contain_text("link-local")

        # ── add: the secret is shown once ───────────────────────────────────────────────
        page.get_by_label("Endpoint URL").fill(receiver.url)
        page.get_by_role("button", name="Add webhook").click()
        secret_box = page.locator('[data-field="secret"]')
        expect(secret_box).to_contain_text("whsec_")
        secret = secret_box.inner_text()
        stored = conn.execute("SELECT webhook_id, secret FROM webhooks WHERE tenant_id = %s",
                              (admin.tenant_id,)).fetchone()
        assert stored["secret"] == secret
        browser.shot(page, out_dir, "01-secret-once")
        page.get_by_role("link", name="Done").click()
        row = page.locator("tr", has_text=receiver.url)
        expect(row).to_contain_text("ingestion.complete")
        assert secret not in page.content()

        # ── send a test event: the receiver gets it, signed ─────────────────────────────
        row.get_by_role("button", name="Send test event").click()
        expect(page.locator('[data-field="action_result"]')).to_contain_text("Test event queued")
        wait_until(lambda: receiver.requests, timeout=120, message="test event received")
        request = receiver.requests[0]
        assert Webhook(secret).verify(request.body, request.headers)["type"] == "webhook.test"

        # ── the delivery log ────────────────────────────────────────────────────────────
        wait_until(lambda: conn.execute("SELECT status FROM webhook_deliveries").fetchone()[
            "status"] == "delivered", timeout=30, message="delivery settled")
        row.get_by_role("link", name="Delivery log").click()
        expect(page.get_by_role("heading", name="Delivery log")).to_be_visible()
        entry = page.locator("tr[data-delivery-id]")
        expect(entry).to_have_count(1)
        expect(entry).to_contain_text("webhook.test")
        expect(entry).to_contain_text(request.headers["webhook-id"])
        expect(entry.locator('[data-field="status"]')).to_contain_text("elivered")
        expect(entry.locator('[data-field="last_status_code"]')).to_have_text("200")
        browser.shot(page, out_dir, "02-delivery-log")
        log_url = page.url

        # ── rotate the secret: the new one shown once, both sign during the grace ────────
        page.get_by_role("button", name="Rotate secret").click()
        new_box = page.locator('[data-field="secret_panel"] [data-field="secret"]')
        expect(new_box).to_contain_text("whsec_")
        new_secret = new_box.inner_text()
        assert new_secret != secret
        browser.shot(page, out_dir, "03-secret-rotated")
        page.get_by_role("link", name="Done").click()
        expect(page.locator('[data-field="grace"]')).to_contain_text("also signs every delivery")
        expect(entry).to_have_count(1)  # the log survived the rotation
        assert new_secret not in page.content()
        page.get_by_role("button", name="Send test event").click()
        wait_until(lambda: len(receiver.requests) >= 2, timeout=120, message="second test event")
        signed = receiver.requests[1]
        for key in (new_secret, secret):
            assert Webhook(key).verify(signed.body, signed.headers)["type"] == "webhook.test"

        # ── another tenant's admin sees none of it ──────────────────────────────────────
        other = context.browser.new_context()
        other_page = other.new_page()
        browser.sign_in(other_page, gw.url, stranger.email)
        other_page.goto(f"{gw.url}/admin/webhooks")
        expect(other_page.locator("[data-webhooks]")).to_contain_text("No webhooks yet.")
        answer = other_page.goto(log_url)
        assert answer is not None and answer.status == 404
        expect(other_page.locator("body")).not_to_contain_text(receiver.url)
        other.close()

        # ── delete ──────────────────────────────────────────────────────────────────────
        page.goto(f"{gw.url}/admin/webhooks")
        page.locator("tr", has_text=receiver.url).get_by_role("button", name="Delete").click()
        expect(page.locator('[data-field="action_result"]')).to_contain_text("Webhook deleted")
        expect(page.locator("tr", has_text=receiver.url)).to_have_count(0)
        assert conn.execute("SELECT count(*) AS n FROM webhooks").fetchone()["n"] == 0
    finally:
        worker.stop()
        gw.stop()
        receiver.stop()
