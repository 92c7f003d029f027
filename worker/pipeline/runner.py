"""Run the stages of one job in order — read, extract, chunk, embed, index — timing each.

Stages are plain functions; this module owns what surrounds them: progress for the people
watching, lease checks so a job that lost its run stops, transient retries, the artifact, and
removing the raw upload once the content is committed.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import numpy as np
import orjson

from shared import db, errors, jobs, objectstore, retry
from shared.embedding import model as embedding
from shared.settings import WorkerSettings
from worker import runs
from worker.pipeline import attachments, chunk, embed, extract, index, parsers, read, writes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PipelineResult:
    doc_version_id: UUID
    version_number: int
    stats: dict[str, Any]


class Pipeline:
    def __init__(self, settings: WorkerSettings, pool: db.Pool, s3: Any,
                 embedder: embedding.Embedder,
                 artifact_store: objectstore.FileStore | objectstore.S3Store,
                 fts_config: str = "english") -> None:
        self.settings = settings
        self.pool = pool
        self.s3 = s3
        self.embedder = embedder
        self.artifacts = artifact_store
        self.fts_config = fts_config
        self.chunker = chunk.Chunker(
            embedder.tokenizer, target_tokens=settings.chunk_target_tokens,
            max_tokens=settings.chunk_max_tokens, model_max_tokens=embedder.max_seq_length,
            min_tokens=settings.chunk_min_tokens)
        # One model per process, shared by every slot through one queue: the chunks of all
        # documents in flight go through the same forward passes (ADR 0230).
        self.embeds = embed.EmbedQueue(embedder, capacity_tokens=settings.embed_queue_tokens)
        # And one writer: the documents ready at once are committed together (ADR 0233).
        self.writer = writes.GroupWriter(pool, fts_config=fts_config)
        # The tokenizers are not safe to share between concurrent calls.
        self._chunk_lock = threading.Lock()

    def run(self, job: jobs.IngestJob, lease: runs.RunLease,
            abort: threading.Event | None = None) -> PipelineResult:
        self._check_model(job)
        # Lazily, on the first document job, and before any stage's clock starts: a process that
        # never runs one never loads the model (ADR 0112).
        self.embedder.load()
        timings = lease.timings  # the lease stores them with its attempt (ADR 0100)
        step = _Stepper(lease, abort, timings, self._pause_point())
        step.enter("read", 0.02)
        read_started = time.monotonic()
        with read.open_upload(read.confined_upload(job, self.settings.upload_store_uri),
                              self.s3) as path, tempfile.TemporaryDirectory(
                                  prefix="attachments-") as kept:
            timings["read_ms"] = round((time.monotonic() - read_started) * 1000)
            limits = _limits(self.settings)
            with step("extract", 0.05):
                # In a child process: a file that crashes or hangs its parser fails this run
                # only, and PDFium never runs on two threads of one process (ADR 0077).
                doc = parsers.extract_isolated(
                    path, job.source_type,
                    max_uncompressed_bytes=self.settings.max_uncompressed_mb << 20,
                    timeout_s=self.settings.extract_timeout_s,
                    memory_bytes=self.settings.extract_memory_mb << 20, check=step.check,
                    limits=limits, ocr_page_s=self.settings.extract_ocr_page_s,
                    attachments_dir=Path(kept) if attachments.keeps_attachments(
                        job, limits.max_depth) else None, depth=job.attachment_depth)
                # An e-mail's attachments, to become its child documents (ADR 0250).
                stored = attachments.store(doc.attachments, job, self.settings.upload_store_uri,
                                           self.s3, subject=doc.title)
        try:
            result = self._index(job, lease, doc, stored, step, timings)
        except BaseException:
            attachments.remove(stored, self.s3)  # never committed: nothing points at them
            raise
        attachments.settle(stored, result.version_number, self.s3)
        self._remove_upload(job)
        return result

    def _index(self, job: jobs.IngestJob, lease: runs.RunLease, doc: extract.Extracted,
               stored: list[attachments.Stored], step: _Stepper,
               timings: dict[str, int]) -> PipelineResult:
        with step("chunk", 0.2), self._chunk_lock:
            chunks = self.chunker.split(doc, title=job.title)
        if not chunks:
            raise errors.NoTextFound("chunk: the document produced no text chunks; "
                                     "upload a version with a text layer.", stage="chunk")
        with step("embed", 0.3):
            vectors = self._embed([c.token_ids for c in chunks], step)
        doc_version_id = uuid4()
        step.enter("index", 0.92)
        index_started = time.monotonic()
        artifact_uri = self._write_artifact(job, doc_version_id, doc, chunks)
        content = index.VersionContent(doc_version_id, chunks, vectors, len(doc.text),
                                       doc.pages, artifact_uri, self.embedder.model_name,
                                       self.embedder.variant, attachments=stored)
        version, stats = self._write(job, lease, content, _stats(doc, chunks, timings),
                                     index_started, step)
        return PipelineResult(doc_version_id, version, stats)

    def _pause_point(self) -> tuple[str, Path] | None:
        """The test-only pause point (WORKER_PAUSE_AT_STAGE + WORKER_PAUSE_FILE), if set."""
        stage, flag = self.settings.worker_pause_at_stage, self.settings.worker_pause_file
        return (stage, Path(flag)) if stage and flag else None

    def _check_model(self, job: jobs.IngestJob) -> None:
        if (job.embedding_model, job.embedding_dim) != (self.embedder.model_name, self.embedder.dim):
            raise errors.BadDocument(
                f"embed: the job asks for {job.embedding_model} ({job.embedding_dim} dims) but "
                f"this worker serves {self.embedder.model_name} ({self.embedder.dim} dims); "
                "align EMBEDDING_MODEL on gateway and workers, then retry the run.", stage="embed")

    def _embed(self, ids: list[tuple[int, ...]], step: _Stepper) -> np.ndarray:
        return self.embeds.embed(ids, check=step.check,
                                 progress=lambda done: step.progress("embed", 0.3 + 0.6 * done))

    def _write(self, job: jobs.IngestJob, lease: runs.RunLease, content: index.VersionContent,
               stats: dict[str, Any], started: float, step: _Stepper) -> tuple[int, dict[str, Any]]:
        @retry.transient(attempts=self.settings.transient_retry_attempts)
        def attempt() -> tuple[int, dict[str, Any]]:
            step.check()
            return self.writer.write(job, content, stats, started=started, fence=lease.fence,
                                     check=step.check)

        return attempt()

    def _write_artifact(self, job: jobs.IngestJob, doc_version_id: UUID,
                        doc: extract.Extracted, chunks: list[chunk.Chunk]) -> str:
        body = orjson.dumps({
            "run_id": job.run_id, "doc_id": job.doc_id, "doc_version_id": doc_version_id,
            "content_hash": job.content_hash, "source_type": job.source_type,
            "pages": doc.pages, "text": doc.text, "title": doc.title, "url": doc.url,
            "chunks": [{"ordinal": c.ordinal, "char_start": c.char_start, "char_end": c.char_end,
                        "page": c.page, "token_count": c.token_count,
                        "heading_path": c.heading_path, "context": c.context} for c in chunks],
        })
        key = f"{job.tenant_id}/{job.doc_id}/{doc_version_id}.json"
        return retry.transient()(self.artifacts.put_bytes)(key, body)

    def _remove_upload(self, job: jobs.IngestJob) -> None:
        try:
            objectstore.delete(read.confined_upload(job, self.settings.upload_store_uri), self.s3)
        except Exception as exc:  # noqa: BLE001 - content is committed; cleanup TTL catches it
            log.warning("could not delete the raw upload", extra={"error": str(exc)})


class _Stepper:
    """Times stages into ``timings`` and reports stage/progress on the lease."""

    def __init__(self, lease: runs.RunLease, abort: threading.Event | None,
                 timings: dict[str, int], pause: tuple[str, Path] | None = None) -> None:
        self.lease = lease
        self.abort = abort
        self.timings = timings
        self.pause = pause

    @contextmanager
    def __call__(self, stage: str, progress: float) -> Iterator[None]:
        self.enter(stage, progress)
        started = time.monotonic()
        try:
            yield
        finally:
            self.timings[f"{stage}_ms"] = round((time.monotonic() - started) * 1000)

    def enter(self, stage: str, progress: float) -> None:
        """Report a new stage; every stage, timed or not, honours the pause point."""
        self.progress(stage, progress)
        self._hold(stage)

    def progress(self, stage: str, value: float) -> None:
        self.check()
        self.lease.report(stage, value)

    def _hold(self, stage: str) -> None:
        """Test-only: wait at this stage while the pause file exists, still heartbeating and
        still stopping on shutdown or a lost lease, so fault tests hold a job in flight."""
        if self.pause is None or self.pause[0] != stage:
            return
        while self.pause[1].exists():
            self.check()
            time.sleep(0.05)

    def check(self) -> None:
        if self.abort is not None and self.abort.is_set():
            raise runs.Aborted("the worker is shutting down")
        self.lease.check()


def _limits(settings: WorkerSettings) -> extract.Limits:
    return extract.Limits(
        max_uncompressed_bytes=settings.max_uncompressed_mb << 20,
        max_pages=settings.extract_max_pages, max_members=settings.extract_max_members,
        max_cells=settings.extract_max_cells, max_ocr_pages=settings.extract_max_ocr_pages)


def _stats(doc: extract.Extracted, chunks: list[chunk.Chunk], timings: dict[str, int]) -> dict:
    return {
        "docs_processed": 1,
        "chunks_created": len(chunks),
        "tokens_total": sum(c.token_count for c in chunks),
        "pages": doc.pages,
        "chars": len(doc.text),
        "stages": dict(timings),
    }
