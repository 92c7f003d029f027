"""Embed stage: the chunks of every document in flight, embedded in shared forward passes.

One queue per worker process (docs/decisions/0230, 0300). A document submits its chunks' token
ids and gets a future of its vectors: nothing waits in the queue but the ids, and the thread
that delivered a document's last vector wakes that document alone (no condition shared by every
waiter, no thread per document needed). A prep thread takes a window of what is queued
(oldest documents first, an equal share each, so a small document is not stuck behind a big
one), sorts it by length, cuts it into passes of at most EMBED_BATCH_TOKENS padded tokens and
pads them with numpy from each document's ids packed once at submit; a forward thread runs the
passes, and a delivering thread hands each document its own rows while the next pass runs.
Padding the next pass, running this one, delivering the last one and the documents' database
writes all overlap, so the model never waits for Postgres or for a document's callbacks.

A pass that fails is run again per document, so one document's bad member fails that
document's run only. A document that stops waiting (lease lost, shutdown) cancels its future
and takes its ids out.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import contextlib
import itertools
import logging
import queue as stdqueue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from shared.embedding import batches, model

log = logging.getLogger(__name__)
# How often a caller of the blocking ``embed`` runs its ``check`` while it waits.
POLL_S = 0.2
# A window is taken up to this many passes' worth of tokens, then sorted by length and cut:
# sorting a few passes together is what keeps padding short when documents' lengths mix.
# The next window is taken when the forward thread starts the current window's last pass:
# late enough to hold what arrived meanwhile (full passes), early enough to be padded in time.
WINDOW_PASSES = 4


class Request(concurrent.futures.Future):  # type: ignore[type-arg]
    """One document's ids and the future of its vectors (float32, one row per sequence).

    Its callbacks run on the queue's delivering thread: they must hand off, never block.
    """

    def __init__(self, sequences: Sequence[Sequence[int]], dim: int, width: int = 0) -> None:
        super().__init__()
        # Packed once, here, on the submitting thread: the prep thread only stacks and gathers.
        self.packed = batches.Packed(sequences, width)
        self.size = len(sequences)
        # Tokens before each id (a Python list: the prep thread's arithmetic on it stays cheap):
        # the tokens of ids [a, b) are cum[b] - cum[a].
        self.cum = [0, *itertools.accumulate(len(s) for s in sequences)]
        self.vectors = np.empty((self.size, dim), dtype=np.float32)
        self.next = 0  # ids [0, next) are taken by the prep thread
        self.remaining = self.size  # ids without a vector yet (delivering thread only)

    def fail(self, error: BaseException) -> None:
        # Cancelled meanwhile, or failed by an earlier pass: the first ending stands.
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            self.set_exception(error)


@dataclass
class Pass:
    # (request, its rows in this pass, [start, stop) of those rows in ids): rows of a request
    # are contiguous here, so delivering is one slice per document.
    segments: list[tuple[Request, np.ndarray, int, int]]
    ids: np.ndarray
    mask: np.ndarray
    tokens: int
    last_of_window: bool = False


@dataclass
class QueueStats:
    """What the queue did, for benches and logs: passes, sequences, real and padded tokens,
    and where the forward thread's time went."""

    passes: int = 0
    sequences: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    forward_s: float = 0.0     # inside Embedder.forward
    deliver_s: float = 0.0     # handing documents their rows, waking them (its own thread)
    starved_s: float = 0.0     # the forward thread waiting for a prepared pass
    prep_s: float = 0.0        # the prep thread taking, sorting, cutting and padding
    isolated_passes: int = 0
    largest_pass: int = 0
    # Sum over passes of the documents each held: / passes = documents a pass, on average.
    documents: int = 0


@dataclass
class _Window:
    """Taken ids as arrays: their packed ids (one width for all), which request (index into
    ``requests``), which row of it, its length, and whether it was held back once already (it
    is never held back twice)."""

    requests: list[Request] = field(default_factory=list)
    ids: np.ndarray = field(default_factory=lambda: np.empty((0, 0), np.int64))
    who: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    lengths: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    carried: np.ndarray = field(default_factory=lambda: np.empty(0, bool))

    def __len__(self) -> int:
        return len(self.rows)


