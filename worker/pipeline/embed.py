"""Embed stage: the chunks of every document in flight, embedded in shared forward passes.

One queue per worker process (docs/decisions/0230). A document puts its chunks' token ids in and
waits; a prep thread takes what is queued (round-robin over documents, so a small one is not
stuck behind a big one), sorts it by length, cuts it into passes of at most EMBED_BATCH_TOKENS
padded tokens and pads them; a forward thread runs the passes and hands each document its own
vectors back. Padding the next pass, running this one and the documents' database writes all
overlap, so the model never waits for Postgres. The queue is bounded in tokens: a document puts
its ids in as room frees up, but always at least one, so none starves.

A pass that fails is run again per document, so one document's bad member fails that
document's run only. A document that stops waiting (lease lost, shutdown) takes its ids out.
"""

from __future__ import annotations

import collections
import logging
import queue as stdqueue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from shared.embedding import model

log = logging.getLogger(__name__)
POLL_S = 0.2
# A window is taken up to this many passes' worth of tokens, then sorted by length and cut:
# sorting a few passes together is what keeps padding short when documents' lengths mix.
# The next window is taken when the forward thread starts the current window's last pass:
# late enough to hold what arrived meanwhile (full passes), early enough to be padded in time.
WINDOW_PASSES = 4


class Request:
    """One document's ids and, once every pass holding them has run, its vectors."""

    def __init__(self, sequences: Sequence[Sequence[int]], dim: int) -> None:
        self.sequences = sequences
        self.vectors = np.empty((len(sequences), dim), dtype=np.float32)
        self.admitted = 0   # ids put into the queue so far, in order
        self.untaken: collections.deque[int] = collections.deque()
        self.remaining = len(sequences)
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.cancelled = False

    def fraction(self) -> float:
        return 1 - self.remaining / max(1, len(self.sequences))

    def fail(self, error: BaseException) -> None:
        if self.error is None and not self.done.is_set():
            self.error = error
            self.done.set()


@dataclass
class Pass:
    items: list[tuple[Request, int]]
    ids: np.ndarray
    mask: np.ndarray
    last_of_window: bool = False


@dataclass
class QueueStats:
    """What the queue did, for benches and logs: passes, sequences, real and padded tokens."""

    passes: int = 0
    sequences: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    forward_s: float = 0.0
    isolated_passes: int = 0
    largest_pass: int = 0
    # Sum over passes of the documents each held: / passes = documents a pass, on average.
    documents: int = 0


