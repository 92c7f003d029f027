"""Embeddings are stored as halfvec(384) and searched through an HNSW halfvec_cosine_ops index
(migration 0024, docs/decisions/0156): the schema, the in-place conversion of rows written as
vector(384), the plan of the gateway's vector query, and search quality against exact fp32
cosine on real text.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest
from pgvector.psycopg import register_vector

from gateway.search import service
from shared import db
from shared.db import migrate
from tests.integration import test_migrations
from tests.support import corpus
from worker.pipeline import index

K = 10
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
fresh_database = test_migrations.fresh_database  # an empty database, no migrations applied


def column_and_index(conn) -> dict:
    return conn.execute("""
        SELECT format_type(a.atttypid, a.atttypmod) AS column_type, am.amname AS method,
               oc.opcname AS opclass
        FROM pg_attribute a
        JOIN pg_index i ON i.indrelid = a.attrelid AND a.attnum = ANY(i.indkey)
        JOIN pg_class ic ON ic.oid = i.indexrelid AND ic.relname = 'idx_chunk_embeddings_hnsw'
        JOIN pg_am am ON am.oid = ic.relam
        JOIN pg_opclass oc ON oc.oid = i.indclass[0]
        WHERE a.attrelid = 'chunk_embeddings'::regclass AND a.attname = 'embedding'""").fetchone()


def test_embeddings_are_halfvec_with_an_hnsw_halfvec_cosine_index(conn):
    assert column_and_index(conn) == {"column_type": "halfvec(384)", "method": "hnsw",
                                      "opclass": "halfvec_cosine_ops"}
    # The worker's start check reads the dimension from the column's typmod: still 384.
    assert conn.execute("SELECT atttypmod FROM pg_attribute WHERE attrelid = "
                        "'chunk_embeddings'::regclass AND attname = 'embedding'"
                        ).fetchone()["atttypmod"] == 384


VERSIONS = """
WITH d AS (INSERT INTO documents (tenant_id, source_type, source_uri, title)
           SELECT %(t)s, 'md', 'upload://halfvec-' || gen_random_uuid(), 'doc ' || g
           FROM generate_series(1, %(docs)s) g RETURNING doc_id)
INSERT INTO document_versions (tenant_id, doc_id, version_number, content_hash, embedding_model,
                               embedding_dim)
SELECT %(t)s, doc_id, 1, 'sha256:halfvec', %(model)s, 384 FROM d RETURNING doc_version_id"""


def chunk_rows(conn, tenant_id: uuid.UUID, texts: list[str], docs: int) -> list[tuple]:
    """Documents, active versions and chunks for ``texts``, spread over ``docs`` documents;
    returns (version id, chunk ids) per document."""
    versions = [r["doc_version_id"] for r in conn.execute(
        VERSIONS, {"t": tenant_id, "docs": docs, "model": MODEL}).fetchall()]
    out = []
    for n, version in enumerate(versions):
        mine = texts[n::docs]
        ids = [uuid.uuid4() for _ in mine]
        with conn.cursor().copy("COPY chunks (chunk_id, tenant_id, doc_version_id, ordinal, text, "
                                "token_count, char_start, char_end) FROM STDIN") as copy:
            for ordinal, (chunk_id, text) in enumerate(zip(ids, mine, strict=True)):
                copy.write_row((chunk_id, tenant_id, version, ordinal, text, 1, 0, len(text)))
        out.append((version, ids, n))
    return out


def test_migration_0024_converts_vectors_already_stored(fresh_database, tmp_path: Path):
    # Given a database at the schema before 0024, holding vectors written as vector(384)
    before = tmp_path / "before"
    before.mkdir()
    for path in migrate.DEFAULT_DIR.glob("*.sql"):
        if path.name < "0024":
            shutil.copy(path, before)
    migrate.apply(fresh_database, before)
    rng = np.random.default_rng(24)
    vectors = rng.standard_normal((40, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with db.connect(fresh_database, autocommit=True) as conn:
        register_vector(conn)
        tenant = conn.execute("INSERT INTO tenants (name) VALUES ('old') "
                              "RETURNING tenant_id").fetchone()["tenant_id"]
        [(version, ids, _)] = chunk_rows(conn, tenant, [f"chunk {i}" for i in range(40)], 1)
        for chunk_id, vector in zip(ids, vectors, strict=True):
            conn.execute("INSERT INTO chunk_embeddings (chunk_id, tenant_id, doc_version_id, "
                         "embedding) VALUES (%s, %s, %s, %s)", (chunk_id, tenant, version, vector))

    # When 0024 is applied
    assert "0024" in migrate.apply(fresh_database)

    # Then every row is there, as the float16 rounding of what was stored, under the new index
    with db.connect(fresh_database, autocommit=True) as conn:
        register_vector(conn)
        assert column_and_index(conn)["opclass"] == "halfvec_cosine_ops"
        stored = {r["chunk_id"]: r["embedding"].to_numpy() for r in conn.execute(
            "SELECT chunk_id, embedding FROM chunk_embeddings")}
    assert set(stored) == set(ids)
    for chunk_id, vector in zip(ids, vectors, strict=True):
        assert np.array_equal(stored[chunk_id], vector.astype(np.float16))


SYNTHETIC = """
INSERT INTO chunk_embeddings (chunk_id, tenant_id, doc_version_id, embedding)
SELECT c.chunk_id, c.tenant_id, c.doc_version_id,
       (SELECT array_agg(random() - 0.5) FROM generate_series(1, 384)
        WHERE c.chunk_id IS NOT NULL)::halfvec
