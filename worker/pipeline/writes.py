"""Write the documents that are ready at the same time in one transaction (docs/decisions/0233).

A small document's write is a handful of short statements; its BEGIN, COMMIT and pool checkout
cost as much again. So the worker's document jobs hand their finished content to one writer
thread, which takes whatever is waiting (never waiting for more: a lone document is written at
once) and writes it in one transaction, each document through ``index.write`` inside a savepoint
of its own. Each document still gets its own version, its own run outcome and its own error: a
document whose statements fail is rolled back to its savepoint and told why, the others commit.
Only a failure of the transaction itself (the connection, the COMMIT) reaches every document of
the group, and then nothing of the group was written.

Documents are written in the order of their document locks, so two workers' groups that touch
the same documents take those locks in the same order and cannot deadlock.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shared import db, jobs
from worker import runs
from worker.pipeline import index

log = logging.getLogger(__name__)
POLL_S = 0.2
# A group stops growing at either bound: a big document is written alone, small ones together.
MAX_DOCUMENTS = 64
MAX_CHUNKS = 4096


@dataclass
class _Write:
    job: jobs.IngestJob
    content: index.VersionContent
    stats: dict[str, Any]
    started: float
    fence: int
    # Runs when the writer takes the document: whatever it raises (lease lost, shutdown) leaves
    # the document unwritten with that error.
    check: Callable[[], None] = lambda: None
    future: concurrent.futures.Future = field(  # type: ignore[type-arg]
        default_factory=concurrent.futures.Future)
    result: tuple[int, dict[str, Any]] | None = None
    error: BaseException | None = None
    taken: bool = False


class GroupWriter:
    def __init__(self, pool: db.Pool, *, fts_config: str) -> None:
        self.pool = pool
        self.fts_config = fts_config
        self.groups = 0  # transactions committed or tried, for benches
        self.written = 0
        self._pending: list[_Write] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, job: jobs.IngestJob, content: index.VersionContent,
               stats: dict[str, Any], *, started: float, fence: int,
               check: Callable[[], None] = lambda: None
               ) -> concurrent.futures.Future:  # type: ignore[type-arg]
        """``index.write`` for this document in the next group, as a future: its result is
        what ``index.write`` returned, its exception what it raised. Never waits. Callbacks
        run on the writer thread: they must hand off, never block.

        ``check`` runs when the writer takes the document; if it raises, the document leaves
        unwritten with that error. Once taken, the write completes or fails on its own (the
        run's fence decides whether it may still succeed).
        """
        item = self._enqueue(_Write(job, content, stats, started, fence, check))
        return item.future

    def write(self, job: jobs.IngestJob, content: index.VersionContent, stats: dict[str, Any],
              *, started: float, fence: int,
              check: Callable[[], None] = lambda: None) -> tuple[int, dict[str, Any]]:
        """``submit``, waiting here; ``check`` also runs while waiting, and if it raises before
        the group is taken the document leaves the queue unwritten."""
        item = self._enqueue(_Write(job, content, stats, started, fence, check))
        while True:
            try:
                return item.future.result(timeout=POLL_S)  # type: ignore[no-any-return]
            except TimeoutError:
                if item.future.done():
                    raise
            try:
                check()
            except BaseException:
                with self._cond:
                    if not item.taken:
                        self._pending.remove(item)
                        raise
                # Being written: its outcome stands whatever happens to this job now.

    def _enqueue(self, item: _Write) -> _Write:
        with self._cond:
            self._pending.append(item)
            self._start()
            self._cond.notify()
        return item

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._write_forever, daemon=True,
                                            name="index-writer")
            self._thread.start()

    def _write_forever(self) -> None:
        while True:
            group = self._take()
            if not group:
                continue
            try:
                self._write_group(group)
            except BaseException as exc:  # noqa: BLE001 - nothing of the group was committed
                for item in group:
                    item.result, item.error = None, exc
            finally:
                self.groups += 1
                for item in group:
                    _settle(item)

    def _take(self) -> list[_Write]:
        dropped: list[_Write] = []
        try:
            return self._take_group(dropped)
        finally:
            for item in dropped:  # outside the lock: their callbacks may submit again
                _settle(item)

    def _take_group(self, dropped: list[_Write]) -> list[_Write]:
        with self._cond:
            while not self._pending:
                self._cond.wait()
            group: list[_Write] = []
            chunks = 0
            while self._pending and len(group) < MAX_DOCUMENTS:
                size = len(self._pending[0].content.chunks)
                if group and chunks + size > MAX_CHUNKS:
                    break
                item = self._pending.pop(0)
                item.taken = True
                try:
                    item.check()
                except BaseException as exc:  # noqa: BLE001 - its job stopped: not written
                    item.error = exc
                    dropped.append(item)
                    continue
                group.append(item)
                chunks += size
            return group

    def _write_group(self, group: list[_Write]) -> None:
        group.sort(key=lambda item: runs.lock_key(item.job.doc_id))
        with self.pool.connection() as conn:
            if len(group) == 1:
                self._write_one(conn, group[0])  # its own transaction: no savepoint needed
                return
            with conn.transaction():
                for item in group:
                    self._write_one(conn, item)

    def _write_one(self, conn: db.Conn, item: _Write) -> None:
        try:
            item.result = index.write(conn, item.job, item.content, item.stats,
                                      started=item.started, fts_config=self.fts_config,
                                      fence=item.fence)
            self.written += 1
        except Exception as exc:  # noqa: BLE001 - rolled back to its savepoint; its own error
            item.error = exc


def _settle(item: _Write) -> None:
    if item.error is not None:
        item.future.set_exception(item.error)
    else:
        item.future.set_result(item.result)
