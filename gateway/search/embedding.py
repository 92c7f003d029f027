"""The query embedder: the workers' model and variant, loaded once per gateway process, on first use.

The gateway must embed a query with the model that embedded the versions, or distances mean
nothing; so it loads the model through the loader the workers use (shared/embedding, ADR 0230)
with the same EMBEDDING_MODEL and EMBEDDING_VARIANT settings (`auto` by default: the faster
variant on this machine, for its SEARCH_EMBED_THREADS; either variant's query ranks either's
chunks, ADR 0110). Loading takes seconds and hundreds of MB, in a thread (the event loop keeps
serving), and once. A gateway starts it as it starts (``start_loading``, SEARCH_MODEL_AT_START):
until it is done a vector query is refused at once with 503 `model_loading` and /health/ready
says not ready, instead of queries hanging behind the load (docs/decisions/0321). Without
``start_loading`` the first vector query loads it and concurrent ones wait for the same load
(docs/decisions/0108).

Queries are embedded on one thread of their own, in micro-batches: the queries that arrive while
a forward pass runs go together into the next one (docs/decisions/0158). Nothing waits for a batch
to fill, so a lone query costs one pass; under load, one pass serves many queries, and the model
never takes more than its one thread from Postgres and the event loop. A text embedded recently
is answered from an LRU cache, and a text already waiting for a pass is not embedded twice
(docs/decisions/0313).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

from shared import errors, heap

log = logging.getLogger(__name__)

# Queries per forward pass at most: short queries pad to a few dozen tokens, and a pass of 32
# still takes only milliseconds.
MAX_BATCH = 32
# The model's limit (all-MiniLM-L6-v2): longer queries are truncated, as the model would.
MAX_QUERY_TOKENS = 256
# Vectors of recent texts kept (384 float32 each: 1.5 KB, so ~6 MB): people repeat queries
# (a search page refreshed, paged or shared, the same question asked again), and a text's
# vector never changes for one loaded model.
CACHE_SIZE = 4096


class ModelLoading(errors.ServiceUnavailable):
    """This server is still loading its query model; retry in a few seconds (mode=text works
    now)."""

    code = "model_loading"
    retry_after_s = 5


class Encoder(Protocol):
    model_name: str
    dim: int

    def encode(self, texts: list[str]) -> np.ndarray: ...


def model_loader(*, variant: str = "auto", cache_dir: str | None = None,
                 threads: int = 1) -> Callable[[str], Encoder]:
    """A loader of the shared embedder for a model, in ``variant``, on the CPU.

    The CPU even where the workers run torch on cuda: a query is a few tokens, and fp16 on a GPU
    agrees with fp32 to cosine 1.000 (ADR 0110), so it is the same variant's vector.
    """
    def load(model: str) -> Encoder:
        # Imported here: the model's files are read only when the first vector query comes.
        from shared.embedding import model as embedding

        encoder = embedding.load_embedder(model, batch_tokens=MAX_BATCH * MAX_QUERY_TOKENS,
                                          variant=variant, cache_dir=cache_dir, threads=threads)
        encoder.load()  # the weights now, in the loading thread, not in the first query's pass
        return encoder

    return load


class QueryEmbedder:
    def __init__(self, model: str, loader: Callable[[str], Encoder] | None = None) -> None:
        self.model = model
        self._loader = loader or model_loader()
        self._encoder: Encoder | None = None
        self._lock: asyncio.Lock | None = None
        # One thread runs every forward pass: passes never compete with each other for cores.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="query-embed")
        self._pending: list[tuple[str, asyncio.Future[list[float]]]] = []
        self._batcher: asyncio.Task[None] | None = None
        # Recent vectors, least recently used first, and the texts now in a pass (a second
        # request for one waits for the same vector instead of adding it to the batch again).
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._in_flight: dict[str, asyncio.Future[list[float]]] = {}
        self.hits = self.misses = 0
        # The load started with the process (start_loading), while it runs or once it failed.
        self._loading: asyncio.Task[Encoder] | None = None

    @property
    def loaded(self) -> bool:
        return self._encoder is not None

    def start_loading(self) -> None:
        """Load the model now, in the background; until it is loaded, ``encoder`` refuses with
        ModelLoading instead of waiting (a gateway's start, docs/decisions/0321)."""
        if self._encoder is None and self._loading is None:
            self._loading = asyncio.create_task(self._load_in_background(), name="query-model")

    async def wait_loaded(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the load ``start_loading`` began, whatever its end."""
        if self._loading is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._loading), timeout_s)

    @property
    def state(self) -> str:
        """`loaded`, `loading`, `failed: <why>`, or `on first use` (no load started yet)."""
        if self._encoder is not None:
            return "loaded"
        if self._loading is None:
            return "on first use"
        if not self._loading.done():
            return "loading"
        if self._loading.cancelled():
            return "failed: cancelled"
        return f"failed: {type(self._loading.exception()).__name__}"

    async def encoder(self) -> Encoder:
        if self._encoder is not None:
            return self._encoder
        if self._loading is not None:
            if not self._loading.done():
                raise ModelLoading()
            return self._loading.result()  # the load's own error when it failed
        # Made here, not in __init__: a lock belongs to the loop that runs the requests.
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._encoder is None:  # a concurrent first request may have loaded it
                await self._load()
        assert self._encoder is not None
        return self._encoder

    async def _load_in_background(self) -> Encoder:
        try:
            return await self._load()
        except Exception as exc:
            # Kept in the task: vector queries answer search_unavailable, readiness says why.
            log.error("the query embedding model could not be loaded", extra={
                "model": self.model, "error": f"{type(exc).__name__}: {exc}"})
            raise

    async def _load(self) -> Encoder:
        log.info("loading the query embedding model", extra={"model": self.model})
        started = time.monotonic()
        self._encoder = await asyncio.to_thread(self._loader, self.model)
        # The model's ~140,000 objects arrive after start-up froze its own (ADR 0163): left
        # in sight, every full collection walked them, 35-80 ms paused intake (ADR 0288).
        heap.freeze_startup_objects()
        log.info("query embedding model loaded", extra={
            "model": self.model, "seconds": round(time.monotonic() - started, 2)})
        return self._encoder

    async def embed(self, text: str) -> list[float]:
        """The unit-length vector of ``text``: from the cache, or computed off the event loop
        in the next forward pass with whatever else is waiting."""
        encoder = await self.encoder()
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            self.hits += 1
            return cached.tolist()
        same = self._in_flight.get(text)
        if same is not None:  # the same text is already waiting for a pass: share its vector
            self.hits += 1
            return list(await asyncio.shield(same))
        self.misses += 1
        future: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()
        self._in_flight[text] = future
        self._pending.append((text, future))
        if self._batcher is None or self._batcher.done():
            self._batcher = asyncio.create_task(self._run_batches(encoder))
        return list(await asyncio.shield(future))

    async def _run_batches(self, encoder: Encoder) -> None:
        """Embed what is pending, one pass at a time, until nothing is."""
        loop = asyncio.get_running_loop()
        while self._pending:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            texts = [text for text, _ in batch]
            try:
                vectors = await loop.run_in_executor(self._executor, encoder.encode, texts)
            except Exception as exc:  # every query of the pass gets the error its caller maps
                for text, future in batch:
                    self._in_flight.pop(text, None)
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (text, future), vector in zip(batch, vectors, strict=True):
                self._in_flight.pop(text, None)
                self._remember(text, vector)
                if not future.done():
                    future.set_result(vector.tolist())

    def _remember(self, text: str, vector: np.ndarray) -> None:
        self._cache[text] = np.array(vector, dtype=np.float32)
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