class EmbedQueue:
    def __init__(self, embedder: model.Embedder, *, batch_tokens: int = 0) -> None:
        self.embedder = embedder
        self.batch_tokens = batch_tokens or embedder.batch_tokens
        self.stats = QueueStats()
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # only the prep thread waits on it
        self._waiting: list[Request] = []  # oldest first, each with ids not yet taken
        self._ready: stdqueue.SimpleQueue[Pass | None] = stdqueue.SimpleQueue()
        # Passes run, with their vectors, for the delivering thread (which wakes the documents:
        # the forward thread never waits for a document's callbacks).
        self._delivering: stdqueue.SimpleQueue[tuple[Pass, np.ndarray] | None] = (
            stdqueue.SimpleQueue())
        # Held by the prep thread from taking a window until the forward thread starts that
        # window's last pass.
        self._window_room = threading.Semaphore(1)
        self._threads: list[threading.Thread] = []
        self._closed = False

    # ── the documents' side ───────────────────────────────────────────────────────────────
    def submit(self, sequences: Sequence[Sequence[int]]) -> Request:
        """Queue this document's ids; the future's result is its unit vectors, in order."""
        self.embedder.check_ids(sequences)
        request = Request(sequences, self.embedder.dim, self.embedder.max_seq_length)
        if request.size == 0:
            request.set_result(request.vectors)
            return request
        self._start()
        with self._work:
            if self._closed:
                raise RuntimeError("embed: the queue is closed")
            self._waiting.append(request)
            self._work.notify()
        return request

    def embed(self, sequences: Sequence[Sequence[int]], *,
              check: Callable[[], None] = lambda: None) -> np.ndarray:
        """Unit vectors (float32, one row per sequence) for this document's ids, waiting here.

        ``check`` runs while waiting; whatever it raises (lease lost, shutdown) takes this
        document's ids out of the queue and propagates.
        """
        request = self.submit(sequences)
        try:
            while True:
                try:
                    return request.result(timeout=POLL_S)
                except TimeoutError:
                    if request.done():
                        raise  # the document's own error, not the wait's
                    check()
        except BaseException:
            self.cancel(request)
            raise

    def cancel(self, request: Request) -> None:
        """The document stopped waiting: its untaken ids leave, its taken ones go unrun or
        undelivered, and its future is cancelled (if it has not finished)."""
        with self._lock:
            if request in self._waiting:
                self._waiting.remove(request)
            request.cancel()

    # ── the threads ───────────────────────────────────────────────────────────────────────
    def _start(self) -> None:
        with self._lock:
            if self._threads or self._closed:
                return
            self._threads = [threading.Thread(target=self._prepare_forever, daemon=True,
                                              name="embed-prep"),
                             threading.Thread(target=self._forward_forever, daemon=True,
                                              name="embed-forward"),
                             threading.Thread(target=self._deliver_forever, daemon=True,
                                              name="embed-deliver")]
            for thread in self._threads:
                thread.start()

    def close(self, timeout: float = 5) -> None:
        """Stop the threads once what is queued has run (tests, benches)."""
        with self._work:
            self._closed = True
            self._work.notify()
        for thread in self._threads:
            thread.join(timeout)

    def _prepare_forever(self) -> None:
        carry = _Window()
        while True:
            self._window_room.acquire()
            with self._work:
                while not self._waiting and not len(carry):
                    if self._closed:
                        self._ready.put(None)
                        return
                    self._work.wait()
                started = time.perf_counter()
                window = _merge(carry, self._take(WINDOW_PASSES * self.batch_tokens))
                more = bool(self._waiting)
            try:
                passes, carry = self._cut(window, hold_back=more)
            except Exception as exc:  # noqa: BLE001 - never lose the thread: fail the window
                log.exception("embedding passes could not be prepared")
                for request in window.requests:
                    request.fail(exc)
                passes, carry = [], _Window()
            self.stats.prep_s += time.perf_counter() - started
            if not passes:
                self._window_room.release()
                continue
            passes[-1].last_of_window = True
            for each in passes:
                self._ready.put(each)

    def _take(self, budget: int) -> _Window:
        """Up to ``budget`` tokens of ids, oldest documents first, an equal share each (at
        least one id each per round), each document's ids in order. Holds the lock."""
        taken: list[tuple[Request, int, int]] = []
        tokens = 0
        active = list(self._waiting)
        while active and tokens < budget:
            share = (budget - tokens) // len(active)
            still = []
            for request in active:
                if tokens >= budget:
                    break
                start, cum = request.next, request.cum
                if cum[-1] - cum[start] <= share:
                    stop = request.size  # the rest of it fits: the common case
                else:
                    stop = max(start + 1, bisect.bisect_right(cum, cum[start] + share) - 1)
                taken.append((request, start, stop))
                request.next = stop
                tokens += cum[stop] - cum[start]
                if stop < request.size:
                    still.append(request)
            active = still
        self._waiting = [r for r in self._waiting if r.next < r.size]
        return _window(taken)

    def _cut(self, window: _Window, *, hold_back: bool) -> tuple[list[Pass], _Window]:
        """The window's live ids sorted by length and cut into padded passes; while more is
        queued, a last partial pass is held back to be filled by the next window (once)."""
        live = np.fromiter((not r.done() for r in window.requests), dtype=bool,
                           count=len(window.requests))
        if len(window) and not live.all():
            window = _select(window, live[window.who])
        if not len(window):
            return [], _Window()
        order = np.argsort(window.lengths, kind="stable")
        ranges = batches.cut_sorted(window.lengths[order], self.batch_tokens)
        carry = _Window()
        if hold_back and len(ranges) > 1 and not window.carried[order[ranges[-1][0]:]].any():
            a, _ = ranges.pop()
            carry = _select(window, order[a:])
            carry.carried[:] = True
        return [self._pad(window, order[a:b]) for a, b in ranges], carry

    def _pad(self, window: _Window, items: np.ndarray) -> Pass:
        """One pass: gathered from the window's packed ids in one step, grouped by document
        (order within a pass changes nothing), so each document's rows are one slice."""
        items = items[np.argsort(window.who[items], kind="stable")]
        who, lengths = window.who[items], window.lengths[items]
        width = int(lengths.max())
        ids = window.ids[items, :width]
        mask = (np.arange(width) < lengths[:, None]).astype(np.int64)
        bounds = np.flatnonzero(np.diff(who)) + 1
        starts, stops = [0, *bounds.tolist()], [*bounds.tolist(), len(items)]
        rows = window.rows[items]
        requests = window.requests
        segments = [(requests[k], rows[a:b], a, b)
                    for k, a, b in zip(who[starts].tolist(), starts, stops, strict=True)]
        return Pass(segments, ids, mask, int(lengths.sum()))

    def _forward_forever(self) -> None:
        while True:
            waited = time.perf_counter()
            prepared = self._ready.get()
            self.stats.starved_s += time.perf_counter() - waited
            if prepared is None:
                self._delivering.put(None)
                return
            if prepared.last_of_window:
                self._window_room.release()  # the next window is taken while this pass runs
            try:
                self._run(prepared)
            except Exception as exc:  # noqa: BLE001 - never lose the thread: fail the pass
                log.exception("embedding pass could not be delivered")
                for request, *_ in prepared.segments:
                    request.fail(exc)

    def _run(self, prepared: Pass) -> None:
        if all(request.done() for request, *_ in prepared.segments):
            return  # every document in it stopped waiting
        started = time.perf_counter()
        try:
            vectors = self.embedder.forward(prepared.ids, prepared.mask)
        except Exception as exc:  # noqa: BLE001 - whose member failed is found below
            log.warning("an embedding pass failed; running its documents one by one",
                        extra={"error": type(exc).__name__,
                               "documents": len(prepared.segments)})
            self.stats.isolated_passes += 1
            self._isolate(prepared)
            return
        self._count(prepared, time.perf_counter() - started)
        # Handed on: the next pass starts while this one's documents get their rows.
        self._delivering.put((prepared, vectors))

    def _deliver_forever(self) -> None:
        while True:
            item = self._delivering.get()
            if item is None:
                return
            prepared, vectors = item
            started = time.perf_counter()
            try:
                _deliver(prepared.segments, vectors)
            except Exception as exc:  # noqa: BLE001 - never lose the thread: fail the pass
                log.exception("embedding pass could not be delivered")
                for request, *_ in prepared.segments:
                    request.fail(exc)
            self.stats.deliver_s += time.perf_counter() - started

    def _isolate(self, prepared: Pass) -> None:
        """Each document's members of a failed pass, alone: only the failing one fails."""
        for request, rows, _, _ in prepared.segments:
            if request.done():
                continue
            lengths = request.packed.lengths[rows]
            try:
                for part in batches.plan_batches(lengths.tolist(), self.batch_tokens):
                    mine = rows[part]
                    width = int(lengths[part].max())
                    mask = (np.arange(width) < lengths[part][:, None]).astype(np.int64)
                    ids = request.packed.ids[mine, :width]
                    alone = Pass([(request, mine, 0, len(mine))], ids, mask, 0)
                    # Through the delivering thread too: it alone counts a document's rows.
                    self._delivering.put((alone, self.embedder.forward(ids, mask)))
            except Exception as exc:  # noqa: BLE001 - this document's run fails with it
                request.fail(exc)

    def _count(self, prepared: Pass, seconds: float) -> None:
        stats = self.stats
        stats.passes += 1
        stats.sequences += len(prepared.ids)
        stats.tokens += prepared.tokens
        stats.padded_tokens += prepared.ids.size
        stats.forward_s += seconds
        stats.largest_pass = max(stats.largest_pass, len(prepared.ids))
        stats.documents += len(prepared.segments)


