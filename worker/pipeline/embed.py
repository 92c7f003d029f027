"""Embed stage: the chunks of every document in flight, embedded in shared forward passes.

One queue per worker process (docs/decisions/0230, 0300, 0303). A document submits its chunks'
token ids and gets a future of its vectors: nothing waits in the queue but the ids, and the
thread that delivered a document's last vector wakes that document alone (no condition shared
by every waiter, no thread per document needed).

A submit only lists its document; a packing thread puts the ids of what was listed into a pool,
many documents a step, while the forward thread's device waits (ADR 0370). The ids wait in the
pool: one arena of slots for every queued id, written once. A prep
thread cuts each pass from the whole pool, one pass ahead of the forward thread: the pool
sorted by length, the pass is the budget's worth of neighbouring lengths around the id that is
most overdue by its fair tag. So every pass serves the id that has waited longest, and pads
little, because the pool holds several passes' worth of every length (a pass cut from one
window of what had just arrived padded 11-12 %, ADR 0300). A forward thread runs the passes and
a delivering thread writes each pass's vectors into the pool's slots (one copy a pass) and
hands a document its vectors when its last one arrives, while the next pass runs.

Fair tags: an id's tag is its document's start plus the tokens before it in the document; a
document starts at the later of the tag served last and the tokens submitted before it divided
by the documents in flight. Documents queued together are served about in their order (so
they finish, and are replaced, in turn), and a small document behind a big one waits for a
share of it, not all of it.

A pass that fails is run again per document, so one document's bad member fails that
document's run only. A document that stops waiting (lease lost, shutdown) cancels its future
and takes its ids out.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging
import queue as stdqueue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from shared.embedding import batches, model

log = logging.getLogger(__name__)
# How often a caller of the blocking ``embed`` runs its ``check`` while it waits.
POLL_S = 0.2
# While the forward thread is busy, the next pass is cut once the pool holds HOLD passes' worth
# (a pass cut from a pool several times its size pads little), or when the running pass has
# CUT_MARGIN of its expected time left, whichever comes first (ADR 0303: 82 % of the fake GPU's
# bound against 78-80 % cutting as soon as one pass's worth waits).
HOLD = 4
CUT_MARGIN = 0.3
# The delivering and prep threads keep their Python work out of the forward thread's launches
# (ADR 0306), waiting at most this long for the device's wait to begin. Only a safety net: a
# backend that cannot tell when it begins (the CPU's) says so at once, and an idle forward
# thread says so too.
QUIET_WAIT_S = 0.5
# The packing thread fills the pool a 1/PACK_STEPS pass's tokens a step (ADR 0370): at the cuda
# defaults ~130,000 ids, ~3 ms of the GIL.
PACK_STEPS = 4
# The pool is sized at first for this many chunks a document in flight (it grows beyond).
PRESIZE_CHUNKS = 16


class Request(concurrent.futures.Future):  # type: ignore[type-arg]
    """One document's future of its vectors (float32, one row per sequence).

    Its callbacks run on the queue's delivering thread: they must hand off, never block.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.remaining = size  # ids without a vector yet (delivering thread only)
        self.serial = 0  # its name in the pool
        # Its ids' slots in the pool, in order, until it ends (then None: the slots are free).
        self.slots: np.ndarray | None = None

    def fail(self, error: BaseException) -> None:
        # Cancelled meanwhile, or failed by an earlier pass: the first ending stands.
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            self.set_exception(error)


@dataclass
class Pass:
    slots: np.ndarray          # each row's slot in the pool
    rows: np.ndarray           # each row's index in its document
    who: np.ndarray            # each row's document, an index into ``requests``
    requests: list[Request]    # the documents with rows in this pass
    counts: list[int]          # how many rows each
    ids: np.ndarray
    mask: np.ndarray
    tokens: int


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
    prep_s: float = 0.0        # the prep thread choosing, gathering and padding
    pack_s: float = 0.0        # the packing thread putting listed ids into the pool
    pack_steps: int = 0
    isolated_passes: int = 0
    largest_pass: int = 0
    # Sum over passes of the documents each held: / passes = documents a pass, on average.
    documents: int = 0


