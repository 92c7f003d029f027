"""Ask judges its evidence on the question's exact nearest chunks, not on the HNSW walk's
(docs/decisions/0420): the same corpus and question give the same neighbourhood, and so the same
lift and decision, whatever graph an index build drew.

A DBpedia near miss's lift moved 0.23x -> 0.243 across a re-ingest, the best chunk the same:
the approximate walk had found another set of neighbours, so another background. The test
rebuilds the shared HNSW index with a sparse graph (m = 2: its walk misses neighbours often on
random 384-dimensional vectors) and asks for the same neighbourhood as under the shipped one.
"""

from __future__ import annotations

import asyncio
import random

import psycopg
from psycopg.rows import dict_row

from gateway.search import evidence, service
from tests.integration.test_search_plans import SYNTHETIC_CHUNKS

SPARSE_INDEX = """
DROP INDEX idx_chunk_embeddings_hnsw;
CREATE INDEX idx_chunk_embeddings_hnsw ON chunk_embeddings
    USING hnsw (embedding halfvec_cosine_ops) WITH (m = 2, ef_construction = 4)"""


def neighbourhoods(database_url: str, tenant, vectors, *, exact: bool):
    """Each question's vector list (chunk ids and distances, in order) as ask reads it."""
    async def read() -> list[list[tuple]]:
        async with await psycopg.AsyncConnection.connect(database_url,
                                                         row_factory=dict_row) as aconn:
            out = []
            for vector in vectors:
                async with aconn.transaction():
                    found = await service.candidates(
                        aconn, tenant_id=tenant, vector=vector, model="m", exact=exact,
                        request=service.SearchRequest("glacier melt", 10, "hybrid", "chunk"))
                out.append([(c, found.distance[c]) for c, _ in found.vector])
            return out
    return asyncio.run(read())


def lift(near: list[tuple]) -> float:
    verdict = evidence.judge([1.0 - d for _, d in near], min_lift=0.23, floor=0.0,
                             small_tenant=0.35)
    return verdict.facts()["lift"]


def test_asks_neighbourhood_is_the_same_over_two_index_builds(conn, tenants, database_url):
    tenant = tenants.user("exact", role="admin").tenant_id
    conn.execute(SYNTHETIC_CHUNKS, {"t": tenant})
    conn.execute("ANALYZE")
    rng = random.Random(420)
    vectors = [[rng.uniform(-1, 1) for _ in range(384)] for _ in range(10)]
    before = neighbourhoods(database_url, tenant, vectors, exact=True)
    conn.execute(SPARSE_INDEX)
    after = neighbourhoods(database_url, tenant, vectors, exact=True)
    assert all(len(n) == service.CANDIDATE_DEPTH for n in before)
    assert after == before
    assert [lift(n) for n in after] == [lift(n) for n in before]
    # The true nearest: every active chunk of the tenant compared in the test itself.
    for vector, near in zip(vectors, before, strict=True):
        every = conn.execute(
            "SELECT chunk_id FROM (SELECT e.chunk_id, e.embedding <=> %s::halfvec AS d "
            "FROM chunk_embeddings e WHERE e.tenant_id = %s OFFSET 0) s "
            "ORDER BY d, chunk_id LIMIT %s",
            (service._literal(vector), tenant, service.CANDIDATE_DEPTH)).fetchall()
        assert [c for c, _ in near] == [r["chunk_id"] for r in every]
