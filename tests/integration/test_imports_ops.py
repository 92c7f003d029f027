"""Operations of records imports (issue 12 item 6): the ops views and their API, the import
figures of /api/metrics and /v1/metrics, the import alerts and the cleanup of staged rows and
row errors — against a real gateway and Postgres."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from gateway.operations import cleanup, housekeeping
from gateway.operations.metrics import DepthCache
from shared import alerts, db
from shared.settings import GatewaySettings
from tests.integration.test_imports_recovery import batch, insert_batch
from tests.support import records

MINUTE = timedelta(minutes=1)


def failed_batch(conn, tenant_id, file_name: str, *, ago: timedelta = MINUTE):
    batch_id, run_id = insert_batch(conn, tenant_id, run_status="running",
                                    batch_status="processing", created_ago=ago, updated_ago=ago)
    conn.execute("UPDATE import_batches SET file_name = %s WHERE batch_id = %s",
                 (file_name, batch_id))
    conn.execute("UPDATE import_batches SET status = 'failed', completed_at = now() - %s "
                 "WHERE batch_id = %s", (ago, batch_id))
    conn.execute("UPDATE ingestion_runs SET status = 'failed', finished_at = now() - %s "
                 "WHERE run_id = %s", (ago, run_id))
    return batch_id, run_id


def stale_batch(conn, tenant_id):
    """A batch whose worker vanished two hours ago mid-parse (run and batch both silent)."""
    batch_id, run_id = insert_batch(conn, tenant_id, run_status="running",
                                    batch_status="processing", created_ago=timedelta(hours=3),
                                    updated_ago=timedelta(hours=2))
    conn.execute("UPDATE import_batches SET updated_at = now() - interval '2 hours' "
                 "WHERE batch_id = %s", (batch_id,))
    return batch_id


def error(code: str, row: int = 1, raw: dict | None = None) -> dict:
    return {"row_number": row, "code": code, "message": "m", "raw": raw}


# ── the ops views and their API ─────────────────────────────────────────────────────────────
def test_ops_views_through_the_api_are_tenant_scoped_for_admins(gateway, conn, tenants):
    # Given tenant A with two failing codes and a stale import, and tenant B with its own
    a, b = tenants.user("acme"), tenants.user("globex")
    user_a, operator = tenants.user("acme", role="user"), tenants.user("platform", "operator")
    a_batch, _ = failed_batch(conn, a.tenant_id, "a.csv")
    records.add_errors(conn, a_batch, [error("JUDGMENT_AMOUNT_INVALID", 1),
                                       error("JUDGMENT_AMOUNT_INVALID", 2),
                                       error("JUDGMENT_DATE_INVALID", 3)])
    # an error older than the 7-day window does not count
    records.add_errors(conn, a_batch, [error("JUDGMENT_COURT_MISSING", 4)])
    conn.execute("UPDATE import_row_errors SET created_at = now() - interval '8 days' "
                 "WHERE code = 'JUDGMENT_COURT_MISSING'")
    a_stale = stale_batch(conn, a.tenant_id)
    b_batch, _ = failed_batch(conn, b.tenant_id, "b.csv")
    records.add_errors(conn, b_batch, [error("JUDGMENT_CASE_NUMBER_MISSING", 1)])
    b_stale = stale_batch(conn, b.tenant_id)
    # and a live import of A (fresh heartbeat) that is not stale
    insert_batch(conn, a.tenant_id, run_status="running", batch_status="processing",
                 created_ago=timedelta(hours=3), updated_ago=timedelta(seconds=5))

    with gateway.client(a.token) as client:
        own = client.get("/v1/imports/ops")
        bad = client.get("/v1/imports/ops", params={"contract": "payroll"})
        fleet_refused = client.get("/v1/admin/imports/ops")
    with gateway.client(user_a.token) as client:
        refused = client.get("/v1/imports/ops")
    with gateway.client(operator.token) as client:
        fleet = client.get("/v1/admin/imports/ops")
        one = client.get("/v1/admin/imports/ops", params={"tenant_id": str(b.tenant_id)})

    # Then A's admin sees A's distribution by code and contract, and A's stale import only
    assert own.status_code == 200, own.text
    body = own.json()
    counts = {(r["contract"], r["code"]): r["error_count"] for r in body["error_distribution"]}
    assert counts == {("judgments", "JUDGMENT_AMOUNT_INVALID"): 2,
                      ("judgments", "JUDGMENT_DATE_INVALID"): 1}
    assert [r["batch_id"] for r in body["stale_imports"]] == [str(a_stale)]
    assert body["stale_imports"][0]["hours_stale"] >= 2
    assert str(b.tenant_id) not in own.text and str(b_stale) not in own.text
    # an unknown contract is a 400 with its code; users and admins cannot see the fleet
    assert bad.status_code == 400 and bad.json()["code"] == "unknown_contract"
    assert refused.status_code == 403 and fleet_refused.status_code == 403
    # and an operator sees every tenant's, or one tenant's
    assert {r["batch_id"] for r in fleet.json()["stale_imports"]} == {str(a_stale), str(b_stale)}
    assert [r["batch_id"] for r in one.json()["stale_imports"]] == [str(b_stale)]
    assert {r["code"] for r in one.json()["error_distribution"]} == {
        "JUDGMENT_CASE_NUMBER_MISSING"}


# ── metrics ─────────────────────────────────────────────────────────────────────────────────
def test_metrics_count_imports_fleet_wide_and_name_the_tenants_last_failed_file(
        gateway, conn, tenants, stack_env):
    # Given tenant A's failed import and a pending one, and B's more recent failure
    a, b = tenants.user("acme"), tenants.user("globex")
    failed_batch(conn, a.tenant_id, "simplicity-2026-01-07.csv", ago=timedelta(minutes=10))
    insert_batch(conn, a.tenant_id, run_status="queued", batch_status="pending",
                 created_ago=MINUTE, updated_ago=MINUTE)
    failed_batch(conn, b.tenant_id, "globex-secret-name.csv", ago=MINUTE)

    with gateway.client(stack_env["METRICS_TOKEN"]) as client:
        fleet = client.get("/api/metrics")
        prometheus = client.get("/metrics").text
    with gateway.client(a.token) as client:
        own = client.get("/v1/metrics")

    # Then the fleet figures count every tenant's imports, and name no tenant nor file
    assert fleet.status_code == 200, fleet.text
    imports = fleet.json()["ingest"]["imports"]
    assert imports == {"backlog_count": 1, "failed_24h": 2, "stale_count": 0}
    assert "ingest_import_backlog 1.0" in prometheus
    for secret in (str(a.tenant_id), str(b.tenant_id), ".csv"):
        assert secret not in fleet.text and secret not in prometheus
    # and A's admin gets A's last failed import as its file name, with its time
    f = own.json()["ingest"]
    assert f["last_failed_batch"] == "simplicity-2026-01-07.csv"
    assert f["last_failed_at"] is not None and f["imports"]["backlog_count"] == 1
    assert "globex" not in own.text


# ── alerts ──────────────────────────────────────────────────────────────────────────────────
def check_thresholds(database_url: str, **settings) -> list[alerts.Alert]:
    config = GatewaySettings(database_url=database_url, dev_mode=True, **settings)

    async def go() -> list[alerts.Alert]:
        pool = db.async_pool(database_url, min_size=1, max_size=2)
        await pool.open()
        try:
            return await housekeeping.check_thresholds(config, pool, DepthCache(),
                                                       alerts.Alerter([], window_s=60))
        finally:
            await pool.close()

    return asyncio.run(go())


def test_failed_imports_over_the_threshold_and_stale_imports_raise_alerts(database_url, conn,
                                                                         tenants):
    tenant_id = tenants.user().tenant_id
    # Given three failed imports in the last hour (the threshold) and none stale: no alert
    for i in range(3):
        failed_batch(conn, tenant_id, f"f{i}.csv")
    assert check_thresholds(database_url, alert_imports_failed_1h=3) == []

    # When a fourth fails and a batch goes stale
    failed_batch(conn, tenant_id, "personal-file-name.csv")
    stale = stale_batch(conn, tenant_id)
    fired = {a.key: a for a in check_thresholds(database_url, alert_imports_failed_1h=3)}

    # Then both alerts fire, with ids and counts but no file name
    assert set(fired) == {"imports_failed", "stale_imports"}
    assert "4 import batches failed" in fired["imports_failed"].text
    assert str(stale) in fired["stale_imports"].text
    assert not any(".csv" in a.text for a in fired.values())


# ── cleanup ─────────────────────────────────────────────────────────────────────────────────
def stage(conn, batch_id, tenant_id, rows: int) -> None:
    conn.execute("INSERT INTO import_staged_rows (batch_id, row_number, tenant_id, data) "
                 "SELECT %s, n, %s, '{}'::jsonb FROM generate_series(1, %s) n",
                 (batch_id, tenant_id, rows))


def count(conn, table: str, batch_id) -> int:
    return conn.execute(f"SELECT count(*) AS n FROM {table} WHERE batch_id = %s",
                        (batch_id,)).fetchone()["n"]


@pytest.mark.parametrize("dry_run", [True, False])
def test_cleanup_removes_old_staged_rows_and_row_errors_only(database_url, conn, tenants,
                                                             tmp_path, dry_run):
    tenant_id = tenants.user().tenant_id
    # Given a batch finished 8 days ago, one finished yesterday, and one still running
    old, _ = failed_batch(conn, tenant_id, "old.csv", ago=timedelta(days=8))
    recent, _ = failed_batch(conn, tenant_id, "recent.csv", ago=timedelta(days=1))
    running, _ = insert_batch(conn, tenant_id, run_status="running", batch_status="processing",
                              created_ago=timedelta(days=9), updated_ago=MINUTE)
    conn.execute("UPDATE import_batches SET updated_at = now() - interval '9 days' "
                 "WHERE batch_id = %s", (running,))
    for batch_id in (old, recent, running):
        stage(conn, batch_id, tenant_id, 5)
        records.add_errors(conn, batch_id, [error("JUDGMENT_AMOUNT_INVALID", 6)])
    # the old batch's error is 91 days old; the running batch's too, but it is unfinished
    conn.execute("UPDATE import_row_errors SET created_at = now() - interval '91 days' "
                 "WHERE batch_id = ANY(%s)", ([old, running],))

    report = cleanup.run(database_url, None, upload_store_uri=(tmp_path / "u").as_uri(),
                         artifact_store_uri=(tmp_path / "a").as_uri(),
                         policy=cleanup.Policy(86400, 7 * 86400, -1), dry_run=dry_run)

    # Then it reports the old batch's 5 staged rows and its 1 row error
    assert (report.staged_rows, report.row_errors) == (5, 1)
    left = {b: (count(conn, "import_staged_rows", b), count(conn, "import_row_errors", b))
            for b in (old, recent, running)}
    if dry_run:  # and a dry run changes nothing
        assert left == {old: (5, 1), recent: (5, 1), running: (5, 1)}
    else:        # and a real pass removes exactly those
        assert left == {old: (0, 0), recent: (5, 1), running: (5, 1)}
    assert batch(conn, old)["status"] == "failed"
