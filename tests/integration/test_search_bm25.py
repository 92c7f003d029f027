"""The keyword ranking is BM25 over the tenant's active chunks, inside Postgres (ADR 0220).

Chunks are written the way the worker writes them (worker/queries.sql insert_fts); the scores
of gateway/search/queries.sql text_candidates are checked against BM25 computed here, in
Python, from the lexemes Postgres itself gives each text (to_tsvector), with the formula's
textbook terms: k1 = 1.2, b = 0.75, avgdl = 100, IDF = ln(1 + (N − df + 0.5) / (df + 0.5)).
"""

from __future__ import annotations

import math
import uuid
from pathlib import Path

import pytest

from gateway.search import service
from shared import db

INSERT_FTS = db.load_queries(Path(service.__file__).parents[2] / "worker" / "queries.sql")[
    "insert_fts"]
NO_FILTERS = {"doc_ids": None, "source_id": None, "file_type": None, "after": None,
              "before": None}
TEXTS = [
    "Dragonflies hunt mosquitoes over the pond at dusk.",
    "The dragonfly nymph lives in water for years before it emerges.",
    "Mosquitoes breed in still water; the pond is full of them.",
    "A report on river pollution and the fish that survive it.",
    "Running shoes and the runners who wear them on mountain trails.",
    "Dragonfly dragonfly dragonfly: a poem that repeats one word about the dragonfly.",
]


def add_document(conn, tenant_id, texts, *, active=True, context=""):
    doc_id, version_id = uuid.uuid4(), uuid.uuid4()
    conn.execute("INSERT INTO documents (doc_id, tenant_id, source_type, source_uri, title) "
                 "VALUES (%s, %s, 'txt', %s, 'doc')", (doc_id, tenant_id, f"upload://{doc_id}"))
    conn.execute("INSERT INTO document_versions (doc_version_id, tenant_id, doc_id, "
                 "version_number, content_hash, is_active, embedding_model, embedding_dim, "
                 "chunk_count) VALUES (%s, %s, %s, 1, 'sha256:x', %s, 'm', 384, %s)",
                 (version_id, tenant_id, doc_id, active, len(texts)))
    for i, text in enumerate(texts):
        conn.execute("INSERT INTO chunks (tenant_id, doc_version_id, ordinal, text, token_count, "
                     "char_start, char_end, context) VALUES (%s, %s, %s, %s, 1, 0, 1, %s)",
                     (tenant_id, version_id, i, text, context))
    conn.execute(INSERT_FTS, {"tenant_id": tenant_id, "doc_version_id": version_id,
                              "config": "english"})
    return doc_id


def lexemes(conn, text: str) -> dict[str, int]:
    rows = conn.execute("SELECT lexeme, array_length(positions, 1) AS tf "
                        "FROM unnest(to_tsvector('english', %s))", (text,)).fetchall()
    return {r["lexeme"]: r["tf"] for r in rows}


def reference_bm25(conn, texts: list[str], query: str) -> dict[str, float]:
    docs = {text: lexemes(conn, text) for text in texts}
    terms = lexemes(conn, query)
    n = len(texts)
    scores = {}
    for text, tf in docs.items():
        dl = sum(tf.values())
        score = 0.0
        for term in terms:
            df = sum(term in d for d in docs.values())
            if term in tf:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                score += idf * tf[term] * 2.2 / (tf[term] + 1.2 * (0.25 + 0.75 * dl / 100))
        if score > 0:
            scores[text] = score
    return scores


def text_candidates(conn, tenant_id, q: str, n: int = 50, **filters):
    rows = conn.execute(service.Q["text_candidates"], {
        "tenant_id": tenant_id, "q": q, "syntax": service.typed_syntax(q), "n": n,
        **NO_FILTERS, **filters}, prepare=False).fetchall()
    texts = {r["chunk_id"]: r["text"] for r in conn.execute(
        "SELECT chunk_id, text FROM chunks WHERE tenant_id = %s", (tenant_id,))}
    return [(texts[r["chunk_id"]], float(r["score"])) for r in rows]


@pytest.fixture
def world(conn, tenants):
    acme = tenants.user("acme").tenant_id
    globex = tenants.user("globex").tenant_id
    add_document(conn, acme, TEXTS[:3])
    add_document(conn, acme, TEXTS[3:])
    # Another tenant's chunks, full of the same words, and an inactive version of acme's own:
    # neither may count in acme's statistics, nor be found.
    add_document(conn, globex, ["dragonfly mosquito pond " * 5] * 20)
    add_document(conn, acme, ["dragonfly pond mosquito nymph water"] * 30, active=False)
    return acme, globex


@pytest.mark.parametrize("query", [
    "dragonfly", "do dragonflies eat mosquitoes at the pond?", "water pond",
    "mountain running", "the of and",
])
def test_scores_are_bm25_over_the_tenants_active_chunks(conn, world, query):
    acme, _ = world
    found = text_candidates(conn, acme, query)
    expected = reference_bm25(conn, TEXTS, query)
    assert {text for text, _ in found} == set(expected)
    for text, score in found:
        assert score == pytest.approx(expected[text], rel=1e-4), text
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)


def test_any_word_matches_and_the_rarer_word_weighs_more(conn, world):
    acme, _ = world
    found = dict(text_candidates(conn, acme, "dragonfly pollution"))
    # "pollution" is in one chunk, "dragonfly" in three: a chunk holding either is found (OR),
    # and the one holding the rare word ranks above those holding the common one once.
    assert TEXTS[3] in found and TEXTS[0] in found
    assert found[TEXTS[3]] > found[TEXTS[1]]
    # Stemming: "runs" finds "Running" and "runners".
    assert [t for t, _ in text_candidates(conn, acme, "runs")] == [TEXTS[4]]


def test_repeating_a_word_saturates(conn, world):
    acme, _ = world
    found = dict(text_candidates(conn, acme, "dragonfly"))
    # Four times the word is better than once, but far from four times the score.
    assert found[TEXTS[5]] > found[TEXTS[1]]
    assert found[TEXTS[5]] < 2 * found[TEXTS[1]]


@pytest.mark.parametrize(("query", "expected"), [
    ('"still water"', {TEXTS[2]}),  # the phrase, not both words anywhere
    ("water -mosquitoes", {TEXTS[1]}),
    ("pollution OR shoes", {TEXTS[3], TEXTS[4]}),
    ("pond mosquitoes -dusk", {TEXTS[2]}),  # typed syntax: every word required
])
def test_typed_search_syntax_keeps_its_meaning(conn, world, query, expected):
    acme, _ = world
    assert {text for text, _ in text_candidates(conn, acme, query)} == expected


def test_filters_and_limits_apply(conn, world):
    acme, _ = world
    only = conn.execute("SELECT doc_id FROM documents WHERE tenant_id = %s ORDER BY created_at "
                        "LIMIT 1", (acme,)).fetchone()["doc_id"]
    found = text_candidates(conn, acme, "dragonfly water", doc_ids=[only])
    assert {text for text, _ in found} <= set(TEXTS[:3])
    assert len(text_candidates(conn, acme, "dragonfly", n=1)) == 1


def test_the_header_is_indexed_with_the_text(conn, tenants):
    tenant = tenants.user("context").tenant_id
    add_document(conn, tenant, ["Install it with make."], context="pgvector › Installation")
    add_document(conn, tenant, ["Nothing about that here at all."])
    assert [t for t, _ in text_candidates(conn, tenant, "pgvector installation")] == [
        "Install it with make."]
