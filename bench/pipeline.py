"""Benchmark the worker end to end, through a real `ingest worker --once` process.

    python bench/pipeline.py            # 50-page PDF, 1 MB Markdown, then a 20-document batch
    python bench/pipeline.py --quick    # a 200 KB Markdown instead of 1 MB, 10-document batch
    python bench/pipeline.py --variants # the two documents under EMBEDDING_VARIANT=torch, then
                                        # onnx-int8, back to back: chunks/s and the speed-up
    python bench/pipeline.py --small    # where one small document's time goes, step by step,
                                        # then small documents 1 vs 8 in flight (issue 27)
    python bench/pipeline.py --fleet    # 1,000 documents of ~200 words through 2 workers,
                                        # against the rate the embedding alone allows
                                        # (--fleet-docs N for fewer)
    python bench/pipeline.py --fleet --gin-pending-limit 4096
                                        # the same with the keyword index's pending list at
                                        # Postgres's default, as before migration 0100

Prints, per document: the worker's own per-stage times (read, extract, chunk, embed, index),
total, chunks/s and the share that is not embedding; then a bare SentenceTransformer.encode over
the same chunk texts in this process, for the embedding-overhead ratio. Finally the CPU use of
both cores while one worker with 3 slots drains a batch.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from pathlib import Path

import common  # first: sets the environment before boto3 and the model load
import psutil
from psycopg import sql

from cli.embedded import EmbeddedPostgres, MotoServer  # noqa: E402
from shared import aws, db, queue  # noqa: E402
from shared.db import migrate  # noqa: E402
from tests.support import documents, stack, submit  # noqa: E402


def main() -> None:
    args = _args()
    with common.stack("bench-pipeline-") as (root, pg, moto):
        _bench(args, root, pg, moto)


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--variants", action="store_true",
                        help="compare EMBEDDING_VARIANT=torch and onnx-int8 (ADR 0110)")
    parser.add_argument("--small", action="store_true",
                        help="one small document's time by step, then 1 vs 8 in flight")
    parser.add_argument("--small-docs", type=int, default=40,
                        help="documents per run of --small (default 40)")
    parser.add_argument("--fleet", action="store_true",
                        help="small documents through 2 workers vs the embedding alone")
    parser.add_argument("--fleet-docs", type=int, default=1000)
    parser.add_argument("--gin-pending-limit", type=int, default=0,
                        help="the keyword index's gin_pending_list_limit in kB for this run "
                             "(default: as migrated, 256 since migration 0100; 4096 is "
                             "Postgres's own default, as before it)")
    return parser.parse_args()


def _bench(args: argparse.Namespace, root: Path, pg: EmbeddedPostgres, moto: MotoServer) -> None:
    url = pg.ensure_database("bench")
    migrate.apply(url)
    if args.gin_pending_limit:
        with db.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER INDEX idx_chunk_fts_gin SET (gin_pending_list_limit = {})")
                         .format(sql.Literal(args.gin_pending_limit)))
    with db.connect(url, autocommit=True) as conn:
        limit = conn.execute("SELECT reloptions FROM pg_class WHERE relname = 'idx_chunk_fts_gin'"
                             ).fetchone()["reloptions"]
    print(f"keyword index options: {limit or 'defaults'}")
    sqs = aws.client("sqs", endpoint_url=moto.url, region="us-east-1")
    q_url, dlq_url = queue.ensure_queues(sqs, f"bench-{uuid.uuid4().hex[:6]}")
    jobs_queue = queue.Queue(sqs, q_url, dlq_url)
    env = {"DATABASE_URL": url, "AWS_ENDPOINT_URL": moto.url, "SQS_QUEUE_URL": q_url,
           "SQS_DLQ_URL": dlq_url, "ARTIFACT_STORE_URI": (root / "artifacts").as_uri(),
           "UPLOAD_STORE_URI": (root / "uploads").as_uri(),
           "SQS_WAIT_TIME_S": "1", "WORKER_MAX_CONCURRENT_JOBS": "3",
           # Workers get exactly this environment (tests/support/stack.py builds it from scratch).
           **stack.MOTO_ENV, **stack.OFFLINE_ENV}
    store = root / "uploads"
    markdown = documents.make_large_markdown(200_000 if args.quick else 1_000_000)
    pdf = documents.make_pdf([documents.prose(400, seed=i) for i in range(50)])
    with db.connect(url, autocommit=True) as conn:
        user = common.BenchUser(conn)
        if args.small or args.fleet:
            import pipeline_small  # the small-document figures of issue 27

            bench = pipeline_small.SmallBench(url, moto, root, jobs_queue, conn, user, env)
            if args.small:
                bench.breakdown(min(20, args.small_docs))
                bench.in_flight(args.small_docs)
            if args.fleet:
                bench.fleet(args.fleet_docs)
            return
        if args.variants:
            _compare_variants(conn, jobs_queue, store, user, env, root,
                              {"report-50p.pdf": pdf, "handbook-1mb.md": markdown})
            return
        for name, data in (("report-50p.pdf", pdf), ("handbook-1mb.md", markdown)):
            job = submit.submit(conn, jobs_queue, store, user, data, name=name)
            _drain(env, root)
            _report_document(conn, name, job.run_id)
        _report_batch(conn, jobs_queue, store, user, env, root, 10 if args.quick else 20)


def _compare_variants(conn, jobs_queue, store: Path, user, env: dict[str, str],  # type: ignore[no-untyped-def]
                      root: Path, files: dict[str, bytes], rounds: int = 2) -> None:
    """Each document through a real worker per variant, torch and onnx-int8 interleaved per
    document and repeated: on a shared machine the load changes by the minute, and a pair run
    back to back sees about the same load."""
    ratios: dict[str, list[tuple[float, float]]] = {name: [] for name in files}
    for round_ in range(1, rounds + 1):
        for name, data in files.items():
            rate = {}
            for variant in ("torch", "onnx-int8"):
                rate[variant] = _variant_run(conn, jobs_queue, store, user, env, root, variant,
                                             name, data, round_)
            ratios[name].append((rate["onnx-int8"][0] / rate["torch"][0],
                                 rate["onnx-int8"][1] / rate["torch"][1]))
    for name, pairs in ratios.items():
        print(f"speed-up onnx-int8 / torch, {name}, per pair: "
              + ", ".join(f"embed {e:.2f}x / pipeline {t:.2f}x" for e, t in pairs)
              + " (target >= 1.6x)")


def _variant_run(conn, jobs_queue, store: Path, user, env: dict[str, str], root: Path,  # type: ignore[no-untyped-def]
                 variant: str, name: str, data: bytes, round_: int) -> tuple[float, float]:
    # The ONNX export happens once, on the first job, before the stage clocks start.
    variant_env = {**env, "EMBEDDING_VARIANT": variant, "EMBEDDING_CACHE_DIR": str(root / "models")}
    load_before = os.getloadavg()[0]
    job = submit.submit(conn, jobs_queue, store, user, data + f"\n{variant} {round_}\n".encode()
                        if name.endswith(".md") else data, name=f"{variant}-{round_}-{name}")
    _drain(variant_env, root)
    run = submit.run_row(conn, job.run_id)
    if run["status"] != "succeeded":
        raise SystemExit(f"{variant} {name}: run {run['status']}: {run['error']}")
    stats, stages = run["stats"], run["stats"]["stages"]
    chunks = stats["chunks_created"]
    embed_rate = chunks / (stages["embed_ms"] / 1000)
    total_rate = chunks / (sum(stages.values()) / 1000)
    recorded = conn.execute("SELECT embedding_variant FROM document_versions WHERE run_id = %s",
                            (job.run_id,)).fetchone()["embedding_variant"]
    print(f"round {round_} {variant:<9} {name}: {chunks} chunks, embed {embed_rate:.1f} "
          f"chunks/s, whole pipeline {total_rate:.1f} chunks/s (recorded variant {recorded}; "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after)")
    return embed_rate, total_rate


def _drain(env: dict[str, str], root: Path) -> float:
    started = time.monotonic()
    worker = stack.spawn("bench-worker", ["worker", "--once"], env, root / "logs")
    if worker.proc.wait(3600) != 0:
        raise SystemExit(f"worker failed:\n{worker.logs()[-3000:]}")
    return time.monotonic() - started


def _report_document(conn, name: str, run_id: uuid.UUID) -> None:  # type: ignore[no-untyped-def]
    run = submit.run_row(conn, run_id)
    if run["status"] != "succeeded":
        raise SystemExit(f"{name}: run {run['status']}: {run['error']}")
    stats = run["stats"]
    stages = stats["stages"]
    total_s = sum(stages.values()) / 1000
    chunks = stats["chunks_created"]
    print(f"{name}: {chunks} chunks, {stats['tokens_total']} tokens, pages={stats['pages']}")
    for stage in ("read_ms", "extract_ms", "chunk_ms", "embed_ms", "index_ms"):
        print(f"  {stage[:-3]:<10} {stages[stage] / 1000:8.3f} s")
    print(f"  {'total':<10} {total_s:8.3f} s   {chunks / total_s:.1f} chunks/s")
    print(f"  not embedding {100 * (1 - stages['embed_ms'] / 1000 / total_s):.1f} % of total "
          "(target < 15 %)")
    texts = [r["text"] for r in conn.execute(
        "SELECT c.text FROM chunks c JOIN document_versions v USING (doc_version_id) "
        "WHERE v.run_id = %s ORDER BY c.ordinal", (run_id,)).fetchall()]
    bare_s = _bare_encode(texts)
    ratio = (chunks / (stages["embed_ms"] / 1000)) / (chunks / bare_s)
    print(f"  embed in worker {chunks / (stages['embed_ms'] / 1000):.1f} chunks/s, bare "
          f"SentenceTransformer.encode {chunks / bare_s:.1f} chunks/s, ratio {ratio:.3f} "
          "(target ≥ 0.90)")


_MODEL = None


def _bare_encode(texts: list[str]) -> float:
    global _MODEL
    import torch
    from sentence_transformers import SentenceTransformer

    from shared.embedding import model as embed

    torch.set_num_threads(os.cpu_count() or 1)
    if _MODEL is None:
        _MODEL = SentenceTransformer(str(embed.model_path(embed.DEFAULT_MODEL)), device="cpu")
    started = time.monotonic()
    _MODEL.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
    return time.monotonic() - started


def _report_batch(conn, jobs_queue, store: Path, user, env: dict[str, str], root: Path,  # type: ignore[no-untyped-def]
                  count: int) -> None:
    for i in range(count):
        data = documents.make_markdown(3) + f"\n\nDocument {i}.\n".encode()
        submit.submit(conn, jobs_queue, store, user, data, name=f"batch-{i}.md")
    started = time.monotonic()
    worker = stack.spawn("bench-batch", ["worker", "--once"], env, root / "logs")
    # Loading torch and the model is single-threaded start-up, not batch work: sample after it.
    stack.wait_for_log(worker, '"event":"worker started"', timeout=300)
    loaded = time.monotonic()
    psutil.cpu_percent(percpu=True)
    samples = []
    while worker.proc.poll() is None:
        samples.append(psutil.cpu_percent(interval=0.5, percpu=True))
    wall, load_s = time.monotonic() - loaded, loaded - started
    busy = [sum(core) / len(samples) for core in zip(*samples, strict=True)] if samples else []
    done = conn.execute("SELECT count(*) AS n FROM ingestion_runs WHERE status = 'succeeded' "
                        "AND config->>'original_filename' LIKE 'batch-%%'").fetchone()["n"]
    print(f"batch of {count} documents, 1 worker x 3 slots: {done} succeeded in {wall:.1f} s "
          f"after a {load_s:.1f} s start-up")
    print("  cpu busy per core over the batch: " + ", ".join(f"{b:.0f} %" for b in busy))


if __name__ == "__main__":
    main()
