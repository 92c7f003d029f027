"""The SQS side of the worker: receive when a slot is free, dispatch, settle each message.

Handlers know nothing of SQS; they return Ack, Leave or DeadLetter and this loop does the rest.
While a job runs, its message's visibility is extended in batches, so a healthy long job is
never redelivered under a running worker. SIGTERM stops polling at once (even mid long-poll),
gives jobs a grace period, then releases what is unfinished (visibility 0) and returns.

Acks that come together (the documents of one write group, docs/decisions/0233) are deleted
together, up to ten a call; each job still waits for its own delete before its slot frees.

Two bounds (docs/decisions/0301): ``slots`` threads run jobs' own work (a records import
throughout; a document until its chunks are queued for vectors), and ``in_flight`` messages are
held at once. A handler may answer Pending: the job goes on without its thread (a document
waiting for its vectors and its write), its message stays held and its visibility extended,
and it is settled when the job's outcome comes.
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue as stdqueue
import threading
import time
from collections.abc import Callable

from botocore.exceptions import BotoCoreError, ClientError

from shared import retry
from shared.queue import Message, Queue
from worker import metrics as worker_metrics
from worker.handler import Ack, DeadLetter, Leave, Outcome, Pending

log = logging.getLogger(__name__)
Handler = Callable[..., Outcome | Pending]
MAX_VISIBILITY_S = 12 * 3600  # SQS's ceiling
# While most slots are busy, a freed slot waits this long for others before polling, so one
# receive brings several documents rather than one per finished job (docs/decisions/0232).
GATHER_S = 0.05


class Consumer:
    def __init__(self, queue: Queue, handler: Handler, *, slots: int, wait_s: int,
                 visibility_s: int, heartbeat_s: float, grace_s: float,
                 on_abort: Callable[[], None] | None = None, in_flight: int = 0) -> None:
        self.queue = queue
        self.handler = handler
        self.slots = slots
        # Messages held at once, their jobs in a slot or pending (at least the slots).
        self.in_flight = max(slots, in_flight)
        self._threads = 0  # slots in use
        self.wait_s = wait_s
        self.visibility_s = visibility_s
        self.heartbeat_s = heartbeat_s
        self.grace_s = grace_s
        self.stopping = threading.Event()
        # Set on shutdown after the grace period: jobs stop at their next check.
        self.abort = threading.Event()
        # Called after the grace period, before unfinished messages are released: lets go of
        # their runs (the advisory locks), so whoever receives them can take them over at once.
        self.on_abort = on_abort
        self._inflight: dict[str, Message] = {}
        self._lock = threading.Lock()
        self._slot_freed = threading.Event()
        # Long polls abandoned at stop: one may still receive a message, even one we release.
        self._late_polls: list[threading.Thread] = []
        self._deletes = _Deletes(queue)
        # Settles what a pending job answered other than Ack (rare: a failure or a leave).
        self._settler: stdqueue.SimpleQueue[tuple[Message, Outcome]] = stdqueue.SimpleQueue()
        self._settler_thread: threading.Thread | None = None
        self.processed = 0

    def stop(self) -> None:
        self.stopping.set()

    def run(self, *, once: bool = False) -> int:
        extender = threading.Thread(target=self._extend_forever, daemon=True, name="visibility")
        extender.start()
        try:
            self._poll(once)
        finally:
            self._shutdown()
        return 0

    # ── polling ───────────────────────────────────────────────────────────────────────────
    def _poll(self, once: bool) -> None:
        while not self.stopping.is_set():
            free = self._gather()
            if free <= 0:
                self._slot_freed.wait(0.5)
                self._slot_freed.clear()
                continue
            messages = self._receive(free, 1 if once else self.wait_s)
            if messages is None:
                return
            if not messages and once and self._count() == 0 and self._drained():
                return
            for message in messages:
                self._dispatch(message)

    def _free(self) -> int:
        """Messages this consumer may take now: a free slot each, within the in-flight bound."""
        with self._lock:
            return min(self.slots - self._threads, self.in_flight - len(self._inflight))

    def _gather(self) -> int:
        """Free slots, after up to GATHER_S for more while fewer than half of them are free."""
        deadline = time.monotonic() + GATHER_S
        free = self._free()
        while 0 < free < min(self.slots, 10) / 2 and time.monotonic() < deadline:
            self._slot_freed.wait(max(0.0, deadline - time.monotonic()))
            self._slot_freed.clear()
            free = self._free()
        return free

    def _drained(self) -> bool:
        """Nothing visible and nothing in flight: messages left for later still count as work."""
        try:
            depth = self.queue.depth()
        except (BotoCoreError, ClientError):
            return False
        return depth["visible"] + depth["in_flight"] == 0

    def _receive(self, count: int, wait_s: int) -> list[Message] | None:
        """Long-poll in a helper thread so a stop request need not wait for it; None = stopped."""
        result: stdqueue.Queue = stdqueue.Queue(maxsize=1)

        def call() -> None:
            try:
                result.put(self.queue.receive(count, wait_s, self.visibility_s))
            except (BotoCoreError, ClientError) as exc:
                result.put(exc)

        thread = threading.Thread(target=call, daemon=True, name="receive")
        thread.start()
        while not self.stopping.is_set():
            try:
                got = result.get(timeout=0.2)
            except stdqueue.Empty:
                continue
            if isinstance(got, Exception):
                log.warning("receive failed; retrying shortly", extra={"error": str(got)})
                self.stopping.wait(2)
                return []
            return got
        # Stopped mid-poll: anything that poll still brings back goes straight back.
        late = threading.Thread(target=self._release_late, args=(result,), daemon=True)
        late.start()
        self._late_polls.append(late)
        return None

    def _release_late(self, result: stdqueue.Queue) -> None:
        got = result.get()
        if isinstance(got, list):
            for message in got:
                self._set_visibility(message, 0)

    def _dispatch(self, message: Message) -> None:
        with self._lock:
            self._inflight[message.receipt_handle] = message
            self._threads += 1
        threading.Thread(target=self._work, args=(message,), daemon=True,
                         name=f"job-{message.message_id[:8]}").start()

    def _count(self) -> int:
        with self._lock:
            return len(self._inflight)

    # ── one message ───────────────────────────────────────────────────────────────────────
    def _work(self, message: Message) -> None:
        pending = False
        try:
            try:
                outcome = self.handler(message.body, abort=self.abort)
            except Exception:
                log.exception("handler crashed; leaving the message for redelivery")
                outcome = Leave("handler crashed")
            if isinstance(outcome, Pending):
                pending = True
                outcome.future.add_done_callback(lambda done: self._ended(message, done))
                return
            if self._holds(message):
                self._settle(message, outcome)
        finally:
            with self._lock:
                self._threads -= 1
                if not pending:
                    self._inflight.pop(message.receipt_handle, None)
                    self.processed += 1
            self._slot_freed.set()

    def _holds(self, message: Message) -> bool:
        """Still ours to settle: not released at shutdown meanwhile."""
        with self._lock:
            return message.receipt_handle in self._inflight

    def _ended(self, message: Message, done) -> None:  # type: ignore[no-untyped-def]
        """A pending job's outcome came (on whichever thread ended it: never block here)."""
        try:
            outcome = done.result()
        except Exception:  # noqa: BLE001 - a pending job's future always carries an Outcome
            log.exception("a pending job ended without an outcome; leaving its message")
            outcome = Leave("handler crashed")
        if not self._holds(message):
            self._forget(message)
        elif isinstance(outcome, Ack):
            worker_metrics.settled("ack")
            self._deletes.delete_later(message.receipt_handle,
                                       lambda error: self._deleted(message, error))
        else:
            self._settle_later(message, outcome)

    def _deleted(self, message: Message, error: Exception | None) -> None:
        if error is not None:
            # The message comes back after its visibility timeout; the run's status decides then.
            log.error("could not settle the message", extra={
                "message_id": message.message_id, "outcome": "Ack", "error": str(error)})
        self._forget(message)

    def _forget(self, message: Message) -> None:
        with self._lock:
            self._inflight.pop(message.receipt_handle, None)
            self.processed += 1
        self._slot_freed.set()

    def _settle_later(self, message: Message, outcome: Outcome) -> None:
        with self._lock:
            if self._settler_thread is None:
                self._settler_thread = threading.Thread(target=self._settle_forever,
                                                        daemon=True, name="settle")
                self._settler_thread.start()
        self._settler.put((message, outcome))

    def _settle_forever(self) -> None:
        while True:
            message, outcome = self._settler.get()
            try:
                if self._holds(message):
                    self._settle(message, outcome)
            finally:
                self._forget(message)

    def _settle(self, message: Message, outcome: Outcome) -> None:
        worker_metrics.settled(type(outcome).__name__.lower())
        try:
            if isinstance(outcome, Ack):
                self._deletes.delete(message.receipt_handle)
            elif isinstance(outcome, DeadLetter):
                retry.transient()(self.queue.dead_letter)(message, outcome.reason)
                log.error("message moved to the dead-letter queue",
                          extra={"message_id": message.message_id, "reason": outcome.reason})
            elif outcome.visible_after_s is not None:
                # Rounded up: coming back a fraction early would find the same answer again.
                self._set_visibility(message, math.ceil(outcome.visible_after_s))
        except (BotoCoreError, ClientError) as exc:
            # The message comes back after its visibility timeout; the run's status decides then.
            log.error("could not settle the message", extra={
                "message_id": message.message_id, "outcome": type(outcome).__name__,
                "error": str(exc)})

    def _set_visibility(self, message: Message, seconds: int) -> None:
        with contextlib.suppress(BotoCoreError, ClientError):
            self.queue.change_visibility(message.receipt_handle,
                                         max(0, min(seconds, MAX_VISIBILITY_S)))

    # ── heartbeat on the queue side ───────────────────────────────────────────────────────
    def _extend_forever(self) -> None:
        while not self.abort.wait(self.heartbeat_s):
            with self._lock:
                receipts = list(self._inflight)
            if not receipts:
                continue
            try:
                refused = self.queue.change_visibility_batch(receipts, self.visibility_s)
            except (BotoCoreError, ClientError) as exc:
                log.warning("could not extend message visibility", extra={"error": str(exc)})
                continue
            if refused:
                log.warning("queue refused to extend some messages",
                            extra={"messages": len(refused)})

    # ── shutdown ──────────────────────────────────────────────────────────────────────────
    def _shutdown(self) -> None:
        deadline = time.monotonic() + self.grace_s
        while self._count() and time.monotonic() < deadline:
            self._slot_freed.wait(0.2)
            self._slot_freed.clear()
        self.abort.set()
        with self._lock:
            unfinished = list(self._inflight.values())
            self._inflight.clear()
        if unfinished and self.on_abort is not None:
            self.on_abort()  # the runs' locks go first...
        for message in unfinished:
            # ...then the messages: whoever receives one finds the run free and takes it over.
            self._set_visibility(message, 0)
        if unfinished:
            # Our own abandoned long poll may be the first to see a released message; it returns
            # at once then, and its late release must happen before this process exits, or the
            # message would stay hidden for a whole visibility timeout.
            for late in self._late_polls:
                late.join(timeout=2)
            log.warning("released unfinished jobs at shutdown", extra={"jobs": len(unfinished)})