class EmbedQueue:
    def __init__(self, embedder: model.Embedder, *, batch_tokens: int = 0,
                 capacity_tokens: int = 0) -> None:
        self.embedder = embedder
        self.batch_tokens = batch_tokens or embedder.batch_tokens
        # Room for a few passes: enough that the prep thread always finds a full window.
        self.capacity_tokens = capacity_tokens or (WINDOW_PASSES + 2) * self.batch_tokens
        self.stats = QueueStats()
        self._cond = threading.Condition()
        self._waiting: list[Request] = []  # requests with ids queued but not yet taken
        self._queued_tokens = 0
        self._ready: stdqueue.Queue[Pass | None] = stdqueue.Queue()
        # Held by the prep thread from taking a window until the forward thread starts that
        # window's last pass.
        self._window_room = threading.Semaphore(1)
        self._threads: list[threading.Thread] = []
        self._closed = False

    # ── the documents' side ───────────────────────────────────────────────────────────────
    def embed(self, sequences: Sequence[Sequence[int]], *, check: Callable[[], None] = lambda: None,
              progress: Callable[[float], None] | None = None) -> np.ndarray:
        """Unit vectors (float32, one row per sequence) for this document's ids.

        ``check`` runs while waiting; whatever it raises (lease lost, shutdown) takes this
        document's ids out of the queue and propagates. ``progress`` gets the share done.
        """
        self.embedder.check_ids(sequences)
        if len(sequences) == 0:
            return np.empty((0, self.embedder.dim), dtype=np.float32)
        self._start()
        request = Request(sequences, self.embedder.dim)
        try:
            self._put(request, check)
            while not request.done.wait(POLL_S):
                check()
                if progress is not None:
                    progress(request.fraction())
        except BaseException:
            self._cancel(request)
            raise
        if request.error is not None:
            raise request.error
        return request.vectors

    def _put(self, request: Request, check: Callable[[], None]) -> None:
        lengths = [len(ids) for ids in request.sequences]
        while True:
            with self._cond:
                if request.admitted == 0:
                    self._waiting.append(request)
                room = self.capacity_tokens - self._queued_tokens
                # Always one id if none of ours is queued: a full queue never starves anyone.
                while request.admitted < len(lengths) and (
                        lengths[request.admitted] <= room or not request.untaken):
                    request.untaken.append(request.admitted)
                    room -= lengths[request.admitted]
                    self._queued_tokens += lengths[request.admitted]
                    request.admitted += 1
                self._cond.notify_all()
                if request.admitted == len(lengths):
                    return
                self._cond.wait(POLL_S)
            check()

    def _cancel(self, request: Request) -> None:
        with self._cond:
            request.cancelled = True
            self._queued_tokens -= sum(len(request.sequences[i]) for i in request.untaken)
            request.untaken.clear()
            if request in self._waiting:
                self._waiting.remove(request)
            self._cond.notify_all()

    # ── the threads ───────────────────────────────────────────────────────────────────────
    def _start(self) -> None:
        with self._cond:
            if self._threads or self._closed:
                return
            self._threads = [threading.Thread(target=self._prepare_forever, daemon=True,
                                              name="embed-prep"),
                             threading.Thread(target=self._forward_forever, daemon=True,
                                              name="embed-forward")]
            for thread in self._threads:
                thread.start()

    def close(self, timeout: float = 5) -> None:
        """Stop the threads once what is queued has run (tests, benches)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout)

    def _prepare_forever(self) -> None:
        while True:
            self._window_room.acquire()
            window = self._take()
            if window is None:
                self._ready.put(None)
                return
            prepared = []
            for items in window:
                try:
                    prepared.append(Pass(items, *model.pad([r.sequences[i] for r, i in items])))
                except Exception as exc:  # noqa: BLE001 - never lose the thread: fail the pass
                    log.exception("embedding pass could not be padded")
                    _fail_items(items, exc)
            if not prepared:
                self._window_room.release()
                continue
            prepared[-1].last_of_window = True
            for each in prepared:
                self._ready.put(each)

    def _take(self) -> list[list[tuple[Request, int]]] | None:
        """The next window, cut into passes; waits for ids; None once closed and empty."""
        with self._cond:
            while not any(r.untaken for r in self._waiting):
                if self._closed:
                    return None
                self._cond.wait()
            items = self._round_robin(WINDOW_PASSES * self.batch_tokens)
            lengths = [len(r.sequences[i]) for r, i in items]
            passes = [[items[k] for k in rows]
                      for rows in model.plan_batches(lengths, self.batch_tokens)]
            if len(passes) > 1 and self._waiting:
                # More is queued: the last, partial pass waits to be filled by the next window.
                for r, i in reversed(passes.pop()):
                    self._untake(r, i)
            taken = sum(len(r.sequences[i]) for p in passes for r, i in p)
            self._queued_tokens -= taken
            self._cond.notify_all()
            return passes

    def _round_robin(self, budget: int) -> list[tuple[Request, int]]:
        """One id from each waiting document in turn, oldest first, until ``budget`` tokens."""
        items: list[tuple[Request, int]] = []
        tokens = 0
        while self._waiting and tokens < budget:
            for request in list(self._waiting):
                if not request.untaken:
                    continue
                i = request.untaken.popleft()
                items.append((request, i))
                tokens += len(request.sequences[i])
                if tokens >= budget:
                    break
            self._waiting = [r for r in self._waiting
                             if r.untaken or r.admitted < len(r.sequences)]
            if not any(r.untaken for r in self._waiting):
                break
        return items

    def _untake(self, request: Request, i: int) -> None:
        if request.cancelled:
            return
        request.untaken.appendleft(i)
        if request not in self._waiting:
            self._waiting.insert(0, request)

    def _forward_forever(self) -> None:
        while True:
            prepared = self._ready.get()
            if prepared is None:
                return
            if prepared.last_of_window:
                self._window_room.release()  # the next window is taken while this pass runs
            try:
                self._run(prepared)
            except Exception as exc:  # noqa: BLE001 - never lose the thread: fail the pass
                log.exception("embedding pass could not be delivered")
                _fail_items(prepared.items, exc)

    def _run(self, prepared: Pass) -> None:
        live = [(r, i) for r, i in prepared.items if not r.cancelled and r.error is None]
        if not live:
            return
        if len(live) < len(prepared.items):
            prepared = Pass(live, *model.pad([r.sequences[i] for r, i in live]))
        started = time.perf_counter()
        try:
            vectors = self.embedder.forward(prepared.ids, prepared.mask)
        except Exception as exc:  # noqa: BLE001 - whose member failed is found below
            log.warning("an embedding pass failed; running its documents one by one",
                        extra={"error": type(exc).__name__, "documents":
                               len({id(r) for r, _ in prepared.items})})
            self.stats.isolated_passes += 1
            self._isolate(prepared.items)
            return
        self._count(prepared, time.perf_counter() - started)
        _deliver(prepared.items, vectors)

    def _isolate(self, items: list[tuple[Request, int]]) -> None:
        """Each document's members of a failed pass, alone: only the failing one fails."""
        by_request: dict[int, list[tuple[Request, int]]] = {}
        for item in items:
            by_request.setdefault(id(item[0]), []).append(item)
        for own in by_request.values():
            lengths = [len(r.sequences[i]) for r, i in own]
            try:
                for rows in model.plan_batches(lengths, self.batch_tokens):
                    part = [own[k] for k in rows]
                    ids, mask = model.pad([r.sequences[i] for r, i in part])
                    _deliver(part, self.embedder.forward(ids, mask))
            except Exception as exc:  # noqa: BLE001 - this document's run fails with it
                _fail_items(own, exc)

    def _count(self, prepared: Pass, seconds: float) -> None:
        stats = self.stats
        stats.passes += 1
        stats.sequences += len(prepared.items)
        stats.tokens += int(prepared.mask.sum())
        stats.padded_tokens += int(prepared.mask.size)
        stats.forward_s += seconds
        stats.largest_pass = max(stats.largest_pass, len(prepared.items))
        stats.documents += len({id(r) for r, _ in prepared.items})


class NoVector(ValueError):
    """The model returned a vector that is not finite for one of the document's chunks."""


def _deliver(items: list[tuple[Request, int]], vectors: np.ndarray) -> None:
    finite = np.isfinite(vectors).all(axis=1)
    for (request, i), vector, ok in zip(items, vectors, finite, strict=True):
        if request.cancelled or request.error is not None:
            continue
        if not ok:
            request.fail(NoVector(f"embed: the model produced no finite vector for chunk {i}"))
            continue
        request.vectors[i] = vector
        request.remaining -= 1
        if request.remaining == 0:
            request.done.set()


def _fail_items(items: list[tuple[Request, int]], error: BaseException) -> None:
    for request, _ in items:
        request.fail(error)
