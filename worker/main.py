"""Build a worker from settings and run it until SIGTERM (or, with --once, until idle)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pgvector.psycopg import register_vector

from shared import alerts, aws, db, errors, objectstore, queue
from shared.embedding import model as embedding
from shared.settings import WorkerSettings
from worker import metrics as worker_metrics
from worker.consumer import Consumer
from worker.handler import IngestHandler
from worker.ledger import applier as ledger
from worker.pipeline.runner import Pipeline
from worker.records.pipeline import RecordsPipeline
from worker.webhooks import dispatcher as webhooks

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("queries.sql"))


def run(settings: WorkerSettings, *, once: bool = False) -> int:
    # Reads the model's facts only (no torch, no weights): a configuration that can never work
    # stops the worker here; the weights load on the first document job (ADR 0112).
    try:
        embedder = embedding.load_embedder(
            settings.embedding_model, batch_tokens=settings.embed_batch_tokens,
            variant=settings.embedding_variant, device=settings.embedding_device,
            cache_dir=settings.embedding_cache_dir, threads=settings.torch_threads,
            forward_process=settings.embed_forward_process)
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    pool = db.sync_pool(settings.database_url, min_size=1,
                        max_size=settings.worker_max_concurrent_jobs + 1, name="worker",
                        configure=register_vector)
    pool.open(wait=True, timeout=30)
    s3 = aws.client("s3", endpoint_url=settings.aws_endpoint_url, region=settings.aws_region)
    # The read timeout must outlast a 20 s long poll.
    jobs_queue = queue.from_settings(settings, read_timeout=settings.sqs_wait_time_s + 10)

    def documents() -> Pipeline:
        _check_vector_column(pool, embedder.dim)
        return Pipeline(settings, pool, s3, embedder,
                        objectstore.open_store(settings.artifact_store_uri, s3))

    pipeline = LazyPipeline(documents)
    alerter = alerts.Alerter.from_settings(settings, "worker")
    worker_metrics.serve(settings.worker_metrics_port, settings.worker_metrics_addr, alerter)
    handler = IngestHandler(settings, pipeline, alerter,  # type: ignore[arg-type]
                            records=RecordsPipeline(settings, s3))
    consumer = Consumer(
        jobs_queue, handler,
        slots=settings.worker_max_concurrent_jobs, wait_s=settings.sqs_wait_time_s,
        visibility_s=settings.sqs_visibility_timeout_s, heartbeat_s=settings.heartbeat_interval_s,
        grace_s=settings.shutdown_grace_s, on_abort=handler.abandon,
        in_flight=documents_in_flight(settings))
    # The ledger applier runs beside the consumer (docs/decisions/0139); --once drains both.
    applier = ledger.Applier(settings) if settings.ledger_apply_enabled else None
    # Webhook delivery runs beside them too (docs/decisions/0154); --once delivers what is due.
    dispatcher = webhooks.Dispatcher(settings) if settings.webhook_dispatch_enabled else None

    def stop() -> None:
        consumer.stop()
        if applier is not None:
            applier.stop()
        if dispatcher is not None:
            dispatcher.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop())
    _report_backlog(pool, jobs_queue)
    try:
        if applier is not None:
            applier.report_start()
            if once:
                applier.drain()
            else:
                ledger.start(applier)
        if dispatcher is not None and not once:
            webhooks.start(dispatcher)
        code = consumer.run(once=once)
        if dispatcher is not None and once:
            dispatcher.drain()
        return code
    finally:
        if applier is not None:
            applier.stop()
        if dispatcher is not None:
            dispatcher.stop()
            # The thread's own connection closes with the process; an apply in progress
            # either commits or rolls back with it.
        log.info("worker stopped", extra={"jobs_handled": consumer.processed})
        alerter.close(timeout=2)
        handler.connections.close()
        pool.close()


def documents_in_flight(settings: WorkerSettings) -> int:
    """Messages a worker holds at once: its job slots, plus the documents waiting between a
    slot and their vectors (WORKER_DOCUMENTS_IN_FLIGHT, 0 = by device; docs/decisions/0301)."""
    return settings.worker_max_concurrent_jobs + (
        settings.worker_documents_in_flight
        or embedding.DEFAULT_DOCUMENTS_IN_FLIGHT[settings.embedding_device])


class LazyPipeline:
    """The document pipeline, built (embedding model loaded) on the first document job: a
    worker that only imports records never loads the model."""

    def __init__(self, build: Callable[[], Pipeline]) -> None:
        self._build = build
        self._pipeline: Pipeline | None = None
        self._lock = threading.Lock()

    def start(self, job: Any, lease: Any, abort: Any = None) -> Any:
        return self._get().start(job, lease, abort=abort)

    def _get(self) -> Pipeline:
        with self._lock:
            if self._pipeline is None:
                self._pipeline = self._build()
            return self._pipeline


def _check_vector_column(pool, dim: int) -> None:  # type: ignore[no-untyped-def]
    """Fail every document job rather than write bad vectors: the model must fit the column."""
    with pool.connection() as conn:
        row = conn.execute(Q["embedding_column_dim"]).fetchone()
    if row is None or row["dim"] != dim:
        raise errors.BadDocument(f"the embedding model makes {dim}-dim vectors but chunk_embeddings holds "
                         f"{row and row['dim']}; add a migration for the new model first.",
                                 stage="embed")


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
