"""The pruned keyword query (ADR 0225) returns exactly the ranking of scoring every match.

Two public collections (tests/data/beir: DBpedia abstracts and MS MARCO passages, cited in
its README), each split into sentence-sized chunks in one tenant, and every one of their
queries, at two depths: gateway/search/queries.sql text_candidates must give the same chunks,
in the same order, with the same scores as bench/search_baseline.sql, which scores every
chunk that holds a query word. A chunk set where one word is in every chunk checks that the
pruning does happen: the final scan reads fewer chunks than match. The per-version
document frequencies (migration 0056) equal a recount after inserts, deletes and updates.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gateway.search import service
from shared import db
from tests.integration.test_search_bm25 import NO_FILTERS, add_document

ROOT = Path(__file__).parents[2]
BASELINE = db.load_queries(ROOT / "bench" / "search_baseline.sql")["bm25_every_match"]
BEIR = ROOT / "tests" / "data" / "beir"


def sentences(collection: str) -> list[str]:
    """Each document's title and text, cut into pieces of about two sentences."""
    chunks = []
    # split("\n"), not splitlines(): the texts hold U+2028, a line break to splitlines.
    for line in filter(None, (BEIR / collection / "corpus.jsonl").read_text(
            encoding="utf-8").split("\n")):
        doc = json.loads(line)
        parts = re.split(r"(?<=[.!?])\s+", doc["text"])
        for i in range(0, len(parts), 2):
            chunks.append(" ".join([doc.get("title") or "", *parts[i:i + 2]]).strip())
    return chunks


def queries(collection: str) -> list[str]:
    lines = (BEIR / collection / "queries.jsonl").read_text(encoding="utf-8").split("\n")
    return [json.loads(line)["text"] for line in lines if line]


def ranked(conn, sql: str, tenant_id, q: str, n: int) -> list[tuple[str, float]]:
    rows = conn.execute(sql, {"tenant_id": tenant_id, "q": q, "syntax": False, "n": n,
                              **NO_FILTERS}, prepare=False).fetchall()
    return [(str(r["chunk_id"]), round(float(r["score"]), 4)) for r in rows]


@pytest.mark.parametrize("collection", ["dbpedia", "msmarco"])
def test_the_pruned_top_n_is_the_exact_top_n(conn, tenants, collection):
    tenant = tenants.user(collection).tenant_id
    chunks = sentences(collection)
    for start in range(0, len(chunks), 500):  # documents of 500 chunks
        add_document(conn, tenant, chunks[start:start + 500])
    # An inactive version full of the same words: in neither list, nor in the statistics.
    add_document(conn, tenant, chunks[:200], active=False)
    conn.execute("ANALYZE chunk_fts")
    compared = 0
    for q in queries(collection):
        for n in (10, 100):
            expected = ranked(conn, BASELINE, tenant, q, n)
            assert ranked(conn, service.Q["text_candidates"], tenant, q, n) == expected, q
            compared += bool(expected)
    assert compared >= len(queries(collection))  # the queries do find chunks


def test_chunks_that_cannot_reach_the_top_are_not_scored(conn, tenants):
    tenant = tenants.user("pruned").tenant_id
    # "report" is in every chunk, "pollution" in one chunk of twenty: the top 10 are all
    # among the pollution chunks, and a chunk with "report" alone cannot reach them.
    add_document(conn, tenant, [f"report number {i}" + (" on pollution" if i % 20 == 0 else "")
                                for i in range(400)])
    conn.execute("ANALYZE chunk_fts")
    params = {"tenant_id": tenant, "q": "pollution report", "syntax": False, "n": 10,
              **NO_FILTERS}
    plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + service.Q["text_candidates"],
                        params, prepare=False).fetchone()["QUERY PLAN"][0]["Plan"]
    scanned = [node["Actual Rows"] * node["Actual Loops"] for node in _nodes(plan)
               if node.get("Relation Name") == "chunk_fts" and node.get("Subplan Name") is None
               and node.get("Parent Relationship") != "InitPlan"]
    # df comes from search_term_df (migration 0056); the probe and the final scan read the
    # pollution chunks only, never the 400 chunks holding "report".
    assert scanned and max(scanned) <= 20
    assert ranked(conn, service.Q["text_candidates"], tenant, "pollution report", 10) == \
        ranked(conn, BASELINE, tenant, "pollution report", 10)


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def counted(conn, tenant) -> dict[tuple[str, str], int]:
    """Per version and lexeme, the chunks holding it: migration 0056's table, and recounted."""
    rows = conn.execute("SELECT doc_version_id, lexeme, df FROM search_term_df "
                        "WHERE tenant_id = %s", (tenant,)).fetchall()
    return {(str(r["doc_version_id"]), r["lexeme"]): r["df"] for r in rows}


def recounted(conn, tenant) -> dict[tuple[str, str], int]:
    rows = conn.execute("SELECT f.doc_version_id, t.lexeme, count(*) AS df "
                        "FROM chunk_fts f, unnest(f.tsv) AS t WHERE f.tenant_id = %s "
                        "GROUP BY 1, 2", (tenant,)).fetchall()
    return {(str(r["doc_version_id"]), r["lexeme"]): r["df"] for r in rows}


def test_document_frequencies_follow_every_write_to_chunk_fts(conn, tenants):
    tenant = tenants.user("df").tenant_id
    chunks = sentences("dbpedia")[:300]
    add_document(conn, tenant, chunks[:150])
    add_document(conn, tenant, chunks[100:300])  # overlapping texts: the same lexemes twice
    assert counted(conn, tenant) == recounted(conn, tenant) != {}
    # Deletes and updates by hand (no code path does either today) keep them right too.
    conn.execute("DELETE FROM chunk_fts WHERE chunk_id IN (SELECT chunk_id FROM chunk_fts "
                 "WHERE tenant_id = %s ORDER BY chunk_id LIMIT 40)", (tenant,))
    conn.execute("UPDATE chunk_fts SET tsv = to_tsvector('english', 'dragonfly pond') "
                 "WHERE chunk_id IN (SELECT chunk_id FROM chunk_fts WHERE tenant_id = %s "
                 "ORDER BY chunk_id DESC LIMIT 30)", (tenant,))
    assert counted(conn, tenant) == recounted(conn, tenant)