class _Pool:
    """Every id of every document in flight, in the slots of one arena, from submit until its
    document ends: its ids (int32, at the model's width), length, fair tag, owner and row,
    whether it still waits for a pass, and (once its pass ran) its vector.

    Guarded by the queue's lock, except that a taken slot's ids are read outside it: a grown
    arena is a new array, and a slot is only written again after its document ended (a pass
    that held it then computes a row nobody is given)."""

    def __init__(self, width: int, dim: int, capacity: int = 0) -> None:
        self.ids = np.zeros((0, width), dtype=np.int32)
        self.vectors = np.zeros((0, dim), dtype=np.float32)
        self.lengths = np.zeros(0, dtype=np.int64)
        self.tags = np.zeros(0, dtype=np.int64)
        self.serials = np.zeros(0, dtype=np.int64)
        self.rows = np.zeros(0, dtype=np.int64)
        self.owners = np.empty(0, dtype=object)
        self.queued = np.zeros(0, dtype=bool)
        self.free: list[int] = []
        self.count = 0    # ids waiting for a pass
        self.tokens = 0   # their tokens
        if capacity:
            self._grow(capacity)

    def put_many(self, requests: list[Request], packed: batches.Packed, counts: np.ndarray,
                 starts: np.ndarray) -> None:
        """Documents' ids, packed together in order (``counts`` rows each), into free slots in
        one step per array: per document, these numpy steps cost as much as packing its ids
        (ADR 0370). An id's tag is its document's start plus the tokens before it there."""
        n = len(packed)
        if len(self.free) < n:
            self._grow(n)
        slots = np.asarray(self.free[-n:], dtype=np.int64)
        del self.free[-n:]
        first = np.cumsum(counts) - counts  # each document's first row in ``packed``
        before = np.cumsum(packed.lengths) - packed.lengths
        self.ids[slots] = packed.ids
        self.lengths[slots] = packed.lengths
        self.tags[slots] = np.repeat(starts - before[first], counts) + before
        self.serials[slots] = np.repeat([r.serial for r in requests], counts)
        self.rows[slots] = np.arange(n) - np.repeat(first, counts)
        owners = np.empty(len(requests), dtype=object)
        owners[:] = requests
        self.owners[slots] = np.repeat(owners, counts)
        self.queued[slots] = True
        self.count += n
        self.tokens += int(packed.lengths.sum())
        for request, a, b in zip(requests, first.tolist(), (first + counts).tolist(),
                                 strict=True):
            request.slots = slots[a:b]

    def _grow(self, need: int) -> None:
        old = len(self.queued)
        new = max(2 * old, old + need, 1024)

        def grown(array: np.ndarray) -> np.ndarray:
            # Written whole now, so the pages are the process's before any pass: np.zeros maps
            # them lazily, and a delivery's first write into fresh slots then took 12-64 ms of
            # page faults (huge pages, numpy madvises them) where it takes ~0.6 (ADR 0450).
            out = np.empty((new, *array.shape[1:]), dtype=array.dtype)
            out[:old] = array
            out[old:] = 0
            return out

        self.ids, self.vectors = grown(self.ids), grown(self.vectors)
        self.lengths, self.tags = grown(self.lengths), grown(self.tags)
        self.serials, self.rows = grown(self.serials), grown(self.rows)
        self.owners = np.concatenate((self.owners, np.empty(new - old, dtype=object)))
        self.queued = grown(self.queued)
        self.free[:0] = range(new - 1, old - 1, -1)  # the lowest slots are used first

    def take(self, budget: int) -> tuple[np.ndarray, int]:
        """The slots of the next pass, no longer waiting, and the tag it serves: the most
        overdue id and, around it in length order, as many ids as fill ``budget`` padded
        tokens with the least padding (``batches.cut_around``)."""
        slots = np.flatnonzero(self.queued)
        lengths, tags = self.lengths[slots], self.tags[slots]
        first = int(np.argmin(tags))
        # By length, then tag, in one key: tags in the pool span far less than 2**40 tokens.
        order = np.argsort((lengths << 40) | (tags - tags[first]))
        at = int(np.flatnonzero(order == first)[0])
        a, b = batches.cut_around(lengths[order], at, budget)
        chosen = slots[order[a:b]]
        self.queued[chosen] = False
        self.count -= len(chosen)
        self.tokens -= int(lengths[order[a:b]].sum())
        return chosen, int(tags[first])

    def end(self, request: Request) -> np.ndarray | None:
        """The document ended (finished, failed, cancelled): its slots are free, and what it
        had not had run leaves. Returns its vectors, in order, if it had them all."""
        slots = request.slots
        if slots is None:
            return None
        request.slots = None
        waiting = slots[self.queued[slots]]
        self.queued[waiting] = False
        self.count -= len(waiting)
        self.tokens -= int(self.lengths[waiting].sum())
        self.owners[slots] = None  # no ended document kept alive by its slots
        self.free.extend(slots.tolist())
        return None if len(waiting) else self.vectors[slots]

    def end_many(self, requests: list[Request]) -> list[np.ndarray | None]:
        """``end`` for the documents whose last vectors one pass delivered, in one step per
        array rather than one per document (the delivering thread holds the GIL for it while
        the forward thread's launches wait)."""
        owned = [r.slots for r in requests if r.slots is not None]
        if not owned:
            return [None] * len(requests)
        slots = np.concatenate(owned)
        if self.queued[slots].any():  # not every id ran (cannot happen for a finished one)
            return [self.end(r) for r in requests]
        # Each document gathers its own rows into a small array of its own (~15 KB, reused heap
        # memory): one gather for the pass into a fresh ~13 MB array, split into views, took
        # 5-40 ms of page faults at the end of a run, and one slow document kept it all alive.
        arena = self.vectors
        out = [None if r.slots is None else arena[r.slots] for r in requests]
        for r in requests:
            r.slots = None
        self.owners[slots] = None
        self.free.extend(slots.tolist())
        return out


