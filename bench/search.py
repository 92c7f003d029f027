"""Search latency and throughput over 100,000 chunks, per mode, at 1 and 8 concurrent clients
through the gateway.

    python bench/search.py                      # 100,000 chunks, 1 and 8 clients, 400 queries
    python bench/search.py --chunks 20000 --queries 200 --clients 1 4 8

The chunks are written straight into Postgres (not through a worker: embedding 100,000 real
chunks would take an hour here): 1,000 active documents of 100 chunks, each chunk 60 words
drawn from a Zipf-distributed vocabulary, each with a random unit vector, its tsvector, and
the migration's HNSW index built over them. Queries are 2-3 vocabulary words and go through a
real gateway process (HTTP, auth, query embedding by the model, SQL), k = 10. Prints queries/s
and p50/p95 per mode and client count (each run on queries of its own, so the gateway's query
cache never answers a repeat), the ratio of the highest client count's queries/s to the
lowest's, the load average of the machine around each run, the CPU milliseconds a query
took in the gateway, in Postgres and in this client (which, unlike latency, do not depend on
what else runs on the machine), and the vector query's plan.
Targets: hybrid p95 under 100 ms (issues 15, 26), under 150 ms at 8 clients and 8 clients
at ≥ 3× one client's queries/s (issue 35; ADR 0313 says why 2 cores stop near 3×). Text mode is BM25 over any of the query's
words (ADR 0220), so common words match many chunks: the bench prints the keyword query's plan
and time at this size, and the keyword SQL alone from 8 connections beside its honest baseline
(bench/search_baseline.sql: df counted on the GIN bitmap, every match scored), with a check that
both rank the same chunks (ADR 0225).

--pending-docs N writes the last N documents' keyword rows after the VACUUM, as workers write
them, so searches meet the keyword index's pending list as it is between merges (ADR 0344;
--gin-pending-limit 4096 gives the index Postgres's default limit, as before migration 0100).

Postgres runs with shared_buffers = 512MB (--shared-buffers), room for the 195 MB HNSW index
and the 156 MB of vectors, as docs/operations.md asks of a production server; the versions
are recorded as made by EMBEDDING_VARIANT onnx-int8, the variant the gateway embeds queries
with (docs/decisions/0158).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import common  # first: sets the environment before boto3 and the model load
import httpx  # noqa: E402
import numpy as np  # noqa: E402
import orjson  # noqa: E402
from pgvector import HalfVector  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402
from psycopg import sql  # noqa: E402

from cli.embedded import EmbeddedPostgres, MotoServer  # noqa: E402
from gateway import auth  # noqa: E402
from gateway.search import service  # noqa: E402
from shared import aws, db, queue  # noqa: E402
from shared.db import migrate  # noqa: E402
from shared.settings import DEFAULT_EMBEDDING_MODEL  # noqa: E402
from tests.support import stack  # noqa: E402

CHUNKS_PER_DOC = 100
WORDS_PER_CHUNK = 60
MODES = ("text", "vector", "hybrid")
VARIANT = "onnx-int8"  # the default EMBEDDING_VARIANT: versions and queries both


def vocabulary(rng: np.random.Generator, size: int = 5000) -> list[str]:
    syllables = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables, size=rng.integers(2, 4))))
    return sorted(words)


def load(conn: db.Conn, tenant_id: uuid.UUID, chunks: int, rng: np.random.Generator,
         words: list[str], pending_docs: int = 0) -> None:
    """``pending_docs``: the last documents' keyword rows are written after the VACUUM, one
    version a transaction by the worker's own statement, so they stay in the keyword index's
    pending list as workers leave them (ADR 0344); the others are merged by the VACUUM."""
    docs = max(1, chunks // CHUNKS_PER_DOC)
    versions = []
    zipf = 1.0 / np.arange(1, len(words) + 1)
    zipf /= zipf.sum()
    conn.execute("DROP INDEX idx_chunk_embeddings_hnsw")  # built once after the load: faster
    with conn.transaction():
        for d in range(docs):
            doc_id, version_id = uuid.uuid4(), uuid.uuid4()
            conn.execute("INSERT INTO documents (doc_id, tenant_id, source_type, source_uri, "
                         "title) VALUES (%s, %s, 'md', %s, %s)",
                         (doc_id, tenant_id, f"upload://sha256:{doc_id.hex}", f"doc {d}"))
            conn.execute("INSERT INTO document_versions (doc_version_id, tenant_id, doc_id, "
                         "version_number, content_hash, embedding_model, embedding_variant, "
                         "embedding_dim, chunk_count) VALUES (%s, %s, %s, 1, %s, %s, %s, 384, %s)",
                         (version_id, tenant_id, doc_id, f"sha256:{doc_id.hex}",
                          DEFAULT_EMBEDDING_MODEL, VARIANT, CHUNKS_PER_DOC))
            versions.append(version_id)
            ids = [uuid.uuid4() for _ in range(CHUNKS_PER_DOC)]
            picks = rng.choice(len(words), size=(CHUNKS_PER_DOC, WORDS_PER_CHUNK), p=zipf)
            vectors = rng.standard_normal((CHUNKS_PER_DOC, 384)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            with conn.cursor().copy("COPY chunks (chunk_id, tenant_id, doc_version_id, ordinal, "
                                    "text, token_count, char_start, char_end) FROM STDIN") as cp:
                for i, chunk_id in enumerate(ids):
                    text = " ".join(words[w] for w in picks[i])
                    cp.write_row((chunk_id, tenant_id, version_id, i, text, WORDS_PER_CHUNK,
                                  0, len(text)))
            with conn.cursor().copy("COPY chunk_embeddings (chunk_id, tenant_id, doc_version_id, "
                                    "embedding) FROM STDIN WITH (FORMAT BINARY)") as cp:
                cp.set_types(["uuid", "uuid", "uuid", "halfvec"])  # migration 0024
                for chunk_id, vector in zip(ids, vectors, strict=True):
                    cp.write_row((chunk_id, tenant_id, version_id, HalfVector(vector)))
        # Postgres fills the bm25 column (migration 0055) from tsv, as for the workers' rows.
        late = versions[len(versions) - pending_docs:] if pending_docs else []
        conn.execute("INSERT INTO chunk_fts (chunk_id, tenant_id, doc_version_id, tsv) "
                     "SELECT chunk_id, tenant_id, doc_version_id, to_tsvector('english', text) "
                     "FROM chunks WHERE doc_version_id <> ALL(%s)", (late,))
    conn.execute("SET maintenance_work_mem = '512MB'")
    conn.execute("CREATE INDEX idx_chunk_embeddings_hnsw ON chunk_embeddings "
                 "USING hnsw (embedding halfvec_cosine_ops) WITH (m = 16, ef_construction = 64)")
    conn.execute("VACUUM ANALYZE")  # search_term_df (migration 0056) read index-only
    for version_id in late:
        with conn.transaction():
            conn.execute(WORKER_Q["insert_fts"], {"tenant_id": tenant_id, "config": "english",
                                                  "doc_version_id": version_id})
    if late:
        conn.execute("ANALYZE")  # a manual ANALYZE leaves the pending list as it is
        row = conn.execute("SELECT n_pending_pages FROM gin_metapage_info(get_raw_page("
                           "'idx_chunk_fts_gin', 0))").fetchone()
        print(f"keyword rows of the last {len(late)} documents written as the worker writes "
              f"them: {row['n_pending_pages'] if row else '?'} pages pending in "
              f"idx_chunk_fts_gin")


NO_FILTERS = {"doc_ids": None, "source_id": None, "file_type": None, "after": None,
              "before": None}


def plan(conn: db.Conn, tenant_id: uuid.UUID) -> str:
    vector = "[" + ",".join(["0.051"] * 384) + "]"
    rows = conn.execute("EXPLAIN " + service.Q["vector_candidates"], {
        "tenant_id": tenant_id, "vector": vector, "model": DEFAULT_EMBEDDING_MODEL, "n": 40,
        **NO_FILTERS}).fetchall()
    return "\n".join(r["QUERY PLAN"] for r in rows)


WORKER_Q = db.load_queries(common.ROOT / "worker" / "queries.sql")
BASELINE = db.load_queries(Path(__file__).with_name("search_baseline.sql"))["bm25_every_match"]


def keyword_sql(url: str, tenant_id: uuid.UUID, queries: list[str], clients: int,
                sql_text: str, n: int) -> tuple[list[float], dict[str, list[str]]]:
    """The keyword query alone, straight to Postgres from `clients` threads, one connection
    each: its latencies (ms) and the chunk ids it ranked per query."""
    pending = list(queries)
    latencies: list[float] = []
    found: dict[str, list[str]] = {}
    lock = threading.Lock()

    def client() -> None:
        with db.connect(url, autocommit=True) as conn:
            while True:
                with lock:
                    if not pending:
                        return
                    q = pending.pop()
                started = time.perf_counter()
                rows = conn.execute(sql_text, {"tenant_id": tenant_id, "q": q, "syntax": False,
                                               "n": n, **NO_FILTERS}, prepare=False).fetchall()
                with lock:
                    latencies.append((time.perf_counter() - started) * 1000)
                    found[q] = [str(r["chunk_id"]) for r in rows]

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, found


def compare_keyword(url: str, tenant_id: uuid.UUID, queries: list[str], clients: int) -> None:
    """The honest baseline (bench/search_baseline.sql: BM25 scoring every match) beside the
    gateway's keyword query (ADR 0225), same queries, same connections, same n as a search of
    k = 10 grouped by document asks (100); the two rankings must be equal."""
    n = service.SearchRequest(q="x").pool_size
    print(f"keyword SQL alone, n = {n}, {clients} concurrent connections, {len(queries)} "
          f"queries (ms):")
    results = {}
    for name, sql_text in (("baseline (every match scored)", BASELINE),
                           ("text_candidates (pruned)", service.Q["text_candidates"])):
        before = _loadavg()
        lat, results[name] = keyword_sql(url, tenant_id, queries, clients, sql_text, n)
        print(f"  {name:<30} p50 {p(lat, 50):6.1f}  p95 {p(lat, 95):6.1f}  "
              f"mean {statistics.mean(lat):6.1f}  load average {before} -> {_loadavg()}")
    first, second = results.values()
    print(f"  rankings equal for {sum(first[q] == second[q] for q in first)}/{len(first)} queries")


def components(url: str, pg: EmbeddedPostgres, tenant_id: uuid.UUID, queries: list[str],
               clients: int) -> None:
    """CPU ms a hybrid query spends in each of its parts, measured apart (issue 35): the query
    embedding (one thread, as the gateway's; alone at 1 client, in batches of ``clients`` as
    its micro-batches at that many), the text leg's SQL, the vector leg's, the hits SQL
    (Postgres's CPU, every backend, plus this process's as the driver), fusion and the JSON of
    a response (this process). What the gateway spends beyond these (HTTP, auth, Litestar, the
    pool, its asyncio driver) is its measured CPU a query minus them."""
    from gateway.search.embedding import model_loader

    encoder = model_loader(variant=VARIANT, cache_dir=str(common.ROOT / ".ingest" / "models"),
                           threads=1)(DEFAULT_EMBEDDING_MODEL)
    encoder.encode(queries[:8])  # warm
    n = service.SearchRequest(q="x").pool_size
    ef = str(min(service.MAX_EF_SEARCH, max(service.MIN_EF_SEARCH, n)))
    cost: dict[str, float] = {}
    started = time.process_time()
    vectors = [v for at in range(0, len(queries), clients)
               for v in encoder.encode(queries[at:at + clients])]
    cost[f"query embedding (batches of {clients})"] = time.process_time() - started
    literals = ["[" + ",".join(f"{x:.7g}" for x in v) + "]" for v in vectors]
    found: dict[str, list[list[Any]]] = {"text": [[] for _ in queries],
                                         "vector": [[] for _ in queries]}

    # As the gateway runs them (service.candidates): prepared, planned for each execution.
    def text(conn: db.Conn, i: int) -> None:
        with conn.transaction():
            conn.execute(service.Q["search_settings"], {"ef_search": ef})
            found["text"][i] = conn.execute(service.Q["text_candidates"], {
                "tenant_id": tenant_id, "q": queries[i], "syntax": False, "n": n,
                **NO_FILTERS}, prepare=True).fetchall()

    def vector(conn: db.Conn, i: int) -> None:
        with conn.transaction():
            conn.execute(service.Q["search_settings"], {"ef_search": ef})
            found["vector"][i] = conn.execute(service.Q["vector_candidates"], {
                "tenant_id": tenant_id, "vector": literals[i], "model": DEFAULT_EMBEDDING_MODEL,
                "n": n, **NO_FILTERS}, prepare=True).fetchall()

    fused: list[list[service.Fused]] = []
    shown: list[list[Any]] = []

    def hits(conn: db.Conn, i: int) -> None:
        ids = [c.chunk_id for f in fused[i] for c in (f, *f.others)]
        shown[i] = conn.execute(service.Q["hits"], {"tenant_id": tenant_id, "q": queries[i],
                                                    "syntax": False, "chunk_ids": ids}
                                ).fetchall()

    def sql_part(name: str, run: Any) -> None:
        pending = list(range(len(queries)))
        lock = threading.Lock()

        def client(conn: db.Conn) -> None:
            while True:
                with lock:
                    if not pending:
                        return
                    i = pending.pop()
                run(conn, i)

        # Connections open across the measurement: a backend's CPU leaves /proc when it exits.
        conns = [db.connect(url, autocommit=True) for _ in range(clients)]
        try:
            server, mine = _server_cpu(pg), time.process_time()
            threads = [threading.Thread(target=client, args=(c,)) for c in conns]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            cost[f"{name}: postgres"] = _server_cpu(pg) - server
            cost[f"{name}: driver (psycopg, here)"] = time.process_time() - mine
        finally:
            for c in conns:
                c.close()

    sql_part("text leg SQL", text)
    sql_part("vector leg SQL", vector)
    started = time.process_time()
    for t_rows, v_rows in zip(found["text"], found["vector"], strict=True):
        fused.append(service.fuse([(r["chunk_id"], r["doc_id"]) for r in t_rows],
                                  [(r["chunk_id"], r["doc_id"]) for r in v_rows], k=10,
                                  group="document",
                                  text_score={r["chunk_id"]: float(r["score"]) for r in t_rows},
                                  distance={r["chunk_id"]: float(r["distance"])
                                            for r in v_rows}))
    cost["fusion (service.fuse, k = 10 by document)"] = time.process_time() - started
    shown.extend([] for _ in queries)
    sql_part("hits SQL", hits)
    started = time.process_time()
    for rows in shown:
        orjson.dumps({"hits": [{**r, "chunk_id": str(r["chunk_id"]), "doc_id": str(r["doc_id"]),
                                "parent_doc_id": None} for r in rows]}, default=str)
    cost["JSON of the response (orjson)"] = time.process_time() - started
    print(f"a hybrid query's parts apart, {len(queries)} queries, {clients} at a time, CPU ms a "
          f"query (load average {_loadavg()}):")
    for name, seconds in cost.items():
        print(f"  {name:<48} {seconds * 1000 / len(queries):6.2f}")
    print(f"  {'sum':<48} {sum(cost.values()) * 1000 / len(queries):6.2f}")


def text_plan(conn: db.Conn, tenant_id: uuid.UUID, q: str) -> str:
    """How the BM25 query (ADR 0220) finds its chunks: the scan of chunk_fts, with its timing."""
    rows = conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + service.Q["text_candidates"], {
        "tenant_id": tenant_id, "q": q, "syntax": False, "n": 40, **NO_FILTERS},
        prepare=False).fetchall()
    lines = [r["QUERY PLAN"] for r in rows]
    keep = [line for line in lines if "chunk_fts" in line or "Time" in line
            or "idx_chunk_fts" in line]
    return "\n".join(keep)


async def measure(url: str, token: str, queries: list[str], mode: str,
                  clients: int) -> tuple[list[float], float]:
    """Each query's latency (ms) and the wall time (s) of the whole run at ``clients``."""
    pending = list(queries)
    latencies: list[float] = []

    async def client() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60,
                                     headers={"Authorization": f"Bearer {token}"}) as http:
            while pending:
                q = pending.pop()
                started = time.perf_counter()
                response = await http.get("/v1/search", params={"q": q, "k": 10, "mode": mode})
                latencies.append((time.perf_counter() - started) * 1000)
                response.raise_for_status()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, time.perf_counter() - started


