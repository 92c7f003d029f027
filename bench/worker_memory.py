"""What a worker's resident memory holds, step by step, for each embedding variant (issue 33:
outside runs saw 2.15–2.17 GB resident with a ~90 MB model).

    python bench/worker_memory.py                  # torch and onnx-int8, each in a fresh process
    python bench/worker_memory.py --variant torch

Each variant runs in a fresh interpreter that does what a worker does before and at its first
document job: import worker.main (the pipeline, psycopg, boto3…), load_embedder (facts only),
Embedder.load (the weights of the one variant; auto's measuring runs in a throwaway child, ADR
0300), then embed 256 chunks of ~200 tokens. Printed after each step: resident memory (RSS),
its growth, and which of torch / onnxruntime / transformers / sentence_transformers the process
has imported. The honest baseline is the bare interpreter, and the model file's own size.
No database, queue or GPU is needed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "onnxruntime", "transformers", "sentence_transformers")


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _child(variant: str, cache_dir: str) -> None:
    """One worker's steps in this process, a JSON line per step."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    def step(name: str) -> None:
        print(json.dumps({"step": name, "rss_mib": round(_rss_mib(), 1),
                          "imported": [m for m in HEAVY if m in sys.modules]}), flush=True)

    step("python")
    import worker.main  # noqa: F401  # what the worker imports at start
    step("import worker.main")
    from shared.embedding.model import load_embedder
    embedder = load_embedder(variant=variant, cache_dir=cache_dir, threads=1)
    step("load_embedder (facts)")
    embedder.load()
    step(f"Embedder.load ({embedder.variant})")
    sentence = ("the court entered judgment for the plaintiff in the amount stated and the "
                "defendant appealed on the ground that the notice was late")
    words = sentence.split(" ")
    texts = [" ".join(words[(i + j) % len(words)] for j in range(150)) for i in range(256)]
    embedder.encode(texts)
    step("encode 256 chunks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", action="append", choices=["torch", "onnx-int8", "auto"])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.cache_dir)
        return
    from shared.embedding.model import model_path
    weights = sum(p.stat().st_size for p in model_path("all-MiniLM-L6-v2").rglob("*.safetensors"))
    print(f"model weights on disk: {weights / 2**20:.1f} MiB; load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as cache:
        for variant in args.variant or ["torch", "onnx-int8"]:
            out = subprocess.run(
                [sys.executable, __file__, "--child", variant, "--cache-dir", cache],
                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                capture_output=True, text=True, timeout=900, check=True).stdout
            print(f"\n{variant}:")
            before = None
            for line in out.splitlines():
                if not line.startswith("{"):
                    continue
                s = json.loads(line)
                grew = "" if before is None else f"+{s['rss_mib'] - before:7.1f}"
                print(f"  {s['step']:<28} RSS {s['rss_mib']:7.1f} MiB {grew:>8}   "
                      f"imported: {', '.join(s['imported']) or '-'}")
                before = s["rss_mib"]


if __name__ == "__main__":
    main()
