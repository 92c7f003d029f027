"""The query embedder: the worker's model, loaded once per gateway process, on first use.

The gateway must embed a query with the same model that embedded the versions, or distances
mean nothing; so it loads the worker's own loader (worker/pipeline/embed.py) with the same
EMBEDDING_MODEL setting. Loading takes seconds and hundreds of MB, so it happens only when the
first vector query arrives (a gateway that never searches never pays it), in a thread (the
event loop keeps serving), and once: concurrent first queries wait for the same load
(docs/decisions/0108).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)


class Encoder(Protocol):
    model_name: str
    dim: int

    def encode(self, texts: list[str]) -> np.ndarray: ...


def load_worker_model(model: str) -> Encoder:
    """The worker's embedder for ``model`` (imported here: torch is heavy and only searches need it)."""
    from worker.pipeline import embed

    return embed.load_embedder(model, batch_size=1)


class QueryEmbedder:
    def __init__(self, model: str, loader: Callable[[str], Encoder] = load_worker_model) -> None:
        self.model = model
        self._loader = loader
        self._encoder: Encoder | None = None
        self._lock: asyncio.Lock | None = None

    @property
    def loaded(self) -> bool:
        return self._encoder is not None

    async def encoder(self) -> Encoder:
        if self._encoder is not None:
            return self._encoder
        # Made here, not in __init__: a lock belongs to the loop that runs the requests.
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._encoder is None:  # a concurrent first request may have loaded it
                log.info("loading the query embedding model", extra={"model": self.model})
                self._encoder = await asyncio.to_thread(self._loader, self.model)
                log.info("query embedding model loaded", extra={"model": self.model})
        return self._encoder

    async def embed(self, text: str) -> list[float]:
        """The unit-length vector of ``text``, computed off the event loop."""
        encoder = await self.encoder()
        vectors = await asyncio.to_thread(encoder.encode, [text])
        return [float(x) for x in vectors[0]]
