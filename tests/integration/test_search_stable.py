"""A page of hybrid results does not depend on the page size (issue 35, ADR 0310).

Real text: the DBpedia-Entity subset of tests/data/beir (README there: source and licence),
cut into pieces of about two sentences, one document per corpus entry, in one tenant; every
query of the collection. The keyword list is the gateway's own BM25 query, the vector list its
own HNSW query over vectors made from each text's words (feature hashing: cheap, and close
texts are close vectors, as with a model), fused by the gateway's own fusion. The first n hits
of k = 50 must be the k = n list, for chunks and for documents. Before the fixed candidate
depth, the depth grew with k and most of these queries' top 10 changed between k = 10 and 50.
"""

from __future__ import annotations

import hashlib
import uuid

import numpy as np
import pytest
from pgvector import HalfVector
from pgvector.psycopg import register_vector

from gateway.search import service
from tests.integration.test_search_bm25 import NO_FILTERS, add_document
from tests.integration.test_search_bm25_pruning import BEIR, queries

MODEL = "hashed-words"
DIM = 384


def vector(text: str) -> np.ndarray:
    """Words hashed into DIM signed buckets, unit length: texts sharing words point alike."""
    v = np.zeros(DIM, dtype=np.float32)
    for word in text.lower().split():
        digest = hashlib.md5(word.strip(".,;:()\"'").encode()).digest()
        v[int.from_bytes(digest[:4], "little") % DIM] += 1.0 if digest[4] & 1 else -1.0
    return v / max(float(np.linalg.norm(v)), 1e-6)


@pytest.fixture(scope="module")
def corpus() -> list[list[str]]:
    import json
    import re

    docs = []
    for line in filter(None, (BEIR / "dbpedia" / "corpus.jsonl").read_text().split("\n")[:600]):
        doc = json.loads(line)
        parts = re.split(r"(?<=[.!?])\s+", doc["text"])
        docs.append([" ".join([doc.get("title") or "", *parts[i:i + 2]]).strip()
                     for i in range(0, len(parts), 2)])
    return docs


def lists(conn, tenant_id: uuid.UUID, q: str, request: service.SearchRequest):
    params = {"tenant_id": tenant_id, "n": request.pool_size, **NO_FILTERS}
    text = conn.execute(service.Q["text_candidates"], {**params, "q": q, "syntax": False},
                        prepare=False).fetchall()
    conn.execute(service.Q["search_settings"], {"ef_search": str(max(service.MIN_EF_SEARCH,
                                                                request.pool_size))})
    literal = "[" + ",".join(f"{x:.6g}" for x in vector(q)) + "]"
    near = conn.execute(service.Q["vector_candidates"], {**params, "vector": literal,
                                                          "model": MODEL}, prepare=False).fetchall()
    return ([(r["chunk_id"], r["doc_id"]) for r in text],
            [(r["chunk_id"], r["doc_id"]) for r in near])


def page(conn, tenant_id, q: str, k: int, group: str) -> list[uuid.UUID]:
    request = service.SearchRequest(q, k=k, group=group)
    text, near = lists(conn, tenant_id, q, request)
    return [f.chunk_id for f in service.fuse(text, near, k=k, group=group)]


def test_the_first_n_hits_are_the_same_whatever_k(conn, tenants, corpus):
    register_vector(conn)
    tenant = tenants.user("stable").tenant_id
    for texts in corpus:
        add_document(conn, tenant, texts)
    conn.execute("UPDATE document_versions SET embedding_model = %s WHERE tenant_id = %s",
                 (MODEL, tenant))
    rows = conn.execute("SELECT chunk_id, doc_version_id, text FROM chunks WHERE tenant_id = %s",
                        (tenant,)).fetchall()
    with conn.cursor().copy("COPY chunk_embeddings (chunk_id, tenant_id, doc_version_id, "
                            "embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.set_types(["uuid", "uuid", "uuid", "halfvec"])
        for r in rows:
            copy.write_row((r["chunk_id"], tenant, r["doc_version_id"],
                            HalfVector(vector(r["text"]))))
    conn.execute("ANALYZE")
    checked = 0
    with conn.transaction():
        for q in queries("dbpedia"):
            for group in ("chunk", "document"):
                first = {k: page(conn, tenant, q, k, group) for k in (10, 25, 50)}
                assert len(first[10]) == 10
                for k in (25, 50):
                    assert first[k][:10] == first[10], (q, group, k)
                assert first[50][:25] == first[25], (q, group)
                checked += 1
    assert checked == 2 * len(queries("dbpedia")) >= 80
