"""Build a worker from settings and run it until SIGTERM (or, with --once, until idle)."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

from pgvector.psycopg import register_vector

from shared import alerts, aws, db, objectstore, queue
from shared.settings import WorkerSettings
from worker import metrics as worker_metrics
from worker.consumer import Consumer
from worker.handler import IngestHandler
from worker.pipeline import embed
from worker.pipeline.runner import Pipeline

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("queries.sql"))


def run(settings: WorkerSettings, *, once: bool = False) -> int:
    # Reads the model's facts only; the weights load on the first document job (ADR 0112).
    try:
        embedder = embed.load_embedder(
            settings.embedding_model, batch_size=settings.embed_batch_size,
            variant=settings.embedding_variant, device=settings.embedding_device,
            cache_dir=settings.embedding_cache_dir, threads=settings.torch_threads)
    except ValueError as exc:  # a configuration that can never work: say so and stop
        raise SystemExit(str(exc)) from exc
    pool = db.sync_pool(settings.database_url, min_size=1,
                        max_size=settings.worker_max_concurrent_jobs + 1, name="worker",
                        configure=register_vector)
    pool.open(wait=True, timeout=30)
    _check_vector_column(pool, embedder.dim)
    s3 = aws.client("s3", endpoint_url=settings.aws_endpoint_url, region=settings.aws_region)
    # The read timeout must outlast a 20 s long poll.
    jobs_queue = queue.from_settings(settings, read_timeout=settings.sqs_wait_time_s + 10)
    pipeline = Pipeline(settings, pool, s3, embedder,
                        objectstore.open_store(settings.artifact_store_uri, s3))
    alerter = alerts.Alerter.from_settings(settings, "worker")
    worker_metrics.serve(settings.worker_metrics_port, settings.worker_metrics_addr, alerter)
    handler = IngestHandler(settings, pipeline, alerter)
    consumer = Consumer(
        jobs_queue, handler,
        slots=settings.worker_max_concurrent_jobs, wait_s=settings.sqs_wait_time_s,
        visibility_s=settings.sqs_visibility_timeout_s, heartbeat_s=settings.heartbeat_interval_s,
        grace_s=settings.shutdown_grace_s, on_abort=handler.abandon)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: consumer.stop())
    _report_backlog(pool, jobs_queue)
    try:
        return consumer.run(once=once)
    finally:
        log.info("worker stopped", extra={"jobs_handled": consumer.processed})
        alerter.close(timeout=2)
        pool.close()


def _check_vector_column(pool, dim: int) -> None:  # type: ignore[no-untyped-def]
    """Refuse to start rather than fail every job: the model must fit the vector column."""
    with pool.connection() as conn:
        row = conn.execute(Q["embedding_column_dim"]).fetchone()
    if row is None or row["dim"] != dim:
        raise SystemExit(f"the embedding model makes {dim}-dim vectors but chunk_embeddings holds "
                         f"{row and row['dim']}; add a migration for the new model first")


def _report_backlog(pool, jobs_queue: queue.Queue) -> None:  # type: ignore[no-untyped-def]
    """One line at start with what is waiting (event-ledger.md, boot-time rehydration)."""
    with pool.connection() as conn:
        backlog = conn.execute(Q["backlog"]).fetchone() or {}
    dead = None
    if jobs_queue.dlq_url:
        try:
            dead = jobs_queue.depth(url=jobs_queue.dlq_url)["visible"]
        except Exception as exc:  # noqa: BLE001 - a report, not a reason to stop
            log.warning("could not read the dead-letter queue depth", extra={"error": str(exc)})
    log.info("worker started", extra={
        "queued": backlog.get("queued"), "running": backlog.get("running"),
        "oldest_queued_s": round(float(backlog["oldest_queued_s"]), 1)
        if backlog.get("oldest_queued_s") is not None else None,
        "dead_letters": dead})