FROM chunks c WHERE c.tenant_id = %(t)s"""


def vector_query(conn, tenant_id: uuid.UUID, literal: str, *, explain: bool = False) -> list:
    """The gateway's vector query, with the candidate pool and hnsw.ef_search it uses for k=10."""
    request = service.SearchRequest("q", k=K, mode="vector")
    ef_search = min(service.MAX_EF_SEARCH, max(service.MIN_EF_SEARCH, request.pool_size))
    conn.execute(service.Q["search_settings"], {"ef_search": str(ef_search)})
    return conn.execute(("EXPLAIN " if explain else "") + service.Q["vector_candidates"], {
        "tenant_id": tenant_id, "vector": literal, "model": MODEL, "n": request.pool_size,
        **service.Filters().params()}).fetchall()


def test_the_gateways_vector_query_walks_the_halfvec_index(conn):
    # 6,000 chunks of one tenant: enough that the planner must prefer the index walk to sorting
    # every row (below ~3,500 halfvec rows it sorts them, rightly: ADR 0156); a query shape or
    # operator class the index cannot serve would always sort.
    tenant = conn.execute("INSERT INTO tenants (name) VALUES ('plan') "
                          "RETURNING tenant_id").fetchone()["tenant_id"]
    chunk_rows(conn, tenant, ["x"] * 6000, 30)
    # Loaded without the index, then the migration's own index built again from its definition:
    # one build instead of 6,000 graph inserts (ADR 0234: 3-4x faster), the same index after.
    definition = conn.execute("SELECT pg_get_indexdef('idx_chunk_embeddings_hnsw'::regclass) "
                              "AS d").fetchone()["d"]
    conn.execute("DROP INDEX idx_chunk_embeddings_hnsw")
    conn.execute(SYNTHETIC, {"t": tenant})
    conn.execute(definition)
    conn.execute("ANALYZE")
    with conn.transaction():
        plan = "\n".join(r["QUERY PLAN"] for r in vector_query(
            conn, tenant, "[" + ",".join(["0.05"] * 384) + "]", explain=True))
    assert "Index Scan using idx_chunk_embeddings_hnsw" in plan, plan
    assert "Sort" not in plan, plan


@pytest.mark.slow  # embeds 800 chunks and 60 queries with the model: minutes on a busy CPU
@pytest.mark.timeout(600)
def test_search_over_halfvec_finds_the_exact_fp32_neighbours(conn):
    # Given 800 chunks of real text, embedded in fp32 and written by the worker's own write
    # path (binary COPY of halfvec). At scale, bench/halfvec.py measures the same (ADR 0156).
    from shared.embedding.model import load_embedder

    # Short chunks (25-45 words, ~2.5x cheaper to embed than the default 25-120 on a CPU):
    # what is measured is the index and the halfvec rounding, not the length of the text.
    texts = corpus.chunks(corpus.python_paragraphs(), 800, max_words=45)
    assert len(texts) == 800
    model = load_embedder(variant="torch")
    vectors = np.asarray(model.encode(texts), dtype=np.float32)
    queries = np.asarray(model.encode(list(corpus.QUERIES)), dtype=np.float32)
    register_vector(conn)  # as the worker's pool does for its connections
    tenant = conn.execute("INSERT INTO tenants (name) VALUES ('quality') "
                          "RETURNING tenant_id").fetchone()["tenant_id"]
    position: dict[uuid.UUID, int] = {}
    for version, ids, n in chunk_rows(conn, tenant, texts, 8):
        mine = list(range(n, len(texts), 8))
        position.update(zip(ids, mine, strict=True))
        content = index.VersionContent(doc_version_id=version, chunks=[], vectors=vectors[mine],
                                       char_count=0, page_count=None, artifact_uri=None,
                                       embedding_model=MODEL)
        index._copy_embeddings(conn, tenant, content, ids)
    conn.execute("ANALYZE")

    # When each query runs as the gateway runs it, through the HNSW index: at 800 chunks the
    # planner would rightly sort them all (exact), so sorting is made the last resort here to
    # measure what a big tenant gets
    overlaps = []
    for query in queries:
        literal = service._literal([float(x) for x in query])
        with conn.transaction():
            conn.execute("SET LOCAL enable_sort = off")
            rows = vector_query(conn, tenant, literal)
            plan = "\n".join(r["QUERY PLAN"] for r in vector_query(conn, tenant, literal,
                                                                   explain=True))
        assert "Index Scan using idx_chunk_embeddings_hnsw" in plan, plan
        found = [position[r["chunk_id"]] for r in rows[:K]]
        exact = np.argsort(-(vectors @ query), kind="stable")[:K]
        overlaps.append(len(set(found) & set(exact.tolist())) / K)

    # Then its top 10 are the exact fp32 cosine top 10 (issue 15's bar: overlap >= 0.99)
    assert len(overlaps) == len(corpus.QUERIES) >= 50
    assert np.mean(overlaps) >= 0.99, sorted(overlaps)[:10]
