"""emit_ingestion_complete against real Postgres (spec §7.2-7.3): only completed/partial with
promoted rows, once per batch, fanned out to the tenant's subscribed endpoints only."""

from __future__ import annotations

from datetime import date

import pytest

from shared.webhooks import signing
from worker.records.completion import commit_time, emit_ingestion_complete


def _batch(conn, tenant_id, n: int = 0):
    return conn.execute(
        "INSERT INTO import_batches (tenant_id, contract, contract_version, file_name, file_hash, "
        "byte_size, upload_uri, source) VALUES (%s, 'judgments', '1', 'f.csv', %s, 10, 'file:///x', "
        "'manual') RETURNING batch_id", (tenant_id, f"{n:064x}")).fetchone()["batch_id"]


def _webhook(conn, tenant_id, types=("ingestion.complete",)):
    return conn.execute("INSERT INTO webhooks (tenant_id, url, event_types, secret) VALUES "
                        "(%s, 'https://example.com/h', %s, %s) RETURNING webhook_id",
                        (tenant_id, list(types), signing.new_secret())).fetchone()["webhook_id"]


def _emit(conn, tenant_id, batch_id, status="completed", promoted=5):
    emit_ingestion_complete(conn, tenant_id=tenant_id, batch_id=batch_id, contract="ad_metrics",
                            status=status, client_id=None, platform="meta",
                            affected_dates=[date(2024, 5, 2), date(2024, 5, 1), date(2024, 5, 2)],
                            metrics={"total_rows": 6, "promoted_rows": promoted, "failed_rows": 1,
                                     "daily_metrics_upserted": promoted},
                            at=commit_time(conn))


def _count(conn, table, tenant_id):
    return conn.execute(f"SELECT count(*) AS n FROM {table} WHERE tenant_id = %s",
                        (tenant_id,)).fetchone()["n"]


@pytest.mark.parametrize(("status", "promoted"), [
    ("failed", 5), ("promoting", 5), ("processing", 5), ("completed", 0), ("partial", 0)])
def test_no_event_unless_completed_or_partial_with_promoted_rows(tenants, conn, status, promoted):
    tenant = tenants.user().tenant_id
    _webhook(conn, tenant)
    _emit(conn, tenant, _batch(conn, tenant), status, promoted)
    assert _count(conn, "event_outbox", tenant) == 0
    assert _count(conn, "webhook_deliveries", tenant) == 0


def test_the_event_is_written_once_and_fans_out_to_the_tenants_subscribers(tenants, conn):
    # Given two tenants with a subscribed webhook each
    tenant, other = tenants.user("acme").tenant_id, tenants.user("globex").tenant_id
    mine, theirs = _webhook(conn, tenant), _webhook(conn, other)
    batch_id = _batch(conn, tenant)

    # When the batch's completion emits twice (a promotion run again)
    _emit(conn, tenant, batch_id, "partial")
    _emit(conn, tenant, batch_id, "partial")

    # Then one event with the spec's fields, one delivery, to this tenant's endpoint only
    [event] = conn.execute("SELECT * FROM event_outbox WHERE tenant_id = %s", (tenant,)).fetchall()
    payload = event["payload"]
    assert payload["status"] == "partial" and payload["platform"] == "meta"
    assert payload["affected_dates"] == ["2024-05-01", "2024-05-02"]
    assert payload["metrics"] == {"total_rows": 6, "promoted_rows": 5, "failed_rows": 1,
                                  "campaigns_upserted": 0, "ad_sets_upserted": 0,
                                  "ads_upserted": 0, "daily_metrics_upserted": 5}
    rows = conn.execute("SELECT webhook_id, status FROM webhook_deliveries").fetchall()
    assert rows == [{"webhook_id": mine, "status": "pending"}]
    assert theirs != mine and _count(conn, "event_outbox", other) == 0


def test_unknown_metrics_are_refused(tenants, conn):
    tenant = tenants.user().tenant_id
    with pytest.raises(ValueError, match="unknown"):
        emit_ingestion_complete(conn, tenant_id=tenant, batch_id=_batch(conn, tenant),
                                contract="judgments", status="completed", client_id=None,
                                platform=None, affected_dates=[],
                                metrics={"total_rows": 1, "promoted_rows": 1, "failed_rows": 0,
                                         "bogus": 1},
                                at=commit_time(conn))