class EmbedQueue:
    def __init__(self, embedder: model.Embedder, *, batch_tokens: int = 0,
                 documents: int = 0) -> None:
        """``documents``: how many documents the worker keeps in flight (0 = the device's
        default); it spreads the fair tags of documents queued together (see above)."""
        self.embedder = embedder
        self.batch_tokens = batch_tokens or embedder.batch_tokens
        self.documents = documents or model.DEFAULT_DOCUMENTS_IN_FLIGHT.get(
            getattr(embedder, "device", "cpu"), 8)
        self.stats = QueueStats()
        self._lock = threading.Lock()
        # The prep thread waits on it: for ids, or for the forward thread to need a pass.
        self._work = threading.Condition(self._lock)
        # Sized once for the documents in flight: growing a pool of ~20,000 ids held the lock
        # (and the GIL) ~100 ms mid-run, copying ~80 MB, while passes waited (ADR 0370).
        # np.zeros takes zeroed pages from the OS lazily: slots never used cost no memory.
        self._pool = _Pool(embedder.max_seq_length, embedder.dim,
                           capacity=self.documents * PRESIZE_CHUNKS)
        # Documents submitted and not yet in the pool, with their fair start, for the packing
        # thread (it waits on ``_packable``); their tokens, so that the prep thread knows more
        # is on its way.
        self._packable = threading.Condition(self._lock)
        self._listed: list[tuple[Request, Sequence[batches.TokenIds], int, int]] = []
        self._listed_tokens = 0
        # How many tokens the packing thread puts in the pool a step: a step holds the GIL
        # (one array copy a document since ADR 0410; ~20 ns an id where ids come as lists), so
        # it is kept short enough not to delay a pass's launches.
        self._pack_tokens = max(1, self.batch_tokens // PACK_STEPS)
        self._serials = itertools.count(1)
        self._submitted = 0  # tokens ever submitted
        self._served = 0     # the highest tag a pass was cut around
        self._ready: stdqueue.SimpleQueue[Pass | None] = stdqueue.SimpleQueue()
        # One pass prepared ahead of the one running: the later a pass is cut, the more of the
        # pool it is cut from.
        self._room = threading.Semaphore(1)
        self._hold = HOLD * self.batch_tokens
        self._forward_idle = True
        # Set while the forward thread needs no GIL: idle, or its pass's launches done and the
        # device's wait begun. Clear while it runs Python (choosing, launching, handing on):
        # then every GIL-holding step of another thread stretches the pass (ADR 0306).
        self._quiet = threading.Event()
        self._quiet.set()
        # When the running pass started, and how long the last pass and the last cut took.
        self._pass_started = self._last_pass_s = self._last_prep_s = 0.0
        # Passes run, with their vectors, for the delivering thread (which wakes the documents:
        # the forward thread never waits for a document's callbacks).
        self._delivering: stdqueue.SimpleQueue[tuple[Pass, np.ndarray] | None] = (
            stdqueue.SimpleQueue())
        self._threads: list[threading.Thread] = []
        self._closed = False

    # ── the documents' side ───────────────────────────────────────────────────────────────
    def submit(self, sequences: Sequence[batches.TokenIds]) -> Request:
        """Queue this document's ids; the future's result is its unit vectors, in order.

        Only lists the document (microseconds): the packing thread puts the ids of what was
        listed into the pool, many documents a step, while the forward thread's device waits
        (ADR 0370). A submit that packed its own ids held the GIL ~170 us a document, through
        the forward thread's launches."""
        self.embedder.check_ids(sequences)
        request = Request(len(sequences))
        if request.size == 0:
            request.set_result(np.empty((0, self.embedder.dim), dtype=np.float32))
            return request
        tokens = sum(map(len, sequences))
        self._start()
        with self._work:
            if self._closed:
                raise RuntimeError("embed: the queue is closed")
            request.serial = next(self._serials)
            start = max(self._served, self._submitted // self.documents)
            self._submitted += tokens
            if not self._listed:
                self._packable.notify()
            self._listed.append((request, sequences, start, tokens))
            self._listed_tokens += tokens
        return request

    def embed(self, sequences: Sequence[batches.TokenIds], *,
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
            request.cancel()
            self._pool.end(request)

    def _fail(self, request: Request, error: BaseException) -> None:
        request.fail(error)
        with self._lock:
            self._pool.end(request)

    # ── the threads ───────────────────────────────────────────────────────────────────────
    def _start(self) -> None:
        with self._lock:
            if self._threads or self._closed:
                return
            self._threads = [threading.Thread(target=self._pack_forever, daemon=True,
                                              name="embed-pack"),
                             threading.Thread(target=self._prepare_forever, daemon=True,
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
            self._packable.notify()
        for thread in self._threads:
            thread.join(timeout)

    def _pack_forever(self) -> None:
        """Puts listed documents' ids into the pool, a step of many at a time, each step once
        the forward thread's launches are done (ADR 0306): never while a pass launches, and
        whether or not the next pass is already cut (ADR 0309's packing prep thread did not
        pack while it held a cut pass, and the forward thread starved)."""
        while True:
            with self._packable:
                while not self._listed and not self._closed:
                    self._packable.wait()
                if not self._listed:
                    return  # closed, and everything listed is in the pool
            self._quiet.wait(QUIET_WAIT_S)
            with self._lock:
                taken, tokens = 0, 0
                while taken < len(self._listed) and (not taken or tokens < self._pack_tokens):
                    tokens += self._listed[taken][3]
                    taken += 1
                step = self._listed[:taken]
                del self._listed[:taken]
            started = time.perf_counter()
            try:
                packed = batches.Packed(list(itertools.chain.from_iterable(s for _, s, _, _ in step)),
                                        self.embedder.max_seq_length, dtype=np.int32)
                counts = np.fromiter((r.size for r, *_ in step), dtype=np.int64,
                                     count=len(step))
                starts = np.fromiter((start for _, _, start, _ in step), dtype=np.int64,
                                     count=len(step))
            except Exception as exc:  # noqa: BLE001 - never lose the thread: fail the step
                log.exception("embedding ids could not be packed")
                with self._work:
                    self._listed_tokens -= tokens
                    self._work.notify()
                for request, *_ in step:
                    request.fail(exc)
                continue
            requests = [r for r, *_ in step]
            with self._work:
                waiting = self._pool.tokens
                self._pool.put_many(requests, packed, counts, starts)
                self._listed_tokens -= tokens
                for request in requests:
                    if request.done():  # cancelled while listed: its ids leave again
                        self._pool.end(request)
                # The prep thread is woken only when this step can change its decision (see
                # _cut_in): many wake-ups each cost the forward thread the GIL.
                if (not waiting or not self._listed_tokens
                        or waiting < self._hold <= self._pool.tokens
                        or waiting < self.batch_tokens <= self._pool.tokens):
                    self._work.notify()
            self.stats.pack_s += time.perf_counter() - started
            self.stats.pack_steps += 1

    def _prepare_forever(self) -> None:
        while True:
            self._room.acquire()
            with self._work:
                while True:
                    wait = self._cut_in()
                    if wait > 0:
                        self._work.wait(wait)
                        continue
                    if not self._quiet.is_set() and not self._closed:
                        # Due, but the forward thread is launching: cut once it waits.
                        self._lock.release()
                        try:
                            self._quiet.wait(QUIET_WAIT_S)
                        finally:
                            self._lock.acquire()
                    break
                if not self._pool.count:
                    self._ready.put(None)  # closed, and everything queued has run
                    return
                started = time.perf_counter()
                slots, served = self._pool.take(self.batch_tokens)
                self._served = max(self._served, served)
                pool = self._pool
                arena, lengths, rows = pool.ids, pool.lengths[slots], pool.rows[slots]
                serials, owners = pool.serials[slots], pool.owners[slots]
            try:
                prepared = _pad(arena, slots, lengths, rows, serials, owners)
            except Exception as exc:  # noqa: BLE001 - never lose the thread: fail the pass
                log.exception("an embedding pass could not be prepared")
                for request in {id(r): r for r in owners.tolist()}.values():
                    self._fail(request, exc)
                self._room.release()
                continue
            self._last_prep_s = time.perf_counter() - started
            self.stats.prep_s += self._last_prep_s
            self._ready.put(prepared)

    def _cut_in(self) -> float:
        """Seconds until the next pass should be cut (0: now; holds the lock). While the
        forward thread is busy, the cut waits until the pool holds HOLD passes' worth, or
        the running pass is about to end: the later it is cut, the more of the pool it is
        cut from, and the less it pads."""
        more = self._listed_tokens  # on its way to the pool
        if self._closed and not more:
            return 0.0
        if not self._pool.count:
            return 3600.0  # woken by the packing thread
        if self._forward_idle:
            # An idle forward thread takes what waits, unless more is being packed and a
            # whole pass is not yet there: then it waits for the pass (woken by the packer).
            return 0.0 if not more or self._pool.tokens >= self.batch_tokens else 3600.0
        if self._pool.tokens >= self._hold:
            return 0.0
        # The running pass should take about as long as the last one did; cut the next so it
        # is ready a margin before that.
        due = self._pass_started + (1 - CUT_MARGIN) * self._last_pass_s - self._last_prep_s
        return max(0.0, due - time.perf_counter())

    def _forward_forever(self) -> None:
        while True:
            waited = time.perf_counter()
            try:
                prepared = self._ready.get_nowait()
            except stdqueue.Empty:
                with self._work:
                    self._forward_idle = True
                    self._work.notify()
                self._quiet.set()  # idle: the other threads may have the GIL
                prepared = self._ready.get()
                self._forward_idle = False
            self._quiet.clear()
            self._pass_started = time.perf_counter()
            self.stats.starved_s += self._pass_started - waited
            self._room.release()  # the next pass is cut while this one runs
            if prepared is None:
                self._delivering.put(None)
                return
            try:
                self._run(prepared)
            except Exception as exc:  # noqa: BLE001 - never lose the thread: fail the pass
                log.exception("embedding pass could not be delivered")
                for request in prepared.requests:
                    self._fail(request, exc)

    def _run(self, prepared: Pass) -> None:
        if all(request.done() for request in prepared.requests):
            return  # every document in it stopped waiting
        started = time.perf_counter()
        try:
            # Not normalised here: the delivering thread does it, while the next pass runs.
            vectors = self.embedder.run(prepared.ids, prepared.mask, launched=self._quiet.set)
        except Exception as exc:  # noqa: BLE001 - whose member failed is found below
            self._quiet.clear()
            log.warning("an embedding pass failed; running its documents one by one",
                        extra={"error": type(exc).__name__,
                               "documents": len(prepared.requests)})
            self.stats.isolated_passes += 1
            self._isolate(prepared)
            return
        self._quiet.clear()  # this thread's Python again: hand on, take the next pass, launch
        self._last_pass_s = time.perf_counter() - started
        self._count(prepared, self._last_pass_s)
        # Handed on: the next pass starts while this one's documents get their rows.
        self._delivering.put((prepared, vectors))

    def _deliver_forever(self) -> None:
        while True:
            item = self._delivering.get()
            if item is None:
                return
            prepared, vectors = item
            # After the next pass's launches, if one runs: its kernels run meanwhile.
            self._quiet.wait(QUIET_WAIT_S)
            started = time.perf_counter()
            try:
                self._deliver(prepared, vectors)
            except Exception as exc:  # noqa: BLE001 - never lose the thread: fail the pass
                log.exception("embedding pass could not be delivered")
                for request in prepared.requests:
                    self._fail(request, exc)
            self.stats.deliver_s += time.perf_counter() - started

    def _deliver(self, prepared: Pass, vectors: np.ndarray) -> None:
        """The pass's vectors, normalised, into its slots (one copy), then each document whose
        last vectors these were gets all of its own, and is woken alone by its future."""
        vectors = model.unit(vectors, in_place=True)
        finite = np.isfinite(vectors).all(axis=1)
        broken = {} if finite.all() else dict(zip(prepared.who[~finite].tolist(),
                                                   prepared.rows[~finite].tolist(), strict=True))
        with self._lock:
            self._pool.vectors[prepared.slots] = vectors
        finished = []
        for k, (request, count) in enumerate(zip(prepared.requests, prepared.counts, strict=True)):
            if k in broken:
                self._fail(request, NoVector(
                    f"embed: the model produced no finite vector for chunk {broken[k]}"))
                continue
            request.remaining -= count
            if request.remaining == 0:
                finished.append(request)
        if not finished:
            return
        with self._lock:
            results = self._pool.end_many(finished)
        for request, result in zip(finished, results, strict=True):
            if result is not None:
                with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled now
                    request.set_result(result)

    def _isolate(self, prepared: Pass) -> None:
        """Each document's members of a failed pass, alone: only the failing one fails."""
        lengths = prepared.mask.sum(axis=1)
        for k, request in enumerate(prepared.requests):
            if request.done():
                continue
            mine = np.flatnonzero(prepared.who == k)
            try:
                for part in batches.plan_batches(lengths[mine].tolist(), self.batch_tokens):
                    these = mine[part]
                    width = int(lengths[these].max())
                    ids, mask = prepared.ids[these, :width], prepared.mask[these, :width]
                    alone = Pass(prepared.slots[these], prepared.rows[these],
                                 np.zeros(len(these), dtype=np.int64), [request], [len(these)],
                                 ids, mask, 0)
                    # Through the delivering thread too: it alone counts a document's rows.
                    self._delivering.put((alone, self.embedder.run(ids, mask)))
            except Exception as exc:  # noqa: BLE001 - this document's run fails with it
                self._fail(request, exc)

    def _count(self, prepared: Pass, seconds: float) -> None:
        stats = self.stats
        stats.passes += 1
        stats.sequences += len(prepared.ids)
        stats.tokens += prepared.tokens
        stats.padded_tokens += prepared.ids.size
        stats.forward_s += seconds
        stats.largest_pass = max(stats.largest_pass, len(prepared.ids))
        stats.documents += len(prepared.requests)


class NoVector(ValueError):
    """The model returned a vector that is not finite for one of the document's chunks."""


def _pad(arena: np.ndarray, slots: np.ndarray, lengths: np.ndarray, rows: np.ndarray,
         serials: np.ndarray, owners: np.ndarray) -> Pass:
    """One pass, gathered from the arena in one step, with the documents it serves."""
    _, first, who, counts = np.unique(serials, return_index=True, return_inverse=True,
                                      return_counts=True)
    width = int(lengths.max())
    ids = arena[slots, :width].astype(np.int64)
    mask = (np.arange(width) < lengths[:, None]).astype(np.int64)
    return Pass(slots, rows, who.reshape(-1), owners[first].tolist(), counts.tolist(), ids, mask,
                int(lengths.sum()))
