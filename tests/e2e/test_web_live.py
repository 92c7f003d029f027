"""Issue 13 item 7 in Chromium: the batch page follows its import from the live stream
(GET /v1/live, docs/decisions/0160), and falls back to polling when the stream is cut. A real
gateway, a real `ingest worker --once`, Postgres and moto SQS."""

from __future__ import annotations

import pytest

from tests.e2e.test_records_worker import drain, judgments, submit
from tests.support import browser, records

pytestmark = pytest.mark.slow

STATUS = "h1 [data-field=status]"


def _counts(page) -> dict[str, str]:
    return {f: page.locator(f"[data-field=counts] [data-field={f}]").inner_text()
            for f in ("total", "valid", "invalid", "inserted")}


def test_a_batch_page_turns_completed_from_the_stream_without_a_reload(
        gateway, tenants, conn, context, stack_env, out_dir):
    from playwright.sync_api import expect

    # Given an uploaded judgments file, not yet imported, and its batch page open, with the
    # JSON the page would poll cut off: only the stream can tell the page anything
    user = tenants.user(role="user")
    batch_id = submit(gateway, user, judgments(3), name="live.csv")
    page = context.new_page()
    browser.sign_in(page, gateway.url, user.email)
    polled: list[str] = []

    def cut(route) -> None:
        polled.append(route.request.url)
        route.abort()

    page.route("**/intake/batches/**", cut)
    page.goto(f"{gateway.url}/imports/{batch_id}")
    expect(page.locator(STATUS)).to_have_text("Pending")
    expect(page.locator("html")).to_have_attribute("data-live", "open")
    page.evaluate("window.samePage = true")  # gone if the page were loaded again

    # When a worker imports it (completed, and its IngestionCompleteEvent written)
    drain(conn, stack_env, out_dir, batch_id)

    # Then the open page shows it completed, with the final counts, in place
    expect(page.locator(STATUS)).to_have_text("Completed", timeout=30_000)
    expect(page.locator("[data-field=live_note]")).to_have_count(0)
    assert _counts(page) == {"total": "3", "valid": "3", "invalid": "0", "inserted": "3"}
    assert page.evaluate("window.samePage === true"), "the page was reloaded"
    browser.shot(page, out_dir, "01-batch-completed-live")


def test_without_the_stream_the_batch_page_still_follows_by_polling(
        gateway, tenants, conn, context, out_dir):
    from playwright.sync_api import expect

    # Given a running batch's page whose stream is cut (a proxy that drops it, say)
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        batch_id = records.upload(client, "fallback.csv", records.judgments_csv(2, seed="L")
                                  ).json()["batch_id"]
    records.walk(conn, batch_id, "processing")
    page = context.new_page()
    browser.sign_in(page, gateway.url, user.email)
    page.route("**/v1/live", lambda route: route.abort())
    page.goto(f"{gateway.url}/imports/{batch_id}")
    expect(page.locator(STATUS)).to_have_text("Processing")
    expect(page.locator("html")).to_have_attribute("data-live", "closed")
    page.evaluate("window.samePage = true")

    # When the batch finishes
    records.finish_batch(conn, batch_id, rows_total=2, rows_valid=2, rows_inserted=2)

    # Then polling brings the page there, in place too
    expect(page.locator(STATUS)).to_have_text("Completed", timeout=30_000)
    assert _counts(page)["inserted"] == "2"
    assert page.evaluate("window.samePage === true"), "the page was reloaded"
