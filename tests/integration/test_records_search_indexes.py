"""An import leaves no pending rows in the trigram indexes that records search and duplicate
detection read (worker/records/search_indexes.py, docs/decisions/0334): left pending, every
lookup reads them all (the duplicates page took 18.8 s for 3,000 plaintiffs)."""

from __future__ import annotations

from tests.support import records
from tests.support.records_inproc import Importer
from worker.records import search_indexes

PENDING = "SELECT gin_clean_pending_list(%s::regclass) AS pages"


def test_a_completed_import_leaves_nothing_pending_in_the_trigram_indexes(
        database_url, conn, tenants, tmp_path):
    # Given an import of 2,000 judgments through the worker's own handler
    tenant = tenants.user("gin-settled").tenant_id
    batch = Importer(database_url, conn, tmp_path).run(tenant, records.judgments_csv(2_000),
                                                       "judgments")
    assert batch["status"] == "completed"
    # Then every trigram index already holds its rows in its main structure: merging again
    # finds no pending page (written without the merge, they are dozens of pages)
    assert {i: conn.execute(PENDING, (i,)).fetchone()["pages"]
            for i in search_indexes.TRIGRAM_INDEXES} == dict.fromkeys(
        search_indexes.TRIGRAM_INDEXES, 0)


def test_the_merge_takes_pending_rows_off_and_says_how_many_pages(conn, tenants):
    # Given plaintiffs written by COPY, as staging writes, which land in the pending list
    tenant = tenants.user("gin-pending").tenant_id
    with conn.cursor().copy("COPY plaintiffs (tenant_id, name, status, source) FROM STDIN") as copy:
        for i in range(2_000):
            copy.write_row((tenant, f"Plaintiff Number {i} Holdings", "active", "simplicity"))
    # When the worker merges, Then it reports the pages it took off, and none are left
    assert search_indexes.merge_pending(conn) > 0
    assert search_indexes.merge_pending(conn) == 0
