"""Issue 14's first test, end to end: intake through a real gateway, then apply by a real
`ingest worker --once`. Intake and apply each have their own tests (tests/integration/
test_events_intake.py, tests/e2e/test_ledger_apply.py); this one checks they compose: every
repeat lands on one ledger row, and each event is applied exactly once."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from tests.e2e.test_ledger_apply import drain, judgment

N = 1000


def _events() -> list[dict]:
    # One judgments row per event, keyed by the contract's column names ("File #", ...).
    return [{"source_system": "jbi", "source_event_id": f"j-{i}", "source_sequence": i,
             "type": "judgment.upserted",
             "payload": judgment(f"2024-CV-{i:06d}", f"{i}.00")} for i in range(1, N + 1)]


def _ledger(conn, tenant_id) -> list[dict]:
    return conn.execute("SELECT ledger_id, ingest_attempt_count, process_state, "
                        "apply_attempt_count, superseded, processed_at FROM event_ledger "
                        "WHERE tenant_id = %s ORDER BY ledger_id", (tenant_id,)).fetchall()


def _judgments(conn, tenant_id) -> list[dict]:
    return conn.execute("SELECT case_number, amount, updated_at FROM judgments "
                        "WHERE tenant_id = %s ORDER BY case_number", (tenant_id,)).fetchall()


def test_1000_events_sent_three_times_by_8_clients_are_stored_once_and_applied_once(
        gateway, tenants, conn, stack_env, out_dir):
    # Given a tenant admin's API key and 1,000 judgment events
    admin = tenants.user()
    with gateway.client(admin.token) as c:
        made = c.post("/v1/api-keys", json={"name": "producer"})
    assert made.status_code == 201, made.text
    key = made.json()["key"]
    events = _events()
    batches = [events[i:i + 100] for i in range(0, N, 100)] * 3
    local = threading.local()

    def send(batch: list[dict]) -> dict:
        if not hasattr(local, "client"):
            local.client = gateway.client()
        r = local.client.post("/v1/events", json=batch, headers={"X-Api-Key": key})
        assert r.status_code == 202, r.text
        return r.json()["counts"]

    # When 8 clients send all of them three times, concurrently
    with ThreadPoolExecutor(8) as pool:
        counts = list(pool.map(send, batches))
    assert sum(c["new"] for c in counts) == N and sum(c["duplicate"] for c in counts) == 2 * N

    # Then the ledger holds 1,000 rows, each seen 3 times, all pending
    rows = _ledger(conn, admin.tenant_id)
    assert len(rows) == N
    assert {(r["ingest_attempt_count"], r["process_state"]) for r in rows} == {(3, "pending")}

    # When a real worker drains the ledger
    drain(stack_env, out_dir)

    # Then every event is processed after exactly one apply, and each judgment exists once
    rows = _ledger(conn, admin.tenant_id)
    assert {(r["process_state"], r["apply_attempt_count"], r["superseded"])
            for r in rows} == {("processed", 1, False)}
    applied = _judgments(conn, admin.tenant_id)
    assert len(applied) == N
    assert applied[0]["case_number"] == "2024-CV-000001" and str(applied[0]["amount"]) == "1.00"

    # When a second worker drains again, nothing changes: no apply, no rewrite
    drain(stack_env, out_dir, name="worker-2")
    assert _ledger(conn, admin.tenant_id) == rows
    assert _judgments(conn, admin.tenant_id) == applied
