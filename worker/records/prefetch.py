"""One item of an iterator computed ahead, on a thread of its own (docs/decisions/0460).

The records job reads and validates a chunk (pyarrow and polars, which let go of the GIL) while
the previous chunk's COPY runs in Postgres: the items are consumed in order, one thread writes,
so a chunk is staged and committed exactly as before and a takeover resumes after the last
committed one. At most one item waits and one is being made: memory stays flat.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
_END = object()


class Prefetch(Generic[T]):
    """``items`` made on a thread, one ahead of the consumer; its error raised where the
    consumer reaches it. ``close`` (also on leaving the ``with``) stops the thread after the
    item under way and waits for it: the caller may then close what ``items`` reads."""

    def __init__(self, items: Iterator[T], name: str = "records-prefetch") -> None:
        self._queue: queue.Queue[tuple[object, BaseException | None]] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(items,), name=name, daemon=True)
        self._thread.start()

    def __enter__(self) -> Prefetch[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[T]:
        while True:
            item, error = self._queue.get()
            if error is not None:
                raise error
            if item is _END:
                return
            yield item  # type: ignore[misc]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self, items: Iterator[T]) -> None:
        try:
            for item in items:
                if not self._put(item, None):
                    return
            self._put(_END, None)
        except BaseException as exc:  # noqa: BLE001 - raised on the consumer's thread
            self._put(None, exc)

    def _put(self, item: object, error: BaseException | None) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put((item, error), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False
