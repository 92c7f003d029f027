"""The keyword index never holds more than 256 kB of pending rows (migration 0100,
docs/decisions/0344): every keyword search reads its GIN pending list whole, and under the
4 MB default the workers' writes left up to ~500 pages there (the text leg's SQL 38 % slower
at one connection, a third fewer queries/s at eight)."""

from __future__ import annotations

from tests.integration.test_search_bm25 import add_document
from tests.integration.test_search_bm25_pruning import sentences

INDEX = "idx_chunk_fts_gin"
MERGE = "SELECT gin_clean_pending_list(%s::regclass) AS pages"
LIMIT_PAGES = 256 * 1024 // 8192


def test_worker_writes_leave_at_most_the_limit_pending_in_the_keyword_index(conn, tenants):
    # Given public text (DBpedia abstracts) and an index with nothing pending
    tenant = tenants.user("fts-pending").tenant_id
    chunks = sentences("dbpedia")
    conn.execute(MERGE, (INDEX,))
    # When it is written as the worker writes it: documents of 100 chunks, the keyword rows by
    # the worker's own statement, one transaction each
    for start in range(0, len(chunks), 100):
        with conn.transaction():
            add_document(conn, tenant, chunks[start:start + 100])
    # Then what a search must still read past the index's tree is at most 256 kB (under the
    # default 4 MB limit the same writes leave 106 pages pending)
    assert conn.execute(MERGE, (INDEX,)).fetchone()["pages"] <= LIMIT_PAGES
