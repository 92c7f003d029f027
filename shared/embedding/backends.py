"""The forward pass of each variant: padded ids and mask in, sentence vectors (not normalised) out.

``torch`` is the model's BERT run by our own plain-torch code (fp32 on the CPU, fp16 on cuda,
docs/decisions/0302);
``onnx-int8`` is an ONNX export of its transformer with per-channel int8 weights, made once and
cached by the weights' hash (docs/decisions/0111), with mean pooling here in fp32.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import logging
import multiprocessing
import os
import pathlib
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np

from shared.logging import setup as log_as_json_lines

log = logging.getLogger(__name__)

# Bump when the export or quantisation recipe changes: the cache key includes it.
ONNX_RECIPE = "opset17-qint8-per-channel-v1"
_ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# What runs the torch variant (a cached variant choice names it, ADR 0302): bump when it changes.
TORCH_RUNNER = "plain-bert-v1"


class Backend(Protocol):
    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Sentence vectors (not yet normalised) for a padded batch of ids and its mask.

        A backend whose pass ends in a wait with the GIL released (a GPU's synchronise, a
        child process's reply) may set ``signals_launch = True`` and take a ``launched``
        callable, called once its own Python for the pass is done: the embed queue's other
        threads keep their Python work for that wait (ADR 0306)."""


def offline() -> None:
    # Set before the import: huggingface_hub and transformers read these once, at import time.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # keep JSON log lines clean


def open_variant(variant: str, path: pathlib.Path, device: str, threads: int,
                 cache_dir: pathlib.Path | None) -> Backend:
    """The forward pass of ``variant`` (a module function: a child process opens it too)."""
    if variant == "onnx-int8":
        if cache_dir is None:
            raise ValueError("embed: the onnx-int8 variant needs a cache directory; "
                             "set EMBEDDING_CACHE_DIR.")
        return OnnxBackend(path, cache_dir, threads)
    return TorchBackend(path, device, threads)


class TorchBackend:
    """The model in torch, fed ids: a BERT with mean or CLS pooling runs as ``bert.Encoder``
    (the same vectors without sentence-transformers' imports); any other model runs as the
    sentence-transformers model itself, its own modules, pooling and all.

    On cuda (fp16), a pass costs one copy each way through pinned host buffers kept for the
    process (docs/decisions/0300): ids and mask go over together, the vectors come back into
    a buffer the next pass reuses, and the only wait is one synchronise at the end. The
    token-type ids are left to the model (BERT's own buffer of zeros), so nothing else moves.
    """

    def __init__(self, path: pathlib.Path, device: str, threads: int) -> None:
        offline()
        import torch

        from shared.embedding import bert

        torch.set_num_threads(threads)
        self._torch = torch
        self._device = device
        if bert.fits(path):
            # The encoder alone: sentence-transformers' import is ~5 CPU-s and its own
            # hundreds of megabytes in every process that loads the model (ADR 0302).
            self._model: Any = bert.Encoder(path, device)
        else:
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(path), device=device).eval()
        self._staging: _Staging | None = None
        # On cuda a pass is launches, then a synchronise with the GIL released (ADR 0306).
        self.signals_launch = device == "cuda"
        if device == "cuda":
            # fp16 on a GPU: vectors agree with fp32 to cosine 1.000 (issue 15, measured on H100).
            self._model.half()
            self._staging = _Staging(torch, device)

    def forward(self, ids: np.ndarray, mask: np.ndarray, *,
                launched: Callable[[], None] | None = None) -> np.ndarray:
        torch = self._torch
        if self._staging is not None:
            return self._staging.run(self._model, ids, mask, launched)
        if launched is not None:
            launched()  # on the CPU the pass's Python runs throughout: nothing to wait for
        features = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        with torch.inference_mode():
            vectors = self._model(features)["sentence_embedding"]
        return vectors.float().numpy()


class _Staging:
    """Pinned host buffers for a GPU's passes, grown to the largest pass and reused. One thread
    at a time (the embed queue's forward thread): the lock only guards against a second one."""

    def __init__(self, torch: Any, device: str) -> None:
        self.torch, self.device = torch, device
        self._lock = threading.Lock()
        self._into: Any = None   # int64, ids then mask, flat
        self._back: Any = None   # the vectors' dtype, (rows, dim)

    def run(self, model: Any, ids: np.ndarray, mask: np.ndarray,
            launched: Callable[[], None] | None = None) -> np.ndarray:
        torch = self.torch
        rows, width = ids.shape
        with self._lock:
            if self._into is None or self._into.numel() < 2 * rows * width:
                self._into = torch.empty(2 * rows * width, dtype=torch.int64, pin_memory=True)
            host = self._into[: 2 * rows * width]
            staged = host.numpy().reshape(2, rows, width)
            staged[0], staged[1] = ids, mask
            # Safe to reuse next pass: the synchronise below waits for this copy too.
            both = host.to(self.device, non_blocking=True).view(2, rows, width)
            with torch.inference_mode():
                vectors = model({"input_ids": both[0],
                                 "attention_mask": both[1]})["sentence_embedding"]
                if (self._back is None or self._back.shape[0] < rows
                        or self._back.shape[1] != vectors.shape[1]
                        or self._back.dtype != vectors.dtype):
                    self._back = torch.empty((max(rows, 1), vectors.shape[1]),
                                             dtype=vectors.dtype, pin_memory=True)
                back = self._back[:rows]
                back.copy_(vectors, non_blocking=True)
                if launched is not None:
                    launched()  # all queued on the stream: what is left is the wait below
                torch.cuda.current_stream().synchronize()
            # Out of the pinned buffer (the next pass writes it), as float32.
            return back.numpy().astype(np.float32)


