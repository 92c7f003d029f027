"""A finished batch's error totals are taken once, when it finishes (migrations/0027), so the
errors endpoint's `totalErrors` does not count every error on every page; they are dropped when
the batch reopens for a retry or cleanup removes its errors, and counted live meanwhile."""

from __future__ import annotations

from datetime import timedelta

from gateway.operations import cleanup
from tests.support import records

ERRORS = [{"row_number": n, "code": code, "message": "bad"}
          for n, code in ((1, "JUDGMENT_AMOUNT_INVALID"), (2, "JUDGMENT_AMOUNT_INVALID"),
                          (3, "JUDGMENT_DATE_INVALID"))]


def totals(conn, batch_id):
    return conn.execute("SELECT error_totals FROM import_batches WHERE batch_id = %s",
                        (batch_id,)).fetchone()["error_totals"]


def total_errors(gateway, user, batch_id, **params) -> int:
    with gateway.client(user.token) as client:
        response = client.get(f"/intake/batches/{batch_id}/errors", params=params)
    assert response.status_code == 200, response.text
    return response.json()["totalErrors"]


def test_totals_are_taken_at_finish_and_dropped_on_reopen_and_cleanup(gateway, tenants, conn,
                                                                      database_url, tmp_path):
    # Given a batch whose worker has written three row errors and is still running
    user = tenants.user()
    with gateway.client(user.token) as client:
        batch_id = records.upload(client, "t.csv", records.judgments_csv(3, seed="T")).json()[
            "batch_id"]
    records.walk(conn, batch_id, "processing")
    records.add_errors(conn, batch_id, ERRORS)

    # Then, unfinished, its totals are counted live
    assert totals(conn, batch_id) is None
    assert total_errors(gateway, user, batch_id) == 3

    # When it fails, the totals per code are taken in that same update
    records.walk(conn, batch_id, "failed")
    assert totals(conn, batch_id) == {"JUDGMENT_AMOUNT_INVALID": 2, "JUDGMENT_DATE_INVALID": 1}
    assert total_errors(gateway, user, batch_id) == 3
    assert total_errors(gateway, user, batch_id, errorCode="JUDGMENT_DATE_INVALID") == 1
    assert total_errors(gateway, user, batch_id, errorCode="JUDGMENT_COURT_MISSING") == 0

    # When cleanup removes its (old) errors, the totals go with them
    conn.execute("UPDATE import_row_errors SET created_at = now() - %s WHERE batch_id = %s",
                 (timedelta(days=91), batch_id))
    cleanup.run(database_url, None, upload_store_uri=(tmp_path / "u").as_uri(),
                artifact_store_uri=(tmp_path / "a").as_uri(),
                policy=cleanup.Policy(86400, 7 * 86400, -1))
    assert totals(conn, batch_id) is None
    assert total_errors(gateway, user, batch_id) == 0

    # And a batch that reopens (the explicit retry: failed → pending) drops its totals, and
    # takes fresh ones when it finishes again
    def reopen() -> None:
        with conn.transaction():
            conn.execute("SELECT set_config('ingest.reopen_batch', %s, true)", (str(batch_id),))
            records.walk(conn, batch_id, "pending")

    reopen()
    records.walk(conn, batch_id, "processing")
    records.add_errors(conn, batch_id, ERRORS[:1])
    records.walk(conn, batch_id, "failed")
    assert totals(conn, batch_id) == {"JUDGMENT_AMOUNT_INVALID": 1}
    reopen()
    assert totals(conn, batch_id) is None
