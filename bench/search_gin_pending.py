"""The full-text index's pending list: what it costs search's text leg, and what each way of
keeping it short costs the worker's writes (issue 35, docs/decisions/0344).

    python bench/search_gin_pending.py                       # 100,000 chunks
    python bench/search_gin_pending.py --chunks 20000 --pending-docs 10

A GIN index with fastupdate appends new rows to a pending list that every search through the
index reads whole; Postgres merges it only when an insert takes it past gin_pending_list_limit
(4 MB) or when (auto)vacuum comes by. The chunks are written as bench/search.py writes them
(1,000 documents of 100 chunks of 60 Zipf-drawn words), but chunk_fts is filled by the worker's
own statement (worker/queries.sql insert_fts), one document version at a time, as workers do.
Autovacuum is off for chunk_fts so the list stays as the writes leave it.

1. Reads: the text leg's SQL (gateway/search/queries.sql text_candidates) at 1 and 8
   connections, with the last --pending-docs documents' rows pending (the list just under its
   4 MB limit, the worst a reader meets between merges), then after gin_clean_pending_list.
2. Writes: --write-docs fresh documents' chunk_fts rows, one transaction each, under each
   setting of the index: fastupdate on (4 MB, today), on with a merge after each write (as
   worker/records does for trigram indexes, ADR 0334), on with gin_pending_list_limit 64 kB,
   fastupdate off. Each is timed to the point where nothing is left pending (the final merge
   counted), so the figures compare the same work.
The load average is printed beside each figure (the machine is shared).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from pathlib import Path

import common  # first: sets the environment
import numpy as np  # noqa: E402
from search import CHUNKS_PER_DOC, WORDS_PER_CHUNK, vocabulary  # noqa: E402  (the same corpus)

from cli.embedded import EmbeddedPostgres  # noqa: E402
from shared import db  # noqa: E402
from shared.db import migrate  # noqa: E402
from shared.settings import DEFAULT_EMBEDDING_MODEL  # noqa: E402

INDEX = "idx_chunk_fts_gin"
SMALL_LIST_DOCS = 2
ROOT = Path(__file__).resolve().parents[1]
WORKER_Q = db.load_queries(ROOT / "worker" / "queries.sql")
SEARCH_Q = db.load_queries(ROOT / "gateway" / "search" / "queries.sql")
NO_FILTERS = {"doc_ids": None, "source_id": None, "file_type": None, "after": None,
              "before": None}
PENDING = ("SELECT n_pending_pages AS pages, n_pending_tuples AS tuples "
           "FROM gin_metapage_info(get_raw_page(%s, 0))")


def add_documents(conn: db.Conn, tenant_id: uuid.UUID, docs: int, rng: np.random.Generator,
                  words: list[str]) -> list[uuid.UUID]:
    """Documents, active versions and chunks (no chunk_fts rows yet): their version ids."""
    zipf = 1.0 / np.arange(1, len(words) + 1)
    zipf /= zipf.sum()
    versions = []
    with conn.transaction():
        for _ in range(docs):
            doc_id, version_id = uuid.uuid4(), uuid.uuid4()
            conn.execute("INSERT INTO documents (doc_id, tenant_id, source_type, source_uri, "
                         "title) VALUES (%s, %s, 'md', %s, 'doc')",
                         (doc_id, tenant_id, f"upload://sha256:{doc_id.hex}"))
            conn.execute("INSERT INTO document_versions (doc_version_id, tenant_id, doc_id, "
                         "version_number, content_hash, embedding_model, embedding_dim, "
                         "chunk_count) VALUES (%s, %s, %s, 1, %s, %s, 384, %s)",
                         (version_id, tenant_id, doc_id, f"sha256:{doc_id.hex}",
                          DEFAULT_EMBEDDING_MODEL, CHUNKS_PER_DOC))
            picks = rng.choice(len(words), size=(CHUNKS_PER_DOC, WORDS_PER_CHUNK), p=zipf)
            with conn.cursor().copy("COPY chunks (chunk_id, tenant_id, doc_version_id, ordinal, "
                                    "text, token_count, char_start, char_end) FROM STDIN") as cp:
                for i in range(CHUNKS_PER_DOC):
                    text = " ".join(words[w] for w in picks[i])
                    cp.write_row((uuid.uuid4(), tenant_id, version_id, i, text, WORDS_PER_CHUNK,
                                  0, len(text)))
            versions.append(version_id)
    return versions


def write_fts(conn: db.Conn, tenant_id: uuid.UUID, version_id: uuid.UUID) -> None:
    """One version's keyword rows, by the worker's own statement, in a transaction of its own."""
    with conn.transaction():
        conn.execute(WORKER_Q["insert_fts"], {"tenant_id": tenant_id, "config": "english",
                                              "doc_version_id": version_id})


def pending(conn: db.Conn) -> str:
    row = conn.execute(PENDING, (INDEX,)).fetchone()
    assert row is not None
    return f"{row['pages']} pages, {row['tuples']} tuples"


def text_leg(url: str, tenant_id: uuid.UUID, queries: list[str], clients: int) -> list[float]:
    """Latencies (ms) of the text leg's SQL, `clients` connections taking queries off a list."""
    todo, latencies, lock = list(queries), [], threading.Lock()

    def client() -> None:
        with db.connect(url, autocommit=True) as conn:
            while True:
                with lock:
                    if not todo:
                        return
                    q = todo.pop()
                started = time.perf_counter()
                conn.execute(SEARCH_Q["text_candidates"], {
                    "tenant_id": tenant_id, "q": q, "syntax": False, "n": 100, **NO_FILTERS},
                    prepare=False).fetchall()
                with lock:
                    latencies.append((time.perf_counter() - started) * 1000)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def reads(url: str, conn: db.Conn, tenant_id: uuid.UUID, queries: list[list[str]],
          state: str, clients: list[int]) -> None:
    print(f"text leg SQL, {state} ({pending(conn)}):")
    for n, qs in zip(clients, queries, strict=True):
        text_leg(url, tenant_id, qs[:20], n)  # warm the cache
        before = loadavg()
        started = time.perf_counter()
        lat = text_leg(url, tenant_id, qs, n)
        wall = time.perf_counter() - started
        print(f"  {n} connection(s): {len(lat) / wall:6.1f} queries/s  p50 {p(lat, 50):6.1f}  "
              f"p95 {p(lat, 95):6.1f}  mean {statistics.mean(lat):6.1f} ms  n={len(lat)}  "
              f"load average {before} -> {loadavg()}")