class NoVector(ValueError):
    """The model returned a vector that is not finite for one of the document's chunks."""


def _deliver(segments: list[tuple[Request, np.ndarray, int, int]], vectors: np.ndarray) -> None:
    """Each document its rows (one slice each); a document whose last rows these are is woken,
    alone, by its own future."""
    finite = np.isfinite(vectors).all(axis=1)
    all_finite = bool(finite.all())
    for request, rows, start, stop in segments:
        if request.done():
            continue  # cancelled, or failed by an earlier pass
        if not all_finite and not finite[start:stop].all():
            bad = int(rows[int(np.argmin(finite[start:stop]))])
            request.fail(NoVector(f"embed: the model produced no finite vector for chunk {bad}"))
            continue
        request.vectors[rows] = vectors[start:stop]
        request.remaining -= stop - start
        if request.remaining == 0:
            with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled now
                request.set_result(request.vectors)


def _window(taken: list[tuple[Request, int, int]]) -> _Window:
    if not taken:
        return _Window()
    requests: list[Request] = []
    index: dict[int, int] = {}
    owners, counts = [], []
    for request, start, stop in taken:
        k = index.setdefault(id(request), len(requests))
        if k == len(requests):
            requests.append(request)
        owners.append(k)
        counts.append(stop - start)
    count = np.asarray(counts)
    first = np.cumsum(count) - count  # where each range starts in the window
    starts = np.fromiter((start for _, start, _ in taken), dtype=np.int64, count=len(taken))
    total = int(count.sum())
    return _Window(
        requests,
        np.concatenate([r.packed.ids[a:b] for r, a, b in taken]),
        np.repeat(np.asarray(owners), count),
        np.arange(total) - np.repeat(first - starts, count),
        np.concatenate([r.packed.lengths[a:b] for r, a, b in taken]),
        np.zeros(total, dtype=bool))


def _select(window: _Window, which: np.ndarray) -> _Window:
    """The ``which`` ids of ``window``, naming only their own requests (oldest first still): a
    held-back carry that kept its whole window's requests would grow them window by window."""
    used, who = np.unique(window.who[which], return_inverse=True)
    return _Window([window.requests[k] for k in used.tolist()], window.ids[which],
                   who.reshape(-1).astype(np.int64), window.rows[which], window.lengths[which],
                   window.carried[which].copy())


def _merge(first: _Window, second: _Window) -> _Window:
    if not len(first):
        return second
    if not len(second):
        return first
    offset = len(first.requests)
    return _Window(first.requests + second.requests,
                   np.concatenate((first.ids, second.ids)),
                   np.concatenate((first.who, second.who + offset)),
                   np.concatenate((first.rows, second.rows)),
                   np.concatenate((first.lengths, second.lengths)),
                   np.concatenate((first.carried, second.carried)))
