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


def pages(gateway, user, batch_id, limit: int, **params) -> list[list[tuple[int, str]]]:
    """Every page of the batch's errors, as (row number, message) pairs, until one is empty."""
    found, page = [], 1
    with gateway.client(user.token) as client:
        while True:
            response = client.get(f"/intake/batches/{batch_id}/errors",
                                  params={"page": page, "limit": limit, **params})
            assert response.status_code == 200, response.text
            rows = [(e["rowNumber"], e["errorMessage"]) for e in response.json()["errors"]]
            if not rows:
                return found
            found.append(rows)
            page += 1


def test_every_page_is_in_row_order_whether_read_from_the_start_or_the_end(gateway, tenants,
                                                                            conn):
    # Given a batch with 97 errors over 90 rows (some rows have two, written out of order),
    # every third of a rarer code
    user = tenants.user()
    with gateway.client(user.token) as client:
        batch_id = records.upload(client, "p.csv", records.judgments_csv(3, seed="P")).json()[
            "batch_id"]
    records.walk(conn, batch_id, "processing")
    written = [{"row_number": n, "message": f"row {n} #{k}",
                "code": "JUDGMENT_DATE_INVALID" if n % 3 == 0 else "JUDGMENT_AMOUNT_INVALID"}
               for n in range(90, 0, -1) for k in ((1, 2) if n % 13 == 0 else (1,))]
    records.add_errors(conn, batch_id, written)
    ordered = sorted(((e["row_number"], e["message"]) for e in written),
                     key=lambda e: (e[0], e[1].endswith("#2")))
    rare = [e for e in ordered if e[0] % 3 == 0]

    # While it runs (counted live), and once it has failed (its totals fixed, so pages in the
    # back half are read from the end), paging gives every error once, in row order, with a
    # short last page
    for status in ("processing", "failed"):
        if status == "failed":
            records.walk(conn, batch_id, "failed")
        for limit in (10, 7, 97, 100):
            got = pages(gateway, user, batch_id, limit)
            assert [e for page in got for e in page] == ordered, (status, limit)
            assert all(len(page) == limit for page in got[:-1])
        got = pages(gateway, user, batch_id, 4, errorCode="JUDGMENT_DATE_INVALID")
        assert [e for page in got for e in page] == rare, status

    # and a page past the end is empty, not an error
    with gateway.client(user.token) as client:
        response = client.get(f"/intake/batches/{batch_id}/errors", params={"page": 99})
    assert response.status_code == 200 and response.json()["errors"] == []
    assert response.json()["totalErrors"] == len(written)
