"""halfvec(384) against vector(384): HNSW top-10 overlap, query latency, table and index size.

    python bench/halfvec.py                          # ~6,000 chunks, 60 queries
    python bench/halfvec.py --cache /tmp/halfvec-emb.npz --pad 100000   # and at scale

The corpus is real, varied English text found on this machine (the repo's docs and decisions,
Python's own reference topics and module docstrings, the installed packages' descriptions),
cut into chunks of 25-120 words (tests/support/corpus.py), plus the everyday-topics corpus
of the onnx test, embedded by the worker's model (torch, fp32: the reference).
The same fp32 vectors go into two tables shaped like chunk_embeddings (three uuids and the
vector), one `vector(384)` with an HNSW `vector_cosine_ops` index, one `halfvec(384)` with
`halfvec_cosine_ops`, both built as migration 0001 builds it (m = 16, ef_construction = 64).
Each query runs as the gateway runs it (a text literal cast to the column's type, ORDER BY
<=> LIMIT k, hnsw.ef_search as service.py sets it for k = 10), and its top 10 is compared
with the other index and with exact fp32 cosine computed in numpy. Prints the overlaps, the
p50/p95 query latency per type, and pg_table_size / pg_indexes_size per type.
The bar (issue 15): overlap with `vector` >= 0.99 and the latency holds.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
import uuid
from pathlib import Path

import common  # first: sets the environment before the model load
import numpy as np  # noqa: E402
from pgvector import HalfVector  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402

from shared import db  # noqa: E402
from tests.support import corpus  # noqa: E402

K = 10
TYPES = {"vector": "vector_cosine_ops", "halfvec": "halfvec_cosine_ops"}
# Each table's column type. `vector_again` is a second build of the vector index over the same
# rows: HNSW builds are randomised (each node's level is drawn), so two builds of one index
# disagree a little on near-ties; that is the noise floor for halfvec vs vector.
TABLES = {"vector": "vector", "halfvec": "halfvec", "vector_again": "vector"}


def texts(limit: int) -> list[str]:
    """The machine's real text, plus the everyday-topics corpus of the onnx test (cooking, law,
    sport, code, other languages) so that not every chunk is about software."""
    from tests.unit.test_embed_onnx import corpus as everyday

    return corpus.chunks(itertools.chain(corpus.machine_paragraphs(), everyday(600)), limit)


def embed(strings: list[str], cache: Path | None) -> np.ndarray:
    """The fp32 vectors of ``strings``; with a cache, only the strings it lacks are embedded
    (the installed packages, and so the corpus, change between runs)."""
    known: dict[str, np.ndarray] = {}
    if cache is not None and cache.exists():
        stored = np.load(cache, allow_pickle=False)
        known = dict(zip(stored["texts"].tolist(), stored["vectors"], strict=True))
    missing = sorted(set(strings) - set(known))
    if missing:
        from shared.embedding.model import load_embedder

        model = load_embedder(variant="torch")
        started = time.perf_counter()
        known.update(zip(missing, np.asarray(model.encode(missing), dtype=np.float32),
                         strict=True))
        print(f"embedded {len(missing)} texts in {time.perf_counter() - started:.0f} s",
              file=sys.stderr)
        if cache is not None:
            np.savez(cache, texts=np.array(list(known)), vectors=np.stack(list(known.values())))
    return np.stack([known[s] for s in strings])


def blends(docs: np.ndarray, n: int) -> np.ndarray:
    """``n`` unit vectors between two random real chunks, with a little noise: near the real
    ones, so that they compete for the top 10 (random vectors would be far from every query)."""
    rng = np.random.default_rng(24)
    a, b = rng.integers(0, len(docs), size=(2, n))
    mix = rng.uniform(0.5, 0.9, size=(n, 1)).astype(np.float32)
    noise = rng.standard_normal((n, docs.shape[1])).astype(np.float32) * 0.02
    out = mix * docs[a] + (1 - mix) * docs[b] + noise
    return out / np.linalg.norm(out, axis=1, keepdims=True)


# ── database ────────────────────────────────────────────────────────────────────────────────
def load(conn: db.Conn, name: str, vectors: np.ndarray) -> list[uuid.UUID]:
    """A table shaped like chunk_embeddings with TABLES[name] as the column, loaded by binary
    COPY as the worker writes, then the HNSW index; returns the row ids in vector order."""
    table, kind = f"emb_{name}", TABLES[name]
    conn.execute(f"CREATE TABLE {table} (chunk_id uuid PRIMARY KEY, tenant_id uuid NOT NULL, "
                 f"doc_version_id uuid NOT NULL, embedding {kind}(384) NOT NULL)")
    tenant, version = uuid.uuid4(), uuid.uuid4()
    ids = [uuid.uuid4() for _ in range(len(vectors))]
    with conn.cursor().copy(f"COPY {table} (chunk_id, tenant_id, doc_version_id, embedding) "
                            "FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.set_types(["uuid", "uuid", "uuid", kind])
        for chunk_id, vector in zip(ids, vectors, strict=True):
            value = vector if kind == "vector" else HalfVector(vector)
            copy.write_row((chunk_id, tenant, version, value))
    started = time.perf_counter()
    conn.execute(f"CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding {TYPES[kind]}) "
                 "WITH (m = 16, ef_construction = 64)")
    build = time.perf_counter() - started
    conn.execute(f"VACUUM ANALYZE {table}")
    print(f"{name}: HNSW built in {build:.1f} s")
    return ids


def search(conn: db.Conn, name: str, literal: str, ef_search: int) -> tuple[list[uuid.UUID], float]:
    """The top K by the index, as the gateway asks it, and the seconds the statement took."""
    with conn.transaction():
        conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(ef_search),))
        started = time.perf_counter()
        rows = conn.execute(f"SELECT chunk_id FROM emb_{name} ORDER BY embedding <=> "
                            f"%s::{TABLES[name]} "
                            "LIMIT %s", (literal, K)).fetchall()
        took = time.perf_counter() - started
    return [r["chunk_id"] for r in rows], took


def uses_index(conn: db.Conn, kind: str, literal: str) -> bool:
    plan = conn.execute(f"EXPLAIN SELECT chunk_id FROM emb_{kind} ORDER BY embedding <=> "
                        f"%s::{kind} LIMIT {K}", (literal,)).fetchall()
    return any(f"Index Scan using emb_{kind}_hnsw" in r["QUERY PLAN"] for r in plan)


def sizes(conn: db.Conn, kind: str) -> dict[str, int]:
    return conn.execute(
        "SELECT pg_table_size(%(t)s) AS table, pg_indexes_size(%(t)s) AS indexes, "
        "pg_relation_size(%(i)s) AS hnsw",
        {"t": f"emb_{kind}", "i": f"emb_{kind}_hnsw"}).fetchone()


def overlap(a: list, b: list) -> float:
    return len(set(a[:K]) & set(b[:K])) / K


# ── main ────────────────────────────────────────────────────────────────────────────────────
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=6000)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each query")
    parser.add_argument("--ef-search", default="40,100",
                        help="hnsw.ef_search values; 100 is what service.py sets for k = 10")
    parser.add_argument("--cache", type=Path, help="an .npz to keep the embeddings in")
    parser.add_argument("--pad", type=int, default=0,
                        help="add this many blends of two real chunks' vectors, to measure at scale")
    args = parser.parse_args()

    chunks = texts(args.chunks)
    vectors = embed(chunks + list(corpus.QUERIES), args.cache)
    docs, queries = vectors[:len(chunks)], vectors[len(chunks):]
    if args.pad:
        docs = np.concatenate([docs, blends(docs, args.pad)])
    exact = [list(np.argsort(-(docs @ q), kind="stable")[:K]) for q in queries]
    # Rounding alone, without any index: exact search with chunks and query as float16 (the
    # gateway casts the query to halfvec too).
    halves = docs.astype(np.float16).astype(np.float32)
    halves /= np.linalg.norm(halves, axis=1, keepdims=True)  # cosine, as <=> computes it
    rounded = [list(np.argsort(-(halves @ q.astype(np.float16).astype(np.float32)),
                               kind="stable")[:K]) for q in queries]
    literals = ["[" + ",".join(f"{x:.7g}" for x in q) + "]" for q in queries]
    print(f"corpus: {len(chunks)} chunks + {args.pad} blends, median {statistics.median(len(t.split()) for t in chunks):.0f}"
          f" words; {len(queries)} queries; k = {K}")
    print(f"top-{K} overlap exact over float16-rounded vectors vs exact fp32: "
          f"{statistics.fmean(overlap(a, b) for a, b in zip(rounded, exact, strict=True)):.4f}")

    with common.stack("bench-halfvec-") as (_root, pg, _moto):
        url = pg.ensure_database("bench")
        with db.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            register_vector(conn)
            conn.execute("SET maintenance_work_mem = '512MB'")
            ids = {name: load(conn, name, docs) for name in TABLES}
            for kind in TYPES:
                print(f"{kind}: the query walks the HNSW index: {uses_index(conn, kind, literals[0])}")
            report_sizes(conn)
            for ef in (int(x) for x in args.ef_search.split(",")):
                report(conn, ef, literals, exact, ids, args.repeat)


def report_sizes(conn: db.Conn) -> None:
    got = {kind: sizes(conn, kind) for kind in TYPES}
    for part in ("table", "indexes", "hnsw"):
        v, h = got["vector"][part], got["halfvec"][part]
        print(f"size {part:8}: vector {v / 2**20:7.2f} MiB  halfvec {h / 2**20:7.2f} MiB  "
              f"ratio {h / v:.2f}")


def report(conn: db.Conn, ef: int, literals: list[str], exact: list[list[int]],
           ids: dict[str, list[uuid.UUID]], repeat: int) -> None:
    found: dict[str, list[list[uuid.UUID]]] = {name: [] for name in TABLES}
    times: dict[str, list[float]] = {kind: [] for kind in TYPES}
    for literal in literals:
        search(conn, "vector", literal, ef)  # warm both, then alternate the timed runs
        search(conn, "halfvec", literal, ef)
        for _ in range(repeat):
            for kind in TYPES:
                _, took = search(conn, kind, literal, ef)
                times[kind].append(took * 1000)
        for name in TABLES:
            found[name].append(search(conn, name, literal, ef)[0])
    # Row ids differ per table: compare by position in the corpus.
    pos = {name: {chunk_id: i for i, chunk_id in enumerate(ids[name])} for name in TABLES}
    as_pos = {name: [[pos[name][c] for c in top] for top in found[name]] for name in TABLES}
    mean = statistics.fmean
    print(f"ef_search {ef}:")
    print(f"  top-{K} overlap halfvec HNSW vs vector HNSW: "
          f"{mean(overlap(a, b) for a, b in zip(as_pos['halfvec'], as_pos['vector'], strict=True)):.4f}")
    print(f"  top-{K} overlap vector HNSW rebuilt vs vector HNSW (noise floor): "
          f"{mean(overlap(a, b) for a, b in zip(as_pos['vector_again'], as_pos['vector'], strict=True)):.4f}")
    for name in TABLES:
        print(f"  top-{K} overlap {name:12} HNSW vs exact fp32: "
              f"{mean(overlap(a, b) for a, b in zip(as_pos[name], exact, strict=True)):.4f}")
    for kind in TYPES:
        ms = times[kind]
        print(f"  latency {kind:7}: p50 {np.percentile(ms, 50):.2f} ms  "
              f"p95 {np.percentile(ms, 95):.2f} ms  ({len(ms)} runs)")


if __name__ == "__main__":
    main()