class OnnxBackend:
    """The int8 ONNX export of the model's transformer, then mean pooling here, in fp32."""

    def __init__(self, path: pathlib.Path, cache_dir: pathlib.Path, threads: int, *,
                 export_here: bool = False) -> None:
        import onnxruntime as ort

        model_file = cached_onnx_model(path, cache_dir, export_here=export_here)
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


def weights_file(path: pathlib.Path) -> pathlib.Path:
    found = next((path / name for name in ("model.safetensors", "pytorch_model.bin")
                  if (path / name).is_file()), None)
    if found is None:
        raise ValueError(f"embed: the model in {str(path)!r} has no model.safetensors or "
                         "pytorch_model.bin to export to ONNX; use EMBEDDING_VARIANT=torch.")
    return found


@functools.lru_cache(maxsize=8)
def weights_digest(path: pathlib.Path) -> str:
    """16 hex digits of the weights' sha256: what names the export and the variant choice.
    Read once per process (a start asks up to four times, ~90 MB each)."""
    digest = hashlib.sha256()
    with weights_file(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def cached_onnx_model(path: pathlib.Path, cache_dir: pathlib.Path, *,
                      export_here: bool = False) -> pathlib.Path:
    """The int8 ONNX file for the model in ``path``, exported into ``cache_dir`` if missing.

    Keyed by the weights' hash and the recipe, so new weights or a new recipe never reuse an old
    export. Written under a temporary name and renamed: a crash or a second worker exporting
    at the same time never leaves a half-written model that the next start would trust.
    The export runs in a spawned process unless ``export_here``: it needs torch and
    transformers, which an int8 worker would otherwise carry for its whole life (issue 34).
    """
    target = cache_dir / f"{weights_digest(path)}-{ONNX_RECIPE}.onnx"
    if target.is_file():
        return target
    with cache_lock(cache_dir, target.name):
        if target.is_file():  # made by the process we waited for
            return target
        return _export(path, target, export_here)


@contextlib.contextmanager
def cache_lock(cache_dir: pathlib.Path, name: str) -> Iterator[None]:
    """One process at a time makes a cache entry (an export, a variant measurement); the others
    wait, then find it made. Without it, every gateway and worker of a fresh `make run` exported
    the same model side by side (three ~20 s exports at once were seen), and timed the variants
    against each other's load. An flock is let go when its holder exits, however it exits.
    Best effort: where the folder cannot be written, no lock (the entry cannot be cached either)."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        handle = (cache_dir / f".{name}.lock").open("a")
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _export(path: pathlib.Path, target: pathlib.Path, export_here: bool) -> pathlib.Path:
    if not export_here:
        child = multiprocessing.get_context("spawn").Process(
            target=_export_in_child, args=(str(path), str(target)), name="onnx-export")
        child.start()
        child.join()
        if not target.is_file():
            raise RuntimeError(f"embed: the ONNX export of {str(path)!r} failed in its process "
                               f"(exit code {child.exitcode}); see its output above.")
        return target
    _export_into(str(path), str(target))
    return target


def _export_in_child(path: str, target: str) -> None:
    """A spawned process starts with Python's logging: its lines must be JSON like its parent's."""
    log_as_json_lines("onnx-export", os.environ.get("LOG_LEVEL", "INFO"))
    _export_into(path, target)


def _export_into(path: str, target: str) -> None:
    """Export, quantise and rename into place (in a spawned process, or here)."""
    model_dir, target_file = pathlib.Path(path), pathlib.Path(target)
    started = time.monotonic()
    cache_dir = target_file.parent
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".export-") as tmp:
        fp32, int8 = pathlib.Path(tmp) / "fp32.onnx", pathlib.Path(tmp) / "int8.onnx"
        _export_fp32(model_dir, fp32)
        _quantize(fp32, int8)
        os.replace(int8, target_file)
    log.info("embedding model exported to onnx", extra={
        "file": str(target_file), "export_s": round(time.monotonic() - started, 1)})


def _export_fp32(path: pathlib.Path, out: pathlib.Path) -> None:
    offline()
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
    root = logging.getLogger()
    root.addFilter(_not_the_preprocessing_advice)
    try:
        quantize_dynamic(str(fp32), str(out), per_channel=True, weight_type=QuantType.QInt8)
    finally:
        root.removeFilter(_not_the_preprocessing_advice)


def _not_the_preprocessing_advice(record: logging.LogRecord) -> bool:
    """onnxruntime warns on the root logger, on every export, to run its shape pre-processing
    first: advice for convolutional models that changes nothing for this one, read by
    operators as a fault."""
    return "pre-processing before quantization" not in record.getMessage()
