"""The search's candidate queries keep their index plans however often a pooled connection
repeats them (docs/decisions/0158).

psycopg prepares a statement on its 5th run on a connection, and Postgres then plans it once
for every parameter value (a generic plan) when that looks cheaper: for the candidate queries'
"NULL = no filter" shapes that generic plan reads every chunk of the tenant instead of the
HNSW or GIN index (at 100,000 chunks: 244 ms instead of 15 for the vector query). The gateway
prepares them itself (parsed once a connection) and plans each run for its own parameters
(queries.sql: search_settings, docs/decisions/0318).
"""

from __future__ import annotations

import asyncio
import random

import psycopg
from psycopg.rows import dict_row

from gateway.search import service

# A tenant of 3,000 chunks in 30 documents, each with a vector and a tsvector.
SYNTHETIC_CHUNKS = """
WITH d AS (INSERT INTO documents (tenant_id, source_type, source_uri, title)
           SELECT %(t)s, 'md', 'upload://plan-' || g, 'plan' FROM generate_series(1, 30) g
           RETURNING doc_id),
v AS (INSERT INTO document_versions (tenant_id, doc_id, version_number, content_hash,
                                     embedding_model, embedding_dim)
      SELECT %(t)s, doc_id, 1, 'sha256:plan', 'm', 384 FROM d RETURNING doc_version_id),
c AS (INSERT INTO chunks (tenant_id, doc_version_id, ordinal, text, token_count, char_start,
                         char_end)
      SELECT %(t)s, v.doc_version_id, g, 'glacier melt ' || g, 3, 0, 1
      FROM v, generate_series(1, 100) g
      RETURNING chunk_id, doc_version_id, text),
f AS (INSERT INTO chunk_fts (chunk_id, tenant_id, doc_version_id, tsv)
      SELECT chunk_id, %(t)s, doc_version_id, to_tsvector('english', text) FROM c)
INSERT INTO chunk_embeddings (chunk_id, tenant_id, doc_version_id, embedding)
SELECT c.chunk_id, %(t)s, c.doc_version_id,
       (SELECT array_agg(random() - 0.5) FROM generate_series(1, 384)
        WHERE c.chunk_id IS NOT NULL)::vector
FROM c"""


def test_candidate_queries_are_never_planned_generic(conn, tenants, database_url):
    tenant = tenants.user("plans", role="admin").tenant_id
    conn.execute(SYNTHETIC_CHUNKS, {"t": tenant})
    conn.execute("ANALYZE")
    rng = random.Random(15)

    async def search_many_times() -> list[dict]:
        async with await psycopg.AsyncConnection.connect(database_url,
                                                         row_factory=dict_row) as aconn:
            for _ in range(20):  # one pooled connection serving many requests
                vector = [rng.uniform(-1, 1) for _ in range(384)]
                async with aconn.transaction():
                    found = await service.candidates(
                        aconn, tenant_id=tenant, vector=vector, model="m",
                        request=service.SearchRequest("glacier melt", 10, "hybrid", "chunk"))
                assert len(found.text) == len(found.vector) == service.CANDIDATE_DEPTH
            return await (await aconn.execute(
                "SELECT statement, generic_plans FROM pg_prepared_statements")).fetchall()

    prepared = asyncio.run(search_many_times())
    generic = [r for r in prepared if r["generic_plans"] > 0
               and ("chunk_embeddings" in r["statement"] or "chunk_fts" in r["statement"])]
    assert generic == [], generic
