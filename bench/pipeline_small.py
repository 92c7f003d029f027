"""Small documents through the worker (issue 27), for bench/pipeline.py --small / --fleet.

A 200-word abstract is two chunks of embedding; everything around them (the queue, the lease,
the parser's child process, the transaction) costs the same as for a big document. Three views:

- ``breakdown``: one document at a time, step by step, in this process with the worker's own
  functions, in the order the worker runs them: receive, lease and lock (connection, claim,
  heartbeat), read, extract (text in this process as the worker does, ADR 0304; other types in a
  child process), chunk, embed, write (artifact and the content
  statements), commit, delete (message and upload). The stage reports the worker writes on the
  lease connection are counted in the step they announce.
- ``in_flight``: the same documents through a real `ingest worker --once`, one slot against 8,
  interleaved, in documents/s and chunks/s from the first finished run to the last.
- ``fleet``: N documents through 2 real workers (8 slots, 1 embedding thread each, on this
  2-core machine), against the rate the embedding alone allows: the same chunks' ids embedded in
  this process by the same variant on every core, in full passes, nothing else. Target >= 60 %.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pgvector.psycopg import register_vector

from shared import aws, db, jobs, objectstore
from shared.embedding import model as embedding
from shared.settings import WorkerSettings
from tests.support import documents, stack, submit
from worker import runs
from worker.pipeline import chunk, extract, index, parsers, read, runner
from worker.pipeline.runner import Pipeline

# Messages waiting in the queue at most while a drain runs (see SmallBench._feed).
FEED_DEPTH = 60
STEPS = ("receive", "lease and lock", "read", "extract", "chunk", "embed", "write", "commit",
         "delete")
CACHE = Path(__file__).resolve().parents[1] / ".ingest" / "models"


def abstract(i: int, words: int = 200) -> bytes:
    """A small Markdown document: a title and ~200 words, different for every i."""
    return f"# Abstract {i}\n\n{documents.prose(words, seed=10_000 + i)}\n".encode()


class SmallBench:
    def __init__(self, url: str, moto: Any, root: Path, jobs_queue: Any, conn: Any, user: Any,
                 env: dict[str, str]) -> None:
        self.url, self.moto, self.root = url, moto, root
        self.queue, self.conn, self.user = jobs_queue, conn, user
        self.store = root / "uploads"
        # auto resolved once here (cached per machine), then named to every worker, so the
        # workers and the embedding-alone figure run the same variant.
        self.embedder = embedding.load_embedder(cache_dir=CACHE)
        self.embedder.load()
        self.env = {**env, "EMBEDDING_VARIANT": self.embedder.variant,
                    "EMBEDDING_CACHE_DIR": str(CACHE)}
        self.serial = 0
        print(f"variant {self.embedder.variant} (auto), batch {self.embedder.batch_tokens} "
              "padded tokens")

    def _submit(self, count: int, words: int = 200, copies: int = 1) -> list[submit.Submitted]:
        out = []
        for _ in range(count):
            self.serial += 1
            out.append(submit.submit(self.conn, self.queue, self.store, self.user,
                                     abstract(self.serial, words), name=f"a-{self.serial}.md",
                                     copies=copies))
        return out

    def _feed(self, bodies: list[str], done: threading.Event) -> None:
        """Send the messages as the queue drains, FEED_DEPTH at most waiting: moto scans every
        stored message on every call (a real SQS does not), so a queue of a thousand would
        bill moto's scan to the workers' share of this machine."""
        pending = list(reversed(bodies))
        while pending and not done.is_set():
            depth = self.queue.depth()
            for _ in range(max(0, FEED_DEPTH - depth["visible"])):
                if not pending:
                    break
                self.queue.send(pending.pop())
            done.wait(0.05)

    # ── one document, step by step ────────────────────────────────────────────────────────
    def breakdown(self, count: int) -> None:
        settings = WorkerSettings(
            database_url=self.url, aws_endpoint_url=self.moto.url, sqs_queue_url=self.queue.url,
            upload_store_uri=self.store.as_uri(),
            artifact_store_uri=(self.root / "artifacts").as_uri())
        s3 = aws.client("s3", endpoint_url=self.moto.url, region="us-east-1")
        pool = db.sync_pool(self.url, max_size=2, configure=register_vector)
        pool.open(wait=True)
        pipeline = Pipeline(settings, pool, s3, self.embedder,
                            objectstore.open_store(settings.artifact_store_uri, s3))
        self._submit(count)
        times: dict[str, list[float]] = defaultdict(list)
        chunks = []
        # As the worker holds them: a shared lock session kept between documents (ADR 0301).
        sessions = runs.LockSessions(self.url, keep=1, shared=1, heartbeat_s=5)
        for _ in range(count):
            chunks.append(self._one(settings, pipeline, pool, s3, sessions, times))
        sessions.close()
        pool.close()
        pipeline.embeds.close()
        totals = [sum(times[s][k] for s in STEPS) for k in range(count)]
        print(f"one small document at a time, {count} documents of ~200 words "
              f"({statistics.mean(chunks):.1f} chunks each), ms per step (median, mean):")
        for step in STEPS:
            med, mean = statistics.median(times[step]), statistics.fmean(times[step])
            print(f"  {step:<15} {med:8.1f} {mean:8.1f}   {100 * mean / statistics.fmean(totals):5.1f} %")
        embed_share = statistics.fmean(times["embed"]) / statistics.fmean(totals)
        print(f"  {'total':<15} {statistics.median(totals):8.1f} {statistics.fmean(totals):8.1f}"
              f"   -> {1000 / statistics.fmean(totals):.2f} documents/s; embedding is "
              f"{100 * embed_share:.0f} % of it")

    def _one(self, settings: WorkerSettings, pipeline: Pipeline, pool: db.Pool, s3: Any,
             sessions: runs.LockSessions, times: dict[str, list[float]]) -> int:
        @contextmanager
        def step(name: str) -> Iterator[None]:
            started = time.perf_counter()
            yield
            times[name].append((time.perf_counter() - started) * 1000)

        with step("receive"):
            (message,) = self.queue.receive(1, 0, 60)
            job = jobs.parse(message.body)
        assert isinstance(job, jobs.IngestJob)
        with step("lease and lock"):
            lease = runs.RunLease(self.url, job, stale_after_s=900, heartbeat_s=5,
                                  connections=sessions, shared=True)
            assert lease.claim().claim is runs.Claim.STARTED
            lease.start_heartbeat()
        with step("read"):
            lease.report("read", 0.02)
            upload = read.confined_upload(job, settings.upload_store_uri)
            with read.open_upload(upload, s3) as path:
                local = path
                with step("extract"):
                    lease.report("extract", 0.05)
                    if runner._decoded_only(job.source_type, local):  # noqa: SLF001
                        # as the worker does since ADR 0304: text is decoded here, not parsed
                        doc = extract.extract(local, job.source_type)
                    else:
                        doc = parsers.extract_isolated(local, job.source_type,
                                                       max_uncompressed_bytes=200 << 20,
                                                       timeout_s=120, memory_bytes=1 << 30)
        times["read"][-1] -= times["extract"][-1]
        with step("chunk"):
            lease.report("chunk", 0.2)
            chunks = pipeline.chunker.split(doc)
        with step("embed"):
            lease.report("embed", 0.3)
            vectors = pipeline.embeds.embed([c.token_ids for c in chunks])
        version_id = uuid.uuid4()
        with step("write"):
            lease.report("index", 0.92)
            artifact = pipeline._write_artifact(job, version_id, doc, chunks)
            content = index.VersionContent(version_id, chunks, vectors, len(doc.text), doc.pages,
                                           artifact, self.embedder.model_name,
                                           self.embedder.variant)
            conn = pool.getconn()
            outer = conn.transaction()
            outer.__enter__()  # index.write's own transaction becomes a savepoint in it
            index.write(conn, job, content, _stats(doc, chunks), started=time.monotonic(),
                        fts_config="english", fence=lease.fence)
        with step("commit"):
            outer.__exit__(None, None, None)
            pool.putconn(conn)
        with step("delete"):
            lease.close()
            self.queue.delete(message.receipt_handle)
            objectstore.delete(upload, s3)
        return len(chunks)

    # ── real workers ──────────────────────────────────────────────────────────────────────
    def in_flight(self, count: int) -> None:
        """One slot against 8, twice, alternating which goes first."""
        rates: dict[int, list[tuple[float, float]]] = {1: [], 8: []}
        for order in ((1, 8), (8, 1)):
            for slots in order:
                rates[slots].append(self._drain(count, workers=1, slots=slots))
        for slots in (1, 8):
            docs, chunks = (max(r[i] for r in rates[slots]) for i in (0, 1))
            print(f"  {slots} in flight: best {docs:.2f} documents/s, {chunks:.1f} chunks/s")
        gain = max(r[1] for r in rates[8]) / max(r[1] for r in rates[1])
        print(f"  8 in flight / 1 in flight: {gain:.2f}x chunks/s")

    def _drain(self, count: int, *, workers: int, slots: int,
               extra: dict[str, str] | None = None) -> tuple[float, float]:
        """Submit ``count`` documents, drain them with ``workers`` x ``slots``; documents/s and
        chunks/s from the first finished run to the last (start-up and model load excluded)."""
        submitted = self._submit(count, copies=0)
        done = threading.Event()
        feeder = threading.Thread(target=self._feed, args=([s.body for s in submitted], done))
        feeder.start()
        env = {**self.env, "WORKER_MAX_CONCURRENT_JOBS": str(slots), **(extra or {})}
        started = time.monotonic()
        procs = [stack.spawn(f"small-{slots}x{workers}", ["worker", "--once"], env,
                             self.root / "logs") for _ in range(workers)]
        try:
            for proc in procs:
                if proc.proc.wait(7200) != 0:
                    raise SystemExit(f"worker failed:\n{proc.logs()[-3000:]}")
        finally:
            done.set()
            feeder.join()
        wall = time.monotonic() - started
        row = self.conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'succeeded') AS ok, count(*) AS n, "
            "EXTRACT(EPOCH FROM max(finished_at) - min(finished_at)) AS span, "
            "sum((stats->>'chunks_created')::int) AS chunks FROM ingestion_runs "
            "WHERE run_id = ANY(%s)", ([s.run_id for s in submitted],)).fetchone()
        if row["ok"] != count:
            raise SystemExit(f"only {row['ok']} of {count} runs succeeded")
        stages = self.conn.execute(
            "SELECT key, avg(value::numeric) AS ms FROM ingestion_runs, "
            "jsonb_each_text(stats->'stages') WHERE run_id = ANY(%s) GROUP BY key ORDER BY key",
            ([s.run_id for s in submitted],)).fetchall()
        span = float(row["span"])
        docs_s = (count - 1) / span
        chunks_s = row["chunks"] * (count - 1) / count / span
        print(f"  {workers} worker(s) x {slots} slot(s): {count} documents, {row['chunks']} "
              f"chunks, {span:.1f} s first to last finished ({wall:.1f} s with start-up): "
              f"{docs_s:.2f} documents/s, {chunks_s:.1f} chunks/s; stage means "
              + ", ".join(f"{r['key'][:-3]} {float(r['ms']):.0f} ms" for r in stages))
        return docs_s, chunks_s

    def fleet(self, count: int) -> None:
        alone_before = self._embedding_alone(count)
        pipeline, _ = self._drain(count, workers=2, slots=8, extra={"TORCH_THREADS": "1"})
        alone_after = self._embedding_alone(count)
        alone = statistics.fmean([alone_before, alone_after])
        print(f"{count} documents of ~200 words through 2 workers: {pipeline:.2f} documents/s; "
              f"the embedding alone allows {alone:.2f} documents/s (before {alone_before:.2f}, "
              f"after {alone_after:.2f}): {100 * pipeline / alone:.0f} % (target >= 60 %)")

    def _embedding_alone(self, count: int) -> float:
        """Documents/s if embedding were all there is: the chunks of ``count`` such documents,
        embedded in full passes on every core by the same variant, by hand (_bare_embedding_s)."""
        settings = WorkerSettings()
        chunker = chunk.Chunker(self.embedder.tokenizer, target_tokens=settings.chunk_target_tokens,
                                max_tokens=settings.chunk_max_tokens,
                                model_max_tokens=self.embedder.max_seq_length)
        ids = []
        for i in range(count):
            doc = extract.Extracted(abstract(i).decode(), None, [])
            ids += [c.token_ids for c in chunker.split(doc)]
        took = _bare_embedding_s(self.embedder, ids)
        print(f"  embedding alone: {len(ids)} chunks in {took:.1f} s = {len(ids) / took:.1f} "
              f"chunks/s = {count / took:.2f} documents/s")
        return count / took


def _bare_embedding_s(embedder: embedding.Embedder, ids: list[list[int]]) -> float:
    """Seconds to embed ``ids`` with none of the product's batching, padding, backends or
    pooling: the same model file run by its own library (onnxruntime on the cached int8
    export, or sentence-transformers for torch) over passes cut by bench/embed.py's hand
    batching, mean-pooled and normalised here."""
    # bench/embed.py's hand batching (this file runs from bench/, as pipeline.py imports it)
    import numpy as np
    from embed import _passes_by_hand

    from shared.embedding import backends

    passes = _passes_by_hand(ids, embedder.batch_tokens)
    if embedder.variant == "onnx-int8":
        import onnxruntime as ort

        session = ort.InferenceSession(str(backends.cached_onnx_model(embedder.path, CACHE)),
                                       providers=["CPUExecutionProvider"])

        def forward(ids_: np.ndarray, mask: np.ndarray) -> np.ndarray:
            hidden = session.run(None, {"input_ids": ids_, "attention_mask": mask,
                                        "token_type_ids": np.zeros_like(ids_)})[0]
            weights = mask[..., None].astype(np.float32)
            return (hidden * weights).sum(axis=1) / weights.sum(axis=1)
    else:
        import torch
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(embedder.path), device="cpu").eval()

        def forward(ids_: np.ndarray, mask: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return model({"input_ids": torch.from_numpy(ids_),
                              "attention_mask": torch.from_numpy(mask)})[
                                  "sentence_embedding"].numpy()
    forward(*passes[0])  # warm-up, as the workers' model is warm
    started = time.perf_counter()
    for p in passes:
        vectors = forward(*p)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return time.perf_counter() - started


def _stats(doc: extract.Extracted, chunks: list) -> dict[str, Any]:
    return {"docs_processed": 1, "chunks_created": len(chunks), "stages": {}}
