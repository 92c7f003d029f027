"""Where the text leg's Postgres CPU goes, and what a covering index of postings would save
(issue 35, docs/decisions/0345).

    python bench/search_postings.py                  # 100,000 chunks, 200 queries
    python bench/search_postings.py --chunks 20000

The corpus and queries are bench/search.py's (1,000 documents of 100 chunks of 60 Zipf-drawn
words; queries of 2-3 words of Zipf ranks 50-1500). Each statement runs on one connection, the
queries one after the other, after a warm-up pass; the figure is the backend's CPU per query
(from /proc, so the machine's other work does not count), beside the load average:

- text_candidates: the gateway's keyword SQL (GIN bitmap, chunk_fts heap, bm25 <#> IDF, ADR 0225);
- matches_only: its floor: the same GIN bitmap and heap visit of every match, nothing scored;
- text_postings: the same ranking read from a covering btree of (tenant, lexeme id, chunk) →
  (version, BM25 weight), built here as a prototype (bench/search_postings.sql), with its size
  and build time, and a check that it ranks the same chunks as text_candidates.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import common  # first: sets the environment
import numpy as np  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402
from search import load, vocabulary  # noqa: E402  (the same corpus as bench/search.py)

from cli.embedded import EmbeddedPostgres  # noqa: E402
from shared import db  # noqa: E402
from shared.db import migrate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEARCH_Q = db.load_queries(ROOT / "gateway" / "search" / "queries.sql")
BENCH_Q = db.load_queries(Path(__file__).with_name("search_postings.sql"))
NO_FILTERS = {"doc_ids": None, "source_id": None, "file_type": None, "after": None,
              "before": None}
N = 100  # service.CANDIDATE_DEPTH (ADR 0310)


def backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(conn: db.Conn, sql_text: str, tenant_id: uuid.UUID, queries: list[str]
        ) -> tuple[float, dict[str, list[str]]]:
    """CPU ms per query of the backend, and each query's ranked chunk ids."""
    pid = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
    params: dict[str, Any] = {"tenant_id": tenant_id, "syntax": False, "n": N, **NO_FILTERS}
    for q in queries[:20]:  # warm: caches, catalog
        conn.execute(sql_text, {**params, "q": q}, prepare=False).fetchall()
    found: dict[str, list[str]] = {}
    before = backend_cpu(pid)
    for q in queries:
        rows = conn.execute(sql_text, {**params, "q": q}, prepare=False).fetchall()
        found[q] = [str(r.get("chunk_id", r.get("matches"))) for r in rows]
    return (backend_cpu(pid) - before) * 1000 / len(queries), found


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # a run cut short keeps its figures
    rng = np.random.default_rng(15)
    words = vocabulary(rng)
    queries = [" ".join(rng.choice(words[50:1500], size=rng.integers(2, 4)))
               for _ in range(args.queries)]
    with tempfile.TemporaryDirectory(prefix="bench-postings-") as tmp:
        pg = EmbeddedPostgres(Path(tmp) / "pg", disposable=True)
        pg.start()
        try:
            url = pg.ensure_database("bench")
            migrate.apply(url)
            with db.connect(url, autocommit=True) as conn:
                register_vector(conn)
                user = common.BenchUser(conn)
                load(conn, user.tenant_id, args.chunks, rng, words)
                conn.execute("ALTER SYSTEM SET shared_buffers = '512MB'")
            pg.stop()  # shared_buffers takes a restart
            pg.start()
            with db.connect(url, autocommit=True) as conn:
                started = time.monotonic()
                conn.execute(BENCH_Q["build_postings"])
                conn.execute(BENCH_Q["index_postings"])
                built = time.monotonic() - started
                conn.execute("VACUUM ANALYZE bench_postings")
                sizes = conn.execute(
                    "SELECT count(*) AS rows, pg_relation_size('bench_postings') AS heap, "
                    "pg_relation_size('bench_postings_term') AS idx, "
                    "pg_total_relation_size('chunk_fts') AS fts, "
                    "pg_total_relation_size('search_term_df') AS df FROM bench_postings"
                ).fetchone()
                mb = 1 << 20
                print(f"{args.chunks} chunks: postings {sizes['rows']} rows, heap "
                      f"{sizes['heap'] / mb:.0f} MB + index {sizes['idx'] / mb:.0f} MB, built in "
                      f"{built:.1f} s; for scale chunk_fts {sizes['fts'] / mb:.0f} MB with its "
                      f"indexes, search_term_df {sizes['df'] / mb:.0f} MB")
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
                for rel in ("chunk_fts", "idx_chunk_fts_gin", "search_term_df",
                            "search_term_df_pkey", "bench_postings_term"):
                    conn.execute("SELECT pg_prewarm(%s)", (rel,))
                print(f"{len(queries)} queries, one connection, backend CPU ms a query:")
                results = {}
                for name, sql_text in (("text_candidates", SEARCH_Q["text_candidates"]),
                                       ("matches_only", BENCH_Q["matches_only"]),
                                       ("text_postings", BENCH_Q["text_postings"])):
                    before = loadavg()
                    cost, results[name] = run(conn, sql_text, user.tenant_id, queries)
                    print(f"  {name:<16} {cost:6.2f}  load average {before} -> {loadavg()}")
                matches = [int(v[0]) for v in results["matches_only"].values()]
                print(f"  matches a query: mean {np.mean(matches):.0f}")
                same = sum(results["text_candidates"][q] == results["text_postings"][q]
                           for q in queries)
                print(f"  text_postings ranks the same {N} chunks as text_candidates for "
                      f"{same}/{len(queries)} queries")
        finally:
            pg.stop()


if __name__ == "__main__":
    main()
