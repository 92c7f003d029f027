"""The next wall after embedding: writing vectors into the halfvec HNSW index (issue 27).

    python bench/hnsw.py                        # 100,000 chunks per strategy
    python bench/hnsw.py --chunks 20000         # smaller
    python bench/hnsw.py --cache /tmp/hnsw.npz  # keep the base embeddings between runs

N chunks (documents of --per-doc chunks) go through the worker's own index stage
(worker/pipeline/index.write: version, chunks by COPY, embeddings by binary COPY, FTS, the run
succeeded; one transaction per document, as a worker commits them), three ways, each on a fresh
database migrated as production is:

1. live: into chunk_embeddings with its HNSW index (m 16, ef_construction 64), as today;
2. build after: the HNSW index dropped, the same load, then CREATE INDEX with
   maintenance_work_mem (--mwm) and max_parallel_maintenance_workers (--parallel, each value
   timed: 0 = the leader alone);
3. bulk first sync (ADR 0234): chunk_embeddings partitioned by tenant, the new tenant's partition
   attached without an HNSW index, loaded, then its index built; other tenants keep theirs.

Rows/s counts chunks (a chunk is one row in chunks, chunk_embeddings and chunk_fts). Vectors:
--base real chunks embedded by the model (torch fp32; the text is what bench/halfvec.py reads),
the rest blends of two of them plus noise (near-duplicates crowd an HNSW graph as real corpora
do; uniform random vectors would be the unrealistic hard case).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import common  # first: sets the environment before the model load
import halfvec  # noqa: E402  # its corpus and cached embeddings
import numpy as np  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402

from shared import db, jobs  # noqa: E402
from shared.db import migrate  # noqa: E402
from worker.pipeline import index  # noqa: E402
from worker.pipeline.chunk import Chunk  # noqa: E402

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def vectors(count: int, base: int, cache: Path | None) -> np.ndarray:
    real = halfvec.embed(halfvec.texts(base), cache)
    if count <= len(real):
        return real[:count]
    return np.concatenate([real, halfvec.blends(real, count - len(real))])


class Loader:
    """Documents, runs and jobs for one tenant, then their content through index.write."""

    def __init__(self, conn: db.Conn, tenant_name: str, count: int, per_doc: int) -> None:
        self.conn = conn
        self.tenant_id = conn.execute("INSERT INTO tenants (name) VALUES (%s) RETURNING tenant_id",
                                      (tenant_name,)).fetchone()["tenant_id"]
        self.jobs = []
        for start in range(0, count, per_doc):
            run_id = uuid.uuid4()
            doc_id = conn.execute(
                "INSERT INTO documents (tenant_id, source_type, source_uri, title) "
                "VALUES (%s, 'md', %s, 'bench') RETURNING doc_id",
                (self.tenant_id, f"upload://bench/{run_id}")).fetchone()["doc_id"]
            conn.execute("INSERT INTO ingestion_runs (run_id, tenant_id, doc_id, status, config) "
                         "VALUES (%s, %s, %s, 'queued', '{}')", (run_id, self.tenant_id, doc_id))
            conn.execute("UPDATE ingestion_runs SET status = 'running', started_at = now() "
                         "WHERE run_id = %s", (run_id,))
            self.jobs.append((start, jobs.IngestJob(
                run_id=run_id, doc_id=doc_id, tenant_id=self.tenant_id,
                upload_uri=f"file:///bench/{run_id}", title="bench", source_type="md",
                source_uri=f"upload://bench/{run_id}", original_filename="bench.md",
                content_hash="sha256:" + run_id.hex * 2, embedding_model=MODEL, embedding_dim=384,
                submitted_at=datetime.now(UTC))))

    def load(self, pool: db.Pool, vecs: np.ndarray, per_doc: int) -> float:
        """Seconds to write every document through the worker's index stage."""
        started = time.perf_counter()
        for start, job in self.jobs:
            part = vecs[start:start + per_doc]
            chunks = [Chunk(k, f"Chunk {start + k} of the bench corpus.", 8, 0, 30, None)
                      for k in range(len(part))]
            content = index.VersionContent(uuid.uuid4(), chunks, part, 30 * len(part), None,
                                           None, MODEL, "torch")
            with pool.connection() as conn:
                index.write(conn, job, content, {"stages": {}}, started=time.monotonic(),
                            fts_config="english", fence=0)
        return time.perf_counter() - started


def fresh(pg, name: str) -> tuple[str, db.Pool]:
    url = pg.ensure_database(name)
    migrate.apply(url)
    pool = db.sync_pool(url, max_size=2, configure=register_vector)
    pool.open(wait=True)
    return url, pool


def build(conn: db.Conn, table: str, mwm: str, parallel: int) -> float:
    conn.execute(f"SET maintenance_work_mem = '{mwm}'")
    conn.execute(f"SET max_parallel_maintenance_workers = {int(parallel)}")
    started = time.perf_counter()
    conn.execute(f"CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding halfvec_cosine_ops) "
                 "WITH (m = 16, ef_construction = 64)")
    return time.perf_counter() - started


