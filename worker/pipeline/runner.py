"""Run the stages of one job in order — read, extract, chunk, embed, index — timing each.

Stages are plain functions; this module owns what surrounds them: progress for the people
watching, lease checks so a job that lost its run stops, transient retries, the artifact, and
removing the raw upload once the content is committed.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
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

import orjson

from shared import db, errors, jobs, objectstore, retry
from shared import logging as applog
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
        self.embeds = embed.EmbedQueue(embedder,
                                       documents=settings.worker_documents_in_flight)
        # And one writer: the documents ready at once are committed together (ADR 0233).
        self.writer = writes.GroupWriter(pool, fts_config=fts_config)
        # The tokenizers are not safe to share between concurrent calls.
        self._chunk_lock = threading.Lock()
        # Where a document goes between the embed queue, the writer and its end: short steps
        # (a stage report, a submit, the upload's removal), never the forward or writer thread.
        self.after = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(2, settings.worker_max_concurrent_jobs),
            thread_name_prefix="document-after")

    def start(self, job: jobs.IngestJob, lease: runs.RunLease,
              abort: threading.Event | None = None) -> concurrent.futures.Future:  # type: ignore[type-arg]
        """Read, extract and chunk the document here (the caller's job slot), write its
        artifact, and queue its chunks for vectors; the rest (embed, the group write, the
        upload's removal) happens without this thread, and the future tells how it ended: a
        PipelineResult, or the exception the blocking ``run`` would have raised
        (docs/decisions/0301). Raises at once what the first stages raise."""
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
                if _decoded_only(job.source_type, path):
                    # Plain text and Markdown are decoded, not parsed: nothing in them can crash
                    # or hang a parser, and a child process cost a small one more than its
                    # embedding did (ADR 0304).
                    doc = extract.extract(path, job.source_type, limits=limits)
                else:
                    # In a child process: a file that crashes or hangs its parser fails this run
                    # only, and PDFium never runs on two threads of one process (ADR 0077).
                    doc = self._extract_isolated(job, path, limits, step, kept)
                # An e-mail's attachments, to become its child documents (ADR 0250).
                stored = attachments.store(doc.attachments, job, self.settings.upload_store_uri,
                                           self.s3, subject=doc.title)
        try:
            return _Document(self, job, lease, step, doc, stored).start()
        except BaseException:
            attachments.remove(stored, self.s3)  # never committed: nothing points at them
            raise

    def _extract_isolated(self, job: jobs.IngestJob, path: Path, limits: extract.Limits,
                          step: _Stepper, kept: str) -> extract.Extracted:
        return parsers.extract_isolated(
            path, job.source_type,
            max_uncompressed_bytes=self.settings.max_uncompressed_mb << 20,
            timeout_s=self.settings.extract_timeout_s,
            memory_bytes=self.settings.extract_memory_mb << 20, check=step.check,
            limits=limits, ocr_page_s=self.settings.extract_ocr_page_s,
            attachments_dir=Path(kept) if attachments.keeps_attachments(
                job, limits.max_depth) else None, depth=job.attachment_depth)

    def _finish(self, job: jobs.IngestJob, stored: list[attachments.Stored],
                result: PipelineResult) -> PipelineResult:
        """After the commit: the attachments become child documents, the raw upload goes."""
        attachments.settle(stored, result.version_number, self.s3)
        self._remove_upload(job)
        return result

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


class _Document:
    """One document from its chunks to its commit, on no thread of its own: the embed queue's
    future, the group writer's future and the pipeline's small pool carry it (docs/decisions/
    0301). Whatever stops it (its own error, a lost lease, a shutdown) ends its future with the
    exception the blocking path raised."""

    def __init__(self, pipeline: Pipeline, job: jobs.IngestJob, lease: runs.RunLease,
                 step: _Stepper, doc: extract.Extracted, stored: list[attachments.Stored]) -> None:
        self.p, self.job, self.lease, self.step = pipeline, job, lease, step
        self.doc, self.stored = doc, stored
        self.timings = step.timings
        self.future: concurrent.futures.Future = concurrent.futures.Future()  # type: ignore[type-arg]
        self.attempts_left = pipeline.settings.transient_retry_attempts
        self.committed = False

    def start(self) -> concurrent.futures.Future:  # type: ignore[type-arg]
        """Chunk, write the artifact, queue the chunks; raises what those raise."""
        with self.step("chunk", 0.2), self.p._chunk_lock:
            self.chunks = self.p.chunker.split(self.doc, title=self.job.title)
        if not self.chunks:
            raise errors.NoTextFound("chunk: the document produced no text chunks; "
                                     "upload a version with a text layer.", stage="chunk")
        self.doc_version_id = uuid4()
        # Before the vectors: it needs none, and this job slot's thread is here anyway (the
        # pool after the embed queue stays small). Its time counts in the index stage, as before.
        artifact_started = time.monotonic()
        self.artifact_uri = self.p._write_artifact(self.job, self.doc_version_id, self.doc,
                                                   self.chunks)
        self.artifact_s = time.monotonic() - artifact_started
        self.step.enter("embed", 0.3)
        self.embed_started = time.monotonic()
        request = self.p.embeds.submit([c.token_ids for c in self.chunks])
        # A lost lease or a shutdown (which abandons every lease) takes the ids out at once.
        self.lease.when_lost(lambda: self.p.embeds.cancel(request))
        request.add_done_callback(lambda done: self._hand_off(self._vectors, done))
        return self.future

    def _hand_off(self, then, done) -> None:  # type: ignore[no-untyped-def]
        """From the forward or the writer thread to the pipeline's pool: never block them."""
        try:
            self.p.after.submit(self._guarded, then, done)
        except RuntimeError as exc:  # the pool is shut down: the process is ending
            self._end(exc)

    def _guarded(self, then, done) -> None:  # type: ignore[no-untyped-def]
        try:
            with applog.context(run_id=self.job.run_id, tenant_id=self.job.tenant_id,
                                doc_id=self.job.doc_id):
                then(done)
        except BaseException as exc:  # noqa: BLE001 - the job's outcome, told by its future
            self._end(exc)

    def _end(self, exc: BaseException) -> None:
        if not self.committed:
            with contextlib.suppress(Exception):  # nothing points at them
                attachments.remove(self.stored, self.p.s3)
        if not self.future.done():
            self.future.set_exception(exc)

    def _vectors(self, request: embed.Request) -> None:
        if request.cancelled():
            self.step.check()  # raises why: the lease was lost, or the worker is stopping
            raise runs.Aborted("the document stopped waiting for its vectors")
        vectors = request.result()  # raises the document's own embedding error
        self.timings["embed_ms"] = round((time.monotonic() - self.embed_started) * 1000)
        self.step.enter("index", 0.92)
        self.index_started = time.monotonic() - self.artifact_s
        self.content = index.VersionContent(
            self.doc_version_id, self.chunks, vectors, len(self.doc.text), self.doc.pages,
            self.artifact_uri, self.p.embedder.model_name, self.p.embedder.variant,
            attachments=self.stored)
        self.stats = _stats(self.doc, self.chunks, self.timings)
        self._write()

    def _write(self) -> None:
        self.step.check()
        written = self.p.writer.submit(self.job, self.content, self.stats,
                                       started=self.index_started, fence=self.lease.fence,
                                       check=self.step.check)
        written.add_done_callback(lambda done: self._hand_off(self._written, done))

    def _written(self, written: concurrent.futures.Future) -> None:  # type: ignore[type-arg]
        try:
            version, stats = written.result()
        except Exception as exc:
            if not retry.is_transient(exc) or self.attempts_left <= 1:
                raise
            # As retry.transient would: say so, back off, write again (this pool thread waits).
            self.attempts_left -= 1
            delay = retry.full_jitter_s(
                self.p.settings.transient_retry_attempts - self.attempts_left, 0.25, 8.0)
            log.warning(f"Retrying index.write in {delay:.2f} seconds as it raised "
                        f"{type(exc).__name__}: {exc}.")
            time.sleep(delay)
            self._write()
            return
        self.committed = True
        result = PipelineResult(self.doc_version_id, version, stats)
        self.future.set_result(self.p._finish(self.job, self.stored, result))


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


# Plain text and Markdown up to this size are read in the worker's own process (ADR 0304): the
# reader only decodes and normalises them (extract._Reader), in time and memory linear in size.
DECODED_IN_PROCESS_BYTES = 4 << 20


def _decoded_only(source_type: str, path: Path) -> bool:
    return source_type in ("txt", "md") and path.stat().st_size <= DECODED_IN_PROCESS_BYTES
