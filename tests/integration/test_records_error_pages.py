"""A batch's errors are paged by number through an index-only walk (gateway/imports/batches.sql
`page_errors`, docs/decisions/0335): the worker vacuums the errors once the batch is final, so
the walk to a deep page reads no heap, and every page is the slice of the full listing."""

from __future__ import annotations

import orjson

from gateway.imports.batches import FROM_END, Q
from tests.support import records
from tests.support.records_inproc import Importer

ROWS = 3_000


def _heap_fetches(plan: dict) -> list[int]:
    """Heap fetches of every index-only scan in an EXPLAIN (ANALYZE, FORMAT JSON) plan."""
    found = [plan["Heap Fetches"]] if plan["Node Type"] == "Index Only Scan" else []
    for child in plan.get("Plans", []):
        found += _heap_fetches(child)
    return found


def test_a_failed_batchs_errors_page_by_number_without_reading_the_heap(
        database_url, conn, tenants, tmp_path):
    # Given a file whose every amount is wrong: over its budget, it fails with 3,000 errors
    tenant = tenants.user("error-pages").tenant_id
    data = records.judgments_csv(ROWS).replace(b'"$12,500.00"', b"not-money")
    # (committing as a production cluster does: the suite's runs synchronous_commit=off, and
    # Postgres marks no page visible to all while its rows' commits are unflushed)
    durable = database_url + ("&" if "?" in database_url else "?") + \
        "options=-c%20synchronous_commit%3Don"
    batch = Importer(durable, conn, tmp_path).run(tenant, data, "judgments")
    assert batch["status"] == "failed"
    keys = {"tenant_id": tenant, "batch_id": batch["batch_id"]}
    listing = [r["id"] for r in conn.execute(
        "SELECT id FROM import_row_errors WHERE tenant_id = %(tenant_id)s AND batch_id = "
        "%(batch_id)s ORDER BY row_number, id", keys).fetchall()]
    assert len(listing) >= ROWS

    # Then the walk to the middle page reads no heap (the worker vacuumed; an import left to
    # autovacuum reads one heap tuple per skipped error)
    middle = {**keys, "offset": len(listing) // 2, "limit": 100}
    plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + Q["page_errors"],
                        middle).fetchone()["QUERY PLAN"]
    plan = (orjson.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    assert _heap_fetches(plan) == [0], orjson.dumps(plan).decode()

    # And pages by number, from the front or walked from the end, are slices of the listing
    for offset in (0, 100, len(listing) // 2, len(listing) - 150):
        page = conn.execute(Q["page_errors"], {**keys, "offset": offset, "limit": 100})
        assert [r["id"] for r in page.fetchall()] == listing[offset:offset + 100]
        from_end = len(listing) - offset - 100
        back = conn.execute(FROM_END[""], {**keys, "offset": max(from_end, 0),
                                           "limit": 100 + min(from_end, 0)}).fetchall()
        assert [r["id"] for r in back[::-1]] == listing[offset:offset + 100]