def live(pg, vecs: np.ndarray, per_doc: int) -> None:
    url, pool = fresh(pg, "live")
    with db.connect(url, autocommit=True) as conn:
        loader = Loader(conn, "live", len(vecs), per_doc)
        took = loader.load(pool, vecs, per_doc)
    pool.close()
    print(f"1. live HNSW index: {len(vecs):,} chunks in {took:.1f} s = {len(vecs) / took:,.0f} "
          "chunks/s")


def build_after(pg, vecs: np.ndarray, per_doc: int, mwm: str, parallel: list[int]) -> None:
    url, pool = fresh(pg, "build")
    with db.connect(url, autocommit=True) as conn:
        conn.execute("DROP INDEX idx_chunk_embeddings_hnsw")
        loader = Loader(conn, "build", len(vecs), per_doc)
        took = loader.load(pool, vecs, per_doc)
        print(f"2. no HNSW index while loading: {len(vecs):,} chunks in {took:.1f} s = "
              f"{len(vecs) / took:,.0f} chunks/s")
        for workers in parallel:
            conn.execute("DROP INDEX IF EXISTS chunk_embeddings_hnsw")
            built = build(conn, "chunk_embeddings", mwm, workers)
            print(f"   then CREATE INDEX, maintenance_work_mem {mwm}, "
                  f"max_parallel_maintenance_workers {workers}: {built:.1f} s; load + build = "
                  f"{len(vecs) / (took + built):,.0f} chunks/s")
    pool.close()


def partitioned(pg, vecs: np.ndarray, per_doc: int, mwm: str, parallel: int) -> None:
    """chunk_embeddings partitioned by tenant: an existing tenant keeps its indexed partition,
    the new tenant's partition is loaded bare and indexed after."""
    url, pool = fresh(pg, "parts")
    with db.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE chunk_embeddings")
        conn.execute("CREATE TABLE chunk_embeddings (chunk_id uuid NOT NULL REFERENCES chunks, "
                     "tenant_id uuid NOT NULL REFERENCES tenants, doc_version_id uuid NOT NULL "
                     "REFERENCES document_versions, embedding halfvec(384) NOT NULL, "
                     "PRIMARY KEY (tenant_id, chunk_id)) PARTITION BY LIST (tenant_id)")
        existing = Loader(conn, "existing", min(2000, len(vecs)), per_doc)
        conn.execute(f"CREATE TABLE emb_existing PARTITION OF chunk_embeddings FOR VALUES IN "
                     f"('{existing.tenant_id}')")
        conn.execute("CREATE INDEX emb_existing_hnsw ON emb_existing USING hnsw "
                     "(embedding halfvec_cosine_ops) WITH (m = 16, ef_construction = 64)")
        existing.load(pool, vecs[:2000], per_doc)
        bulk = Loader(conn, "bulk", len(vecs), per_doc)
        conn.execute(f"CREATE TABLE emb_bulk PARTITION OF chunk_embeddings FOR VALUES IN "
                     f"('{bulk.tenant_id}')")
        took = bulk.load(pool, vecs, per_doc)
        built = build(conn, "emb_bulk", mwm, parallel)
        conn.execute("ANALYZE chunk_embeddings")
        query = "[" + ",".join(f"{x:.6g}" for x in vecs[0]) + "]"
        plan = "\n".join(r["QUERY PLAN"] for r in conn.execute(
            "EXPLAIN SELECT chunk_id FROM chunk_embeddings WHERE tenant_id = %s "
            "ORDER BY embedding <=> %s::halfvec LIMIT 10", (bulk.tenant_id, query)).fetchall())
    pool.close()
    print(f"3. bulk first sync into its own partition: load {took:.1f} s "
          f"({len(vecs) / took:,.0f} chunks/s), index built after in {built:.1f} s "
          f"(max_parallel_maintenance_workers {parallel}): {len(vecs) / (took + built):,.0f} "
          f"chunks/s; the tenant's query walks its partition's index: "
          f"{'emb_bulk_hnsw' in plan and 'emb_existing' not in plan}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--per-doc", type=int, default=50, help="chunks per document")
    parser.add_argument("--base", type=int, default=1500, help="real chunks embedded")
    parser.add_argument("--cache", type=Path, help="an .npz for the base embeddings")
    parser.add_argument("--mwm", default="1GB", help="maintenance_work_mem for the builds")
    parser.add_argument("--parallel", default="0,1",
                        help="max_parallel_maintenance_workers values to time")
    parser.add_argument("--only", choices=("live", "build", "partition"))
    args = parser.parse_args()
    parallel = [int(x) for x in args.parallel.split(",")]
    vecs = vectors(args.chunks, args.base, args.cache)
    print(f"{len(vecs):,} chunks in documents of {args.per_doc}; vectors: {min(args.base, len(vecs))}"
          f" real, the rest blends; median norm {statistics.median(np.linalg.norm(vecs, axis=1)):.3f}",
          file=sys.stderr)
    with common.stack("bench-hnsw-") as (_root, pg, _moto):
        if args.only in (None, "live"):
            live(pg, vecs, args.per_doc)
        if args.only in (None, "build"):
            build_after(pg, vecs, args.per_doc, args.mwm, parallel)
        if args.only in (None, "partition"):
            partitioned(pg, vecs, args.per_doc, args.mwm, max(parallel))


if __name__ == "__main__":
    main()