SETTINGS = {
    "fastupdate on, 4 MB (today)": ("fastupdate = on", "gin_pending_list_limit = 4096", False),
    "fastupdate on, merged after each write": ("fastupdate = on", "gin_pending_list_limit = 4096",
                                               True),
    "fastupdate on, 64 kB limit": ("fastupdate = on", "gin_pending_list_limit = 64", False),
    "fastupdate on, 256 kB limit": ("fastupdate = on", "gin_pending_list_limit = 256", False),
    "fastupdate off": ("fastupdate = off", "gin_pending_list_limit = 4096", False),
}


def writes(conn: db.Conn, tenant_id: uuid.UUID, batches: dict[str, list[uuid.UUID]]) -> None:
    print(f"writing chunk_fts, {len(next(iter(batches.values())))} documents of "
          f"{CHUNKS_PER_DOC} chunks, one transaction each, timed until nothing is pending:")
    for name, versions in batches.items():
        fastupdate, limit, merge = SETTINGS[name]
        conn.execute(f"ALTER INDEX {INDEX} SET ({fastupdate}, {limit})")
        conn.execute("SELECT gin_clean_pending_list(%s::regclass)", (INDEX,))
        conn.execute("CHECKPOINT")
        before = loadavg()
        per_doc = []
        started = time.perf_counter()
        for version_id in versions:
            at = time.perf_counter()
            write_fts(conn, tenant_id, version_id)
            if merge:
                conn.execute("SELECT gin_clean_pending_list(%s::regclass)", (INDEX,))
            per_doc.append((time.perf_counter() - at) * 1000)
        left = pending(conn)
        at = time.perf_counter()
        conn.execute("SELECT gin_clean_pending_list(%s::regclass)", (INDEX,))
        final = (time.perf_counter() - at) * 1000
        total = (time.perf_counter() - started) * 1000
        print(f"  {name:<40} {total / len(versions):6.1f} ms a document all told "
              f"(p50 {p(per_doc, 50):6.1f}, max {max(per_doc):6.1f}, final merge {final:6.1f}; "
              f"left pending {left})  "
              f"load average {before} -> {loadavg()}")
    conn.execute(f"ALTER INDEX {INDEX} RESET (fastupdate, gin_pending_list_limit)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--pending-docs", type=int, default=40,
                        help="documents whose rows stay pending (40 x 100 chunks ~ 490 pages, "
                             "just under the 4 MB limit's 512)")
    parser.add_argument("--write-docs", type=int, default=60)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    rng = np.random.default_rng(15)
    words = vocabulary(rng)
    with common.stack("bench-gin-pending-") as (root, pg, _moto):
        run(pg, args, rng, words)


def run(pg: EmbeddedPostgres, args: argparse.Namespace, rng: np.random.Generator,
        words: list[str]) -> None:
    url = pg.ensure_database("bench")
    migrate.apply(url)
    with db.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        conn.execute("ALTER TABLE chunk_fts SET (autovacuum_enabled = false)")
        tenant_id = common.BenchUser(conn).tenant_id
        started = time.monotonic()
        docs = args.chunks // CHUNKS_PER_DOC + SMALL_LIST_DOCS
        versions = add_documents(conn, tenant_id, docs, rng, words)
        small = versions[-SMALL_LIST_DOCS:]
        versions = versions[:-SMALL_LIST_DOCS]
        settled, late = versions[:-args.pending_docs], versions[-args.pending_docs:]
        for version_id in settled:
            write_fts(conn, tenant_id, version_id)
        conn.execute("VACUUM ANALYZE")  # merged, and search_term_df visible for index-only scans
        for version_id in late:  # as workers leave them: pending
            write_fts(conn, tenant_id, version_id)
        conn.execute("ANALYZE")  # a manual ANALYZE leaves the pending list alone
        print(f"loaded {args.chunks} chunks in {time.monotonic() - started:.0f} s")
        queries = [[" ".join(rng.choice(words[50:1500], size=rng.integers(2, 4)))
                    for _ in range(args.queries)] for _ in args.clients]
        reads(url, conn, tenant_id, queries, "pending list as the writes left it",
              args.clients)
        conn.execute("SELECT gin_clean_pending_list(%s::regclass)", (INDEX,))
        for version_id in small:
            write_fts(conn, tenant_id, version_id)
        reads(url, conn, tenant_id, queries, f"merged, then {SMALL_LIST_DOCS} documents written "
              "(about what a 256 kB limit leaves at most)", args.clients)
        conn.execute("SELECT gin_clean_pending_list(%s::regclass)", (INDEX,))
        reads(url, conn, tenant_id, queries, "after gin_clean_pending_list", args.clients)
        batches = {name: add_documents(conn, tenant_id, args.write_docs, rng, words)
                   for name in SETTINGS}
        writes(conn, tenant_id, batches)


if __name__ == "__main__":
    main()
