"""The event-ledger page in Chromium (issue 14 item 4): an admin lists dead letters, filters
them, inspects one, replays chosen ones and all matching a filter; a user gets the 403 page;
another tenant's events never show.

Dead letters are written in the shape the worker leaves them: inserted as the intake writer
commits them (tests/e2e/test_ledger_apply.py `put`), then marked dead_letter with the applier's
error and attempt count. A real gateway serves the page and the API; screenshots land in the
test's folder under test-output/.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.test_ledger_apply import event, judgment, put
from tests.support import browser

pytestmark = pytest.mark.slow

HOSTILE = "<img src=x onerror=window.__pwned=1>"


def dead(conn, tenant_id, event_id: str, payload, error: str, *, source: str = "jbi",
         type: str = "judgment.upserted", attempts: int = 1) -> int:
    ledger_id = put(conn, tenant_id, event_id, payload, type=type, source=source)
    conn.execute("UPDATE event_ledger SET process_state = 'dead_letter', process_error = %s, "
                 "apply_attempt_count = %s WHERE ledger_id = %s", (error, attempts, ledger_id))
    return ledger_id


def states(conn, *ids: int) -> list[str]:
    return [event(conn, i)["process_state"] for i in ids]


def test_an_admin_filters_inspects_and_replays_dead_letters(gateway, tenants, conn, context,
                                                            out_dir):
    from playwright.sync_api import expect

    admin = tenants.user(role="admin")
    money = dead(conn, admin.tenant_id, "e-money", judgment("CV-1", HOSTILE),
                 "JUDGMENT_AMOUNT: Amount is not money: " + HOSTILE)
    money2 = dead(conn, admin.tenant_id, "e-money-2", judgment("CV-2", "x"),
                  "JUDGMENT_AMOUNT: Amount is not money: 'x'", attempts=1)
    unknown = dead(conn, admin.tenant_id, "e-inv", {"n": 1}, "unknown type invoice.paid",
                   source="billing", type="invoice.paid")
    crm = dead(conn, admin.tenant_id, "e-crm", {"n": 2}, "unknown type lead.created",
               source="crm", type="lead.created", attempts=10)
    fine = put(conn, admin.tenant_id, "e-ok", judgment("CV-3"))  # pending: not a dead letter
    other = tenants.user(tenant="globex", role="admin")
    theirs = dead(conn, other.tenant_id, "e-theirs", {"secret": "globex"},
                  "unknown type globex.only", source="jbi")

    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the confirm() of "Replay all matching"
    browser.sign_in(page, gateway.url, admin.email)

    # ── the list: dead letters by default, this tenant's only ──────────────────────────────
    browser.nav(page, "Events").click()
    expect(page.get_by_role("heading", name="Event ledger")).to_be_visible()
    rows = page.locator('[data-field="rows"] tr')
    expect(rows).to_have_count(4)
    expect(page.locator(f'tr[data-ledger-id="{fine}"]')).to_have_count(0)
    expect(page.locator(f'tr[data-ledger-id="{theirs}"]')).to_have_count(0)
    expect(page.locator("main")).not_to_contain_text("globex")
    row = page.locator(f'tr[data-ledger-id="{crm}"]')
    for text in ("crm", "e-crm", "lead.created", "Dead letter", "10", "unknown type lead.created"):
        expect(row).to_contain_text(text)
    # The upstream error is shown as text, never as markup
    expect(page.locator(f'tr[data-ledger-id="{money}"]')).to_contain_text(HOSTILE)
    expect(page.locator("main img")).to_have_count(0)
    browser.shot(page, out_dir, "01-events-dead-letters")

    # ── filters: by error text, then source and type ──────────────────────────────────────
    page.get_by_label("Error text").fill("not money")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"state=dead_letter.*error=not\+money"))
    expect(rows).to_have_count(2)
    expect(page.locator(f'tr[data-ledger-id="{money2}"]')).to_be_visible()
    page.goto(f"{gateway.url}/admin/events?source_system=billing&type=invoice.paid")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-ledger-id", str(unknown))
    page.goto(f"{gateway.url}/admin/events?state=pending")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-ledger-id", str(fine))
    expect(page.get_by_role("button", name="Replay all matching")).to_be_hidden()

    # ── one event: payload and error as text, the replay history ───────────────────────────
    page.goto(f"{gateway.url}/admin/events")
    page.get_by_role("link", name=str(money), exact=True).click()
    expect(page).to_have_url(re.compile(rf"/admin/events/{money}$"))
    expect(page.locator('[data-field="payload"]')).to_contain_text('"File #": "CV-1"')
    expect(page.locator('[data-field="payload"]')).to_contain_text(HOSTILE)
    expect(page.locator('[data-field="process_error"]')).to_contain_text("JUDGMENT_AMOUNT")
    expect(page.locator("main img")).to_have_count(0)
    assert page.evaluate("window.__pwned") is None
    expect(page.get_by_text("Never replayed.")).to_be_visible()
    expect(page.get_by_role("button", name="Replay this event")).to_be_visible()
    browser.shot(page, out_dir, "02-event-detail")

    # Another tenant's event by its id: the same answer as no event at all
    page.goto(f"{gateway.url}/admin/events/{theirs}")
    expect(page.get_by_role("alert")).to_have_text(
        "No such event in your ledger; go back to the list.")
    expect(page.locator("main")).not_to_contain_text("globex")

    # ── replay selected: two chosen dead letters go back to pending, on the record ─────────
    page.goto(f"{gateway.url}/admin/events")
    expect(rows).to_have_count(4)
    for ledger_id in (money, money2):
        page.get_by_label(f"Select event {ledger_id}", exact=True).check()
    page.get_by_role("button", name="Replay selected (2)").click()
    result = page.locator('[data-field="action_result"]')
    expect(result).to_have_text("Replayed 2 events: back to pending, a worker applies them "
                                "shortly.")
    expect(rows).to_have_count(2)  # the list refreshed in place
    browser.shot(page, out_dir, "03-replayed-selected")
    assert states(conn, money, money2, unknown, crm, theirs) == [
        "pending", "pending", "dead_letter", "dead_letter", "dead_letter"]
    replayed = event(conn, money)  # a fresh budget; the count itself never goes back
    assert replayed["apply_attempt_count"] - replayed["apply_attempt_base"] == 0
    [record] = conn.execute("SELECT * FROM event_replays").fetchall()
    assert record["tenant_id"] == admin.tenant_id
    assert record["actor_user_id"] == admin.user_id and record["actor"] == f"user:{admin.user_id}"
    assert sorted(record["ledger_ids"]) == sorted([money, money2])
    assert record["event_count"] == 2

    # ── replay all matching a filter: only that source, and only this tenant's ─────────────
    page.goto(f"{gateway.url}/admin/events?source_system=billing")
    expect(rows).to_have_count(1)
    # An edited but unsubmitted field does not widen what is replayed
    page.get_by_label("Source").fill("")
    page.get_by_role("button", name="Replay all matching").click()
    expect(result).to_have_text("Replayed 1 event: back to pending, a worker applies it shortly.")
    expect(page.get_by_text("No event matches this filter.")).to_be_visible()
    assert states(conn, unknown, crm, theirs) == ["pending", "dead_letter", "dead_letter"]
    last = conn.execute("SELECT * FROM event_replays ORDER BY created_at DESC, replay_id DESC "
                        "LIMIT 1").fetchone()
    assert last["filter"] == {"source_system": "billing"} and last["ledger_ids"] is None
    assert last["actor_user_id"] == admin.user_id and last["tenant_id"] == admin.tenant_id

    # The detail page shows the replay and no longer offers one
    page.goto(f"{gateway.url}/admin/events/{money}")
    # (replay.sql's replays_of also lists the tenant's filter replays, whose record keeps the
    # filter and not the ids: the billing replay shows here too, hence no count.)
    expect(page.locator('[data-field="replays"] li').first).to_contain_text(
        f"by user:{admin.user_id}")
    expect(page.get_by_text("Never replayed.")).to_be_hidden()
    expect(page.get_by_role("button", name="Replay this event")).to_be_hidden()

    # ── a phone-sized screen ──────────────────────────────────────────────────────────────
    phone = context.browser.new_context(viewport=browser.PHONE,
                                        storage_state=context.storage_state())
    small = phone.new_page()
    small.goto(f"{gateway.url}/admin/events")
    expect(small.locator(f'tr[data-ledger-id="{crm}"]')).to_be_visible()
    width = small.evaluate("document.documentElement.scrollWidth")
    assert width <= browser.PHONE["width"], f"the events page scrolls sideways ({width}px)"
    browser.shot(small, out_dir, "04-events-phone")
    small.goto(f"{gateway.url}/admin/events/{crm}")
    expect(small.locator('[data-field="payload"]')).to_contain_text('"n": 2')
    width = small.evaluate("document.documentElement.scrollWidth")
    assert width <= browser.PHONE["width"], f"the event page scrolls sideways ({width}px)"
    browser.shot(small, out_dir, "05-event-phone")
    phone.close()

    # The other tenant's dead letter was never touched
    assert event(conn, theirs)["process_state"] == "dead_letter"


def test_a_user_gets_the_403_page_and_no_events_link(gateway, tenants, conn, context, out_dir):
    from playwright.sync_api import expect

    user = tenants.user(role="user")
    ledger_id = dead(conn, user.tenant_id, "e-1", {"n": 1}, "unknown type x", type="x")
    page = context.new_page()
    browser.sign_in(page, gateway.url, user.email)
    expect(browser.nav(page, "Events")).to_have_count(0)
    for path in ("/admin/events", f"/admin/events/{ledger_id}"):
        response = page.goto(f"{gateway.url}{path}")
        assert response.status == 403, path
        expect(page.get_by_role("alert")).to_have_text(
            "Only admins may do this; ask an admin of your tenant.")
    browser.shot(page, out_dir, "01-events-forbidden")
    # The page's API refuses the same user too: a replay through the session cookie is 403
    status = page.evaluate(
        """async (id) => (await fetch('/v1/events/replay', {method: 'POST',
             headers: {'Content-Type': 'application/json', 'X-CSRF-Token':
               document.querySelector('meta[name="csrf-token"]').content},
             body: JSON.stringify({ledger_ids: [id]})})).status""", ledger_id)
    assert status == 403
    assert event(conn, ledger_id)["process_state"] == "dead_letter"


def test_an_admin_edits_and_replays_one_event_and_discards_another(gateway, tenants, conn,
                                                                  context, out_dir):
    from playwright.sync_api import expect

    admin = tenants.user(role="admin")
    broken = dead(conn, admin.tenant_id, "e-broken", judgment("CV-7", "lots"),
                  "JUDGMENT_AMOUNT: Amount is not money")
    stuck = put(conn, admin.tenant_id, "e-stuck", {"n": HOSTILE}, type="lead.created")
    page = context.new_page()
    browser.sign_in(page, gateway.url, admin.email)
    result = page.locator('[data-field="action_result"]')

    # ── edit and replay: the payload is offered for editing, a reason is required ──────────
    page.goto(f"{gateway.url}/admin/events/{broken}")
    box = page.get_by_label("Payload (a JSON object)")
    expect(box).to_have_value(re.compile(r'"Amount": "lots"'))
    box.fill(box.input_value().replace('"lots"', '"1,000.00"'))
    page.get_by_role("button", name="Save and replay").click()
    expect(result).to_have_text("Say why in Reason: it is kept with the action.")
    page.get_by_label("Reason").fill("amount spelled out upstream")
    page.get_by_role("button", name="Save and replay").click()
    expect(result).to_have_text("Saved: the event is pending again and a worker applies it "
                                "shortly.")
    expect(page.locator('[data-field="actions"] li')).to_contain_text(
        f"edited and replayed by user:{admin.user_id} (was dead letter): "
        "amount spelled out upstream")
    browser.shot(page, out_dir, "01-event-edited")
    row = event(conn, broken)
    assert (row["process_state"], row["payload"]["Amount"]) == ("pending", "1,000.00")

    # Not JSON: said on the page, nothing sent
    box.fill("{not json")
    page.get_by_label("Reason").fill("typo")
    page.get_by_role("button", name="Save and replay").click()
    expect(result).to_have_text("The payload is not valid JSON; correct it and save again.")

    # ── discard a pending event: confirmed, then never applied ────────────────────────────
    page.goto(f"{gateway.url}/admin/events/{stuck}")
    expect(page.get_by_label("Payload (a JSON object)")).to_have_value(re.compile("onerror"))
    page.get_by_label("Reason").fill("lead events are not ours to apply")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Discard event").click()
    expect(result).to_have_text("Discarded: the event will never be applied.")
    expect(page.locator('[data-field="act"]')).to_be_hidden()  # settled: nothing more to do
    expect(page.locator("main img")).to_have_count(0)
    browser.shot(page, out_dir, "02-event-discarded")
    assert event(conn, stuck)["process_state"] == "discarded"
    assert [(a["action"], a["reason"]) for a in conn.execute(
        "SELECT action, reason FROM event_actions ORDER BY action_id").fetchall()] == [
        ("edit", "amount spelled out upstream"), ("discard", "lead events are not ours to apply")]

    # ── discard all matching: counted first, confirmed with a reason, each on the record ──
    junk = [put(conn, admin.tenant_id, f"junk-{i}", {"n": i}, type="spam.sent")
            for i in range(3)]
    page.goto(f"{gateway.url}/admin/events?state=pending&type=spam.sent")
    expect(page.locator('[data-field="rows"] tr')).to_have_count(3)
    prompts: list[str] = []

    def answer(dialog) -> None:
        prompts.append(dialog.message)
        dialog.accept("a test producer's spam")

    page.once("dialog", answer)
    page.get_by_role("button", name="Discard all matching…").click()
    expect(result).to_have_text("Discarded 3 events: they will never be applied.")
    assert prompts[0].startswith("Discard 3 pending and dead-letter events matching this filter?")
    expect(page.get_by_text("No event matches this filter.")).to_be_visible()
    assert states(conn, *junk) == ["discarded"] * 3
    assert conn.execute("SELECT count(*) AS n FROM event_actions WHERE reason = %s",
                        ("a test producer's spam",)).fetchone()["n"] == 3

    # ── the list offers the new state as a filter ─────────────────────────────────────────
    page.goto(f"{gateway.url}/admin/events?state=discarded")
    expect(page.locator('[data-field="rows"] tr')).to_have_count(4)
    expect(page.locator(f'tr[data-ledger-id="{stuck}"]')).to_contain_text("Discarded")