class _Delete:
    def __init__(self, receipt: str,
                 then: Callable[[Exception | None], None] | None = None) -> None:
        self.receipt = receipt
        self.then = then
        self.done = threading.Event()
        self.error: Exception | None = None


class _Deletes:
    """One thread deleting acknowledged messages, up to ten per call, taking whatever waits
    (never waiting for more). A caller returns once its own message is deleted, or raises why not."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.calls = 0
        self._pending: list[_Delete] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def delete(self, receipt: str) -> None:
        entry = self._add(receipt)
        entry.done.wait()
        if entry.error is not None:
            raise entry.error

    def delete_later(self, receipt: str, then: Callable[[Exception | None], None]) -> None:
        """Delete with the next call and return at once; ``then`` gets the error or None
        (on the delete thread: it must not block)."""
        self._add(receipt, then)

    def _add(self, receipt: str,
             then: Callable[[Exception | None], None] | None = None) -> _Delete:
        entry = _Delete(receipt, then)
        with self._cond:
            self._pending.append(entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._forever, daemon=True,
                                                name="delete-messages")
                self._thread.start()
            self._cond.notify()
        return entry

    def _forever(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                batch, self._pending = self._pending[:10], self._pending[10:]
            try:
                refused = set(retry.transient()(self.queue.delete_batch)(
                    [e.receipt for e in batch]))
                self.calls += 1
                for entry in batch:
                    if entry.receipt in refused:
                        entry.error = ClientError(
                            {"Error": {"Code": "BatchEntryRefused",
                                       "Message": "the queue refused to delete the message"}},
                            "DeleteMessageBatch")
            except Exception as exc:  # noqa: BLE001 - each caller logs its own
                for entry in batch:
                    entry.error = exc
            for entry in batch:
                entry.done.set()
                if entry.then is not None:
                    try:
                        entry.then(entry.error)
                    except Exception:  # noqa: BLE001 - never lose the delete thread
                        log.exception("after a delete")