def _loadavg() -> str:
    """The 1-minute load average: the 2 cores are shared, so each number needs it beside it."""
    return Path("/proc/loadavg").read_text().split()[0]


def _cpu_seconds(gateway_pid: int, pg: EmbeddedPostgres) -> tuple[float, float, float]:
    """CPU seconds used so far by the gateway, the Postgres server (every backend), and this
    process: unlike latency, they do not depend on what else the machine runs."""
    postmaster = int((pg.data_dir / "postmaster.pid").read_text().split()[0])
    server = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                pid, parent, used = _proc_stat(entry)
            except OSError:  # gone meanwhile
                continue
            if postmaster in (pid, parent):
                server += used
    return _proc_stat(Path(f"/proc/{gateway_pid}"))[2], server, time.process_time()


def _server_cpu(pg: EmbeddedPostgres) -> float:
    """CPU seconds used so far by the Postgres server, every backend."""
    return _cpu_seconds(os.getpid(), pg)[1]


def _proc_stat(entry: Path) -> tuple[int, int, float]:
    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
    return int(entry.name), int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf(
        "SC_CLK_TCK")


def _start_gateway(env: dict[str, str], root: Path) -> stack.Process:
    """The gateway, tried three times: on a machine this loaded, its start-up can outlast the
    harness's 60 s wait (it imports the app and freezes its heap), which says nothing of
    search."""
    for attempt in range(3):
        try:
            return stack.start_gateway(env, root, name=f"gateway-{attempt}")
        except RuntimeError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8],
                        help="client counts to measure, each on fresh queries (default 1 8)")
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--shared-buffers", default="512MB",
                        help="Postgres shared_buffers (its default, 128MB, holds less than the index)")
    parser.add_argument("--pending-docs", type=int, default=0,
                        help="documents whose keyword rows stay pending, as workers leave them "
                             "between merges (ADR 0344; 40 fill the 4 MB default)")
    parser.add_argument("--gin-pending-limit", type=int,
                        help="the keyword index's gin_pending_list_limit in kB (default: as "
                             "migrated, 256; 4096 is Postgres's default, before migration 0100)")
    args = parser.parse_args()
    rng = np.random.default_rng(15)
    words = vocabulary(rng)
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        root = Path(tmp)
        pg, moto = EmbeddedPostgres(root / "pg", disposable=True), MotoServer()
        pg.start()
        moto_url = moto.start()
        gateway = None
        try:
            url = pg.ensure_database("bench")
            migrate.apply(url)
            with db.connect(url, autocommit=True) as conn:
                register_vector(conn)
                user = common.BenchUser(conn)
                started = time.monotonic()
                conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")  # the pending pages
                if args.pending_docs:  # the pending list stays as the writes leave it
                    conn.execute("ALTER TABLE chunk_fts SET (autovacuum_enabled = false)")
                if args.gin_pending_limit:
                    conn.execute(sql.SQL("ALTER INDEX idx_chunk_fts_gin SET "
                                         "(gin_pending_list_limit = {})").format(
                                             sql.Literal(args.gin_pending_limit)))
                load(conn, user.tenant_id, args.chunks, rng, words, args.pending_docs)
                print(f"loaded {args.chunks} chunks with vectors, tsvectors and the HNSW index "
                      f"in {time.monotonic() - started:.0f} s")
                print("vector query plan:\n  " + plan(conn, user.tenant_id).replace("\n", "\n  "))
                sample = " ".join(words[100:103])
                print(f"keyword (BM25) query for {sample!r}, its scans and times:\n  "
                      + text_plan(conn, user.tenant_id, sample).replace("\n", "\n  "))
                conn.execute(sql.SQL("ALTER SYSTEM SET shared_buffers = {}").format(
                    sql.Literal(args.shared_buffers)))
            pg.stop()  # shared_buffers takes a restart
            pg.start()
            # Common words, as people search: Zipf ranks 50-1500, 2 or 3 of them. Every run
            # (mode x clients) gets queries of its own: a query seen before may be answered
            # from the gateway's cache, which would flatter the later runs.
            runs = [(mode, clients) for clients in args.clients for mode in MODES]
            query_sets = [[" ".join(rng.choice(words[50:1500], size=rng.integers(2, 4)))
                           for _ in range(args.queries)] for _ in range(len(runs) + 1)]
            compare_keyword(url, user.tenant_id, query_sets[-1], max(args.clients))
            for clients in args.clients:
                components(url, pg, user.tenant_id, query_sets[-1], clients)
            sqs = aws.client("sqs", endpoint_url=moto_url, region="us-east-1")
            queue_url, dlq_url = queue.ensure_queues(sqs, "bench-search")
            env = {"DATABASE_URL": url, "AWS_ENDPOINT_URL": moto_url, "SQS_QUEUE_URL": queue_url,
                   "SQS_DLQ_URL": dlq_url, "UPLOAD_STORE_URI": (root / "up").as_uri(),
                   "JWT_SECRET": stack.TEST_JWT_SECRET, "METRICS_TOKEN": "bench-" + "m" * 20,
                   "LOG_LEVEL": "WARNING", "DB_POOL_MAX": "10", "EMBEDDING_VARIANT": VARIANT,
                   # The ONNX export is made on the first query and kept for the next runs.
                   "EMBEDDING_CACHE_DIR": str(common.ROOT / ".ingest" / "models"),
                   **stack.MOTO_ENV,
                   **stack.OFFLINE_ENV}
            gateway = _start_gateway(env, root)
            common.wait_ready(gateway.url)  # its query model loads as it starts (ADR 0321)
            token = auth.issue_token(auth.Principal(user.user_id, user.tenant_id, "admin"),
                                     stack.TEST_JWT_SECRET, 2)
            warm = [" ".join(rng.choice(words[50:1500], size=3)) for _ in range(20)]
            asyncio.run(measure(gateway.url, token, warm, "hybrid", 2))  # the model loads
            print(f"k = 10, {args.queries} queries per mode and client count, each run its own "
                  f"queries (ms, client-side, through the gateway):")
            rates: dict[tuple[str, int], float] = {}
            for (mode, clients), queries in zip(runs, query_sets, strict=False):
                before, cpu = _loadavg(), _cpu_seconds(gateway.proc.pid, pg)
                lat, wall = asyncio.run(measure(gateway.url, token, queries, mode, clients))
                used = [(b - a) * 1000 / len(lat) for a, b in
                        zip(cpu, _cpu_seconds(gateway.proc.pid, pg), strict=True)]
                rates[mode, clients] = len(lat) / wall
                print(f"  {mode:<7} clients {clients:<2} {rates[mode, clients]:6.1f} queries/s  "
                      f"p50 {p(lat, 50):6.1f}  p95 {p(lat, 95):6.1f}  "
                      f"mean {statistics.mean(lat):6.1f}  n={len(lat)}  "
                      f"load average {before} -> {_loadavg()}  CPU ms a query: gateway "
                      f"{used[0]:.1f}, postgres {used[1]:.1f}, this client {used[2]:.1f}")
            low, high = min(args.clients), max(args.clients)
            if low != high:
                for mode in MODES:
                    print(f"  {mode}: {high} clients / {low} = "
                          f"{rates[mode, high] / rates[mode, low]:.2f}x the queries/s")
        finally:
            if gateway:
                gateway.stop()
            moto.stop()
            pg.stop()


if __name__ == "__main__":
    main()
