"""A forward pass run in a child process: the worker's Python threads never hold up its launches.

On a GPU, eager torch releases and retakes the GIL around every kernel launch (~150 a pass for
MiniLM); in the worker's process the feeding, cutting and delivering threads take it at each
of those points and keep it for up to the interpreter's switch interval, so a pass whose
launches cost 3 ms alone took far longer (issue 34, ADR 0303). A child process runs the backend with a GIL
of its own: the parent's forward thread only copies a pass into shared memory, sends one small
message and waits (without the GIL) for one back.

One pass at a time, from one thread (the embed queue's forward thread). Ids and mask go over
in one shared block and the vectors come back in another, both grown to the largest pass and
reused. The child builds its backend from ``factory`` (a picklable callable: it is spawned, so
nothing of the parent's threads or CUDA state is inherited). A pass the backend fails raises
``RemoteError`` here with the child's error, and the child carries on; a pass the child died
in fails the same way (the queue runs its documents again one by one, ADR 0230), and a child
found dead is started again before the next pass.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import threading
import traceback
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any

import numpy as np

log = logging.getLogger(__name__)
# How long the child may take to build its backend (load weights, initialise CUDA).
START_TIMEOUT_S = 300.0


class RemoteError(RuntimeError):
    """The child's backend failed this pass, or the child itself is gone."""


class ForwardProcess:
    """A backend (``forward(ids, mask) -> vectors``) that runs ``factory()``'s backend in a
    spawned child process."""

    def __init__(self, factory: Callable[[], Any], dim: int, *,
                 name: str = "embed-forward") -> None:
        self.factory = factory
        self.dim = dim
        self.name = name
        self._lock = threading.Lock()
        self._child: Any = None
        self._pipe: Any = None
        self._into: shared_memory.SharedMemory | None = None
        self._back: shared_memory.SharedMemory | None = None

    # The parent's part of a pass ends with the send: the rest is a wait without the GIL.
    signals_launch = True

    def forward(self, ids: np.ndarray, mask: np.ndarray, *,
                launched: Callable[[], None] | None = None) -> np.ndarray:
        with self._lock:
            self._ensure_started()
            rows, width = ids.shape
            into = self._block("_into", 2 * ids.size * 8)
            staged = np.ndarray((2, rows, width), dtype=np.int64, buffer=into.buf)
            staged[0], staged[1] = ids, mask
            back = self._block("_back", max(1, rows) * self.dim * 4)  # float32
            try:
                self._pipe.send((rows, width, into.name, back.name))
                if launched is not None:
                    launched()
                reply = self._pipe.recv()
            except (EOFError, OSError) as exc:
                self._stop_child()
                raise RemoteError(f"embed: the forward process ended ({exc!r}); "
                                  "it starts again on the next pass") from exc
            if reply[0] == "error":
                raise RemoteError(f"embed: the forward pass failed in its process: {reply[1]}")
            return np.ndarray((rows, self.dim), dtype=np.float32, buffer=back.buf).copy()

    def close(self) -> None:
        with self._lock:
            self._stop_child()
            for attr in ("_into", "_back"):
                block = getattr(self, attr)
                if block is not None:
                    block.close()
                    block.unlink()
                    setattr(self, attr, None)

    def __del__(self) -> None:  # a bench or test that forgot close(): no leaked child or block
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing to report to
            self.close()

    # ── the child's lifecycle ─────────────────────────────────────────────────────────────
    def _ensure_started(self) -> None:
        if self._child is not None and self._child.is_alive():
            return
        self._stop_child()
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self._child = context.Process(target=_serve, args=(self.factory, child), name=self.name,
                                      daemon=True)
        self._child.start()
        child.close()
        self._pipe = parent
        if not parent.poll(START_TIMEOUT_S):
            self._stop_child()
            raise RemoteError(f"embed: the forward process did not start in {START_TIMEOUT_S} s")
        try:
            ready = parent.recv()
        except EOFError as exc:
            self._stop_child()
            raise RemoteError("embed: the forward process ended while starting; "
                              "see its output above") from exc
        if ready[0] != "ready":
            self._stop_child()
            raise RemoteError(f"embed: the forward process could not start: {ready[1]}")
        log.info("embedding forward process started", extra={"pid": self._child.pid})

    def _stop_child(self) -> None:
        if self._pipe is not None:
            with contextlib.suppress(OSError, ValueError):  # already gone
                self._pipe.send(None)
            self._pipe.close()
            self._pipe = None
        if self._child is not None:
            self._child.join(5)
            if self._child.is_alive():
                self._child.kill()
                self._child.join(5)
            self._child = None

    def _block(self, attr: str, size: int) -> shared_memory.SharedMemory:
        block = getattr(self, attr)
        if block is None or block.size < size:
            if block is not None:
                block.close()
                block.unlink()
            # Grown with headroom: a pass a little wider than the last needs no new block.
            block = shared_memory.SharedMemory(create=True, size=max(size, 1 << 20) * 5 // 4)
            setattr(self, attr, block)
        return block


def _serve(factory: Callable[[], Any], pipe: Any) -> None:
    """The child: build the backend, then run each pass the parent sends until told to stop."""
    try:
        backend = factory()
    except BaseException as exc:  # noqa: BLE001 - told to the parent, which refuses to start
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    pipe.send(("ready", None))
    blocks: dict[str, shared_memory.SharedMemory] = {}
    try:
        while True:
            try:
                message = pipe.recv()
            except EOFError:
                return  # the parent is gone
            if message is None:
                return
            rows, width, into_name, back_name = message
            try:
                into = _attach(blocks, "into", into_name)
                back = _attach(blocks, "back", back_name)
                staged = np.ndarray((2, rows, width), dtype=np.int64, buffer=into.buf)
                vectors = np.asarray(backend.forward(staged[0], staged[1]), dtype=np.float32)
                np.ndarray(vectors.shape, dtype=np.float32, buffer=back.buf)[:] = vectors
            except Exception as exc:  # noqa: BLE001 - this pass fails, the child carries on
                pipe.send(("error", f"{type(exc).__name__}: {exc}"))
                log.debug("forward pass failed in the child: %s", traceback.format_exc())
                continue
            pipe.send(("ok",))
    finally:
        for block in blocks.values():
            block.close()


def _attach(blocks: dict[str, shared_memory.SharedMemory], role: str,
            name: str) -> shared_memory.SharedMemory:
    """The parent's block for ``role`` by name; one the parent replaced (grown) is let go."""
    block = blocks.get(role)
    if block is None or block.name != name:
        if block is not None:
            block.close()
        block = blocks[role] = shared_memory.SharedMemory(name=name)
    return block
