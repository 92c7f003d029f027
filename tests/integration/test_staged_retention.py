"""Cleanup keeps a partial batch's staged rows 30 days for review, a completed one's 7
(issue 13 item 8, docs/decisions/0151), through the real cleanup pass on real Postgres."""

from __future__ import annotations

from datetime import timedelta

from gateway.operations import cleanup
from tests.integration.test_ad_promotion import new_batch, row, stage
from tests.support import records


def finished(conn, tenant_id, status: str, ago: timedelta):
    batch_id = new_batch(conn, tenant_id)
    stage(conn, tenant_id, batch_id, [row(day=f"2026-01-0{i}") for i in range(1, 4)])
    records.finish_batch(conn, batch_id, status)
    conn.execute("UPDATE import_batches SET completed_at = now() - %s WHERE batch_id = %s",
                 (ago, batch_id))
    return batch_id


def staged(conn, batch_id) -> int:
    return conn.execute("SELECT count(*) AS n FROM import_staged_rows WHERE batch_id = %s",
                        (batch_id,)).fetchone()["n"]


def test_partial_batches_keep_their_staged_rows_30_days_completed_ones_7(database_url, conn,
                                                                        tenants, tmp_path):
    tenant = tenants.user().tenant_id
    completed_8d = finished(conn, tenant, "completed", timedelta(days=8))
    completed_6d = finished(conn, tenant, "completed", timedelta(days=6))
    partial_8d = finished(conn, tenant, "partial", timedelta(days=8))
    partial_31d = finished(conn, tenant, "partial", timedelta(days=31))

    report = cleanup.run(database_url, None, upload_store_uri=(tmp_path / "u").as_uri(),
                         artifact_store_uri=(tmp_path / "a").as_uri(),
                         policy=cleanup.Policy(86400, 7 * 86400, -1), dry_run=False)

    assert report.staged_rows == 6
    assert {b: staged(conn, b) for b in (completed_8d, completed_6d, partial_8d, partial_31d)} == {
        completed_8d: 0, completed_6d: 3, partial_8d: 3, partial_31d: 0}
