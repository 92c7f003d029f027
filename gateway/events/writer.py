"""The gateway's event writer: a few tasks per process drain one bounded queue and commit
events in groups, one multi-row upsert per group, each task on a connection of its own
(docs/decisions/0135, 0192).

Requests put their checked events on the queue whole or not at all (a full queue is 429) and
wait on one future for the request, which resolves only after its group's transaction committed.
A request's events travel as one queue entry, so a group never splits them: their ledger ids,
the arrival order "newest wins" falls back on, follow the array (ADR 0191).
The ledger's unique key is the dedupe authority, so replicas and the tasks of one writer need
no coordination: repeats meet in the same row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry, Counter, Gauge
from psycopg.rows import tuple_row
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_random_exponential

from gateway.events import keys, timing
from gateway.events.intake import Event
from shared import db, errors

log = logging.getLogger(__name__)
Q = keys.Q  # events.sql holds the ledger's and the keys' queries
# Full jitter: attempt n waits uniform(0, min(5 s, 100 ms × 2^n)) (specs/event-ledger.md).
BACKOFF = wait_random_exponential(multiplier=0.1, max=5)


class IntakeBusy(errors.TooManyAttempts):
    """This gateway's event queue is full; wait Retry-After seconds and send the batch again."""

    code = "intake_busy"


class Unstorable(Exception):
    """The database refused this one event for a reason a retry cannot cure."""


class Pending:
    """One request's events on their way: a single future, resolved with every event's outcome
    (a dict, or Unstorable for an event the database refused alone) once all are committed.
    One future per request, not per event: 100 futures and their callbacks per request cost
    the event loop more than the events' own checks."""

    def __init__(self, n: int) -> None:
        self.future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self.results: list[Any] = [None] * n
        self.left = n
        self.stamps: timing.Stamps | None = None  # EVENTS_SERVER_TIMING (ADR 0341)


@dataclass
class Item:
    event: Event
    pending: Pending
    index: int


def transient(exc: BaseException) -> bool:
    # The pool turns an unreachable database into DatabaseUnavailable (shared/db).
    return db.is_retryable(exc) or isinstance(exc, errors.DatabaseUnavailable)


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.saturated = Counter(
            "ingest_events_queue_saturated", "Event batches refused with 429: the writer's "
            "queue was full.", registry=registry)
        self.committed = Counter(
            "ingest_events_committed", "Events committed by this gateway's writer, by outcome.",
            ["outcome"], registry=registry)
        self.retries = Counter(
            "ingest_events_writer_retries", "Writer commits retried after a transient "
            "database error.", registry=registry)
        self.groups = Counter(
            "ingest_events_groups", "Groups the writer took to commit (events committed / "
            "groups = the mean group).", registry=registry)
        self.lingered = Counter(
            "ingest_events_groups_lingered", "Groups whose task waited for more requests while "
            "another commit was in flight (EVENTS_GROUP_LINGER_MS).", registry=registry)
        self.depth = Gauge("ingest_events_queue_depth", "Events waiting in this gateway's "
                           "writer queue.", registry=registry)
        self.healthy = Gauge("ingest_events_writer_healthy", "1 while the writer commits; 0 "
                             "once its transient failures passed the retry budget.",
                             registry=registry)
        self.pending = Gauge("ingest_events_pending", "Ledger events waiting to be applied.",
                             registry=registry)
        self.dead_letter = Gauge("ingest_events_dead_letter", "Ledger events in dead letter.",
                                 registry=registry)
        self.oldest_pending = Gauge("ingest_events_oldest_pending_age_seconds",
                                    "Age of the oldest pending ledger event (0 = none).",
                                    registry=registry)
        self.healthy.set(1)


class Writer:
    def __init__(self, pool: db.AsyncPool, *, queue_size: int, group_max: int,
                 retry_budget: int, registry: CollectorRegistry, tasks: int = 1,
                 linger_s: float = 0.0, server_timing: bool = False) -> None:
        self.pool = pool
        # EVENTS_SERVER_TIMING: stamp each group's requests; off, a group is never walked for it.
        self.server_timing = server_timing
        # One entry per request (its events, in order); capacity is counted in events.
        self.queue: asyncio.Queue[list[Item]] = asyncio.Queue()
        self.queue_size = queue_size
        self.queued = 0                   # events waiting in the queue
        self.in_flight = 0                # events in a group being committed
        self.group_max = group_max
        self.linger_s = linger_s
        self.committing = 0               # groups in a commit (any task)
        # Set by every arrival and every commit that ends: what a lingering task waits on.
        self._wake = asyncio.Event()
        # One task gathers a group at a time: idle tasks that each took an arrival and
        # lingered would split the arrivals between them, and no group would grow.
        self._gathering = asyncio.Lock()
        self.retry_budget = retry_budget
        self.metrics = Metrics(registry)
        self.metrics.depth.set_function(lambda: self.queued)
        self.failed_attempts = 0          # transient failures in a row
        self.failing_since: float | None = None
        self._n_tasks = tasks
        self._tasks: list[asyncio.Task[None]] = []

    # ── intake side ────────────────────────────────────────────────────────────────────────
    def submit(self, events: list[Event],
               stamps: timing.Stamps | None = None) -> asyncio.Future[list[Any]]:
        """Queue every event or none: a half-queued batch would answer for events it did not
        say it took. No await in here, so nothing else can take the room meanwhile. The future
        resolves after commit with each event's outcome, in order."""
        if self.queue_size - self.queued < len(events):
            self.metrics.saturated.inc()
            raise IntakeBusy(retry_after_s=1)
        pending = Pending(len(events))
        pending.stamps = stamps
        items = [Item(e, pending, i) for i, e in enumerate(events)]
        self.queue.put_nowait(items)
        self.queued += len(items)
        self._wake.set()
        return pending.future

    # ── health ─────────────────────────────────────────────────────────────────────────────
    @property
    def critical(self) -> str | None:
        if any(task.done() for task in self._tasks):
            return "critical: a writer task stopped"
        if self.failed_attempts >= self.retry_budget and self.failing_since is not None:
            return (f"critical: {self.failed_attempts} commits failed in a row over "
                    f"{time.monotonic() - self.failing_since:.0f} s; retrying")
        return None

    def status(self) -> str:
        return self.critical or ("retrying" if self.failed_attempts else "ok")

    # ── the task ───────────────────────────────────────────────────────────────────────────
    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(), name=f"event-writer-{n}")
                       for n in range(self._n_tasks)]

    async def close(self, drain_s: float = 10.0) -> None:
        """Commit what is queued (the server stopped taking requests), then stop."""
        deadline = time.monotonic() + drain_s
        while (self.queued or self.in_flight) and time.monotonic() < deadline \
                and not self.critical:
            await asyncio.sleep(0.05)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _take(self, first: list[Item]) -> list[Item]:
        """A group: whole requests, in queue order, up to about group_max events. While
        another group's commit is in flight, wait up to linger_s for more (ADR 0340): a
        request that came alone would otherwise be a commit of its own, queued behind that
        one on the same cores, and fewer, larger groups cost less per event."""
        group = list(first)
        try:
            self._gather(group)
            if self.linger_s and self.committing and len(group) < self.group_max:
                self.metrics.lingered.inc()
                await self._linger(group)
        except asyncio.CancelledError:  # stopped while lingering: answer, never drop
            for item in group:
                _settle(item, error=errors.ServiceUnavailable(
                    "The gateway stopped before committing; send the batch again."))
            raise
        finally:
            self.queued -= len(group)
        return group

    def _gather(self, group: list[Item]) -> None:
        while len(group) < self.group_max and not self.queue.empty():
            group.extend(self.queue.get_nowait())

    async def _linger(self, group: list[Item]) -> None:
        """Take arrivals until the group is full, the linger is over, or no other commit is
        in flight any more (then waiting only adds latency)."""
        deadline = time.monotonic() + self.linger_s
        while len(group) < self.group_max and self.committing:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._wake.wait()
            self._gather(group)

    async def _next_group(self) -> list[Item]:
        async with self._gathering:
            return await self._take(await self.queue.get())

    async def _run(self) -> None:
        lane = Lane(self.pool)
        try:
            await self._run_lane(lane)
        finally:
            await lane.release()

    async def _run_lane(self, lane: Lane) -> None:
        while True:
            if self.queue.empty():
                await lane.settle()  # idle: no transaction left open while nothing comes
            group = await self._next_group()
            if self.server_timing:
                _stamp(group, "taken")
            self.metrics.groups.inc()
            self.in_flight += len(group)
            self.committing += 1
            try:
                await self._commit_group(lane, group)
                if self.server_timing:
                    _stamp(group, "committed")
            except asyncio.CancelledError:
                for item in group:
                    _settle(item, error=errors.ServiceUnavailable(
                        "The gateway stopped before committing; send the batch again."))
                raise
            except Exception:  # noqa: BLE001 - one bad group must not stop the writer
                log.exception("event group failed")
                for item in group:
                    _settle(item, error=errors.AppError())
            finally:
                self.in_flight -= len(group)
                self.committing -= 1
                self._wake.set()  # a lingering task need not wait for a commit that ended

    async def _commit_group(self, lane: Lane, group: list[Item]) -> None:
        try:
            outcomes = await self._with_retries(lane, group)
        except Exception as exc:  # noqa: BLE001 - not transient: find the event(s) at fault
            if len(group) == 1:
                log.warning("event refused by the database: %s", type(exc).__name__)
                _settle(group[0], error=Unstorable(type(exc).__name__))
                return
            for item in group:  # one by one, so one unstorable event fails alone
                await self._commit_group(lane, [item])
            return
        counts: dict[str, int] = {}
        for item, outcome in zip(group, outcomes, strict=True):
            counts[outcome["outcome"]] = counts.get(outcome["outcome"], 0) + 1
            _settle(item, result=outcome)
        for kind, n in counts.items():  # once per group, not per event
            self.metrics.committed.labels(kind).inc(n)

    async def _with_retries(self, lane: Lane, group: list[Item]) -> list[dict[str, Any]]:
        async for attempt in AsyncRetrying(retry=retry_if_exception(transient), wait=BACKOFF,
                                           before_sleep=self._failed, reraise=True):
            with attempt:
                outcomes = await upsert(lane, [item.event for item in group],
                                        begin_next=not self.queue.empty())
        if self.failed_attempts:
            log.info("event writer recovered after %d failed commits", self.failed_attempts)
        self.failed_attempts, self.failing_since = 0, None
        self.metrics.healthy.set(1)
        return outcomes

    def _failed(self, state: RetryCallState) -> None:
        self.failed_attempts += 1
        self.failing_since = self.failing_since or time.monotonic()
        self.metrics.retries.inc()
        exc = state.outcome.exception() if state.outcome else None
        log.warning("event commit failed (%s), attempt %d; retrying",
                    type(exc).__name__, self.failed_attempts)
        if self.critical:
            self.metrics.healthy.set(0)


def _stamp(group: list[Item], moment: str) -> None:
    """EVENTS_SERVER_TIMING: when a group was taken or committed, once per request."""
    now = time.perf_counter()
    for item in group:
        if item.index == 0 and item.pending.stamps is not None:
            setattr(item.pending.stamps, moment, now)
            item.pending.stamps.group = len(group)


def _settle(item: Item, *, result: dict[str, Any] | None = None,
            error: BaseException | None = None) -> None:
    """Record one event's outcome; an error other than Unstorable fails its whole request."""
    pending = item.pending
    # A request that gave up (timeout, client gone) leaves its future cancelled.
    if pending.future.done():
        return
    if error is not None and not isinstance(error, Unstorable):
        pending.future.set_exception(error)
        return
    pending.results[item.index] = error if error is not None else (result or {})
    pending.left -= 1
    if pending.left == 0:
        pending.future.set_result(pending.results)


class Lane:
    """One writer task's connection, kept from group to group while groups keep coming, so
    the next group's BEGIN can ride in the previous group's last round trip (ADR 0441). The
    connection is in autocommit and the writer says BEGIN and COMMIT itself: psycopg would
    otherwise send its own BEGIN, alone, before the COPY (COPY cannot be pipelined). Any
    failure gives the connection back to the pool (a broken one is discarded there) and the
    retry takes another."""

    def __init__(self, pool: db.AsyncPool) -> None:
        self.pool = pool
        # Holds the pool's loan while the connection is kept; closing it gives it back.
        self._loan = contextlib.AsyncExitStack()
        self.conn: Any = None

    async def connection(self) -> Any:
        if self.conn is None:
            self.conn = await self._loan.enter_async_context(self.pool.connection())
        return self.conn

    @property
    def in_transaction(self) -> bool:
        return self.conn is not None and \
            self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    async def settle(self) -> None:
        """End a transaction begun for a group that did not come (the writer went idle)."""
        if self.in_transaction:
            try:
                await self.conn.execute("ROLLBACK")
            except Exception:  # noqa: BLE001 - broken: the pool discards it
                await self.release()

    async def release(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        if not conn.closed and \
                conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            with contextlib.suppress(Exception):
                await conn.execute("ROLLBACK")
        await self._loan.aclose()


async def upsert(lane: Lane, events: list[Event], *,
                 begin_next: bool = False) -> list[dict[str, Any]]:
    """Commit ``events`` in one transaction; the outcome of each, in order.

    The group goes into the connection's staging table by one COPY, in array order (rank),
    then one statement inserts the new keys, counts the repeats and returns each delivery's
    outcome (events.sql intake_group; docs/decisions/0280). The statement and the COMMIT go
    in one pipeline: one round trip, not two, each of which waited for the busy event loop
    to read its answer (ADR 0400). COPY itself cannot be pipelined, and needs its BEGIN
    answered first: with ``begin_next`` (more groups wait) the next group's BEGIN goes in the
    same pipeline, after the COMMIT, so that group's COPY starts at once (ADR 0441)."""
    conn = await lane.connection()
    try:
        async with conn.cursor(row_factory=tuple_row) as cur:
            if not lane.in_transaction:
                await conn.execute("BEGIN")
            async with cur.copy(COPY_INTAKE) as copy:
                copy.set_types(COPY_TYPES)
                for rank, e in enumerate(events):
                    await copy.write_row((rank, e.tenant_id, e.source_system,
                                          e.source_event_id, e.source_sequence,
                                          e.source_emitted_at, e.type, e.payload_json,
                                          e.payload_sha256))
            async with conn.pipeline():
                await cur.execute(Q["intake_group"], {"n": len(events)})
                await conn.execute("COMMIT")
                if begin_next:
                    await conn.execute("BEGIN")
            rows = await cur.fetchall()  # (rank, ledger_id, outcome), in rank order
    except BaseException:
        # A failed statement leaves the transaction aborted (the pipelined COMMIT then only
        # ends it, keeping nothing): the connection goes back, rolled back, to the pool.
        await lane.release()
        raise
    if len(rows) != len(events):
        raise RuntimeError(f"intake answered {len(rows)} outcomes for {len(events)} events")
    return [outcome(kind, ledger_id) for _, ledger_id, kind in rows]


# Binary: half the gateway's CPU per row of text COPY (no escaping, no number or time text).
COPY_INTAKE = ("COPY event_intake (rank, tenant_id, source_system, source_event_id, "
               "source_sequence, source_emitted_at, type, payload, payload_sha256) "
               "FROM STDIN (FORMAT BINARY)")
COPY_TYPES = ["int4", "uuid", "text", "text", "int8", "timestamptz", "text", "text", "text"]


async def prepare(conn: Any) -> None:
    """A writer connection's staging table, made once when the pool opens the connection."""
    await conn.execute(Q["create_intake_table"])
    await conn.commit()
    await conn.set_autocommit(True)  # the writer says BEGIN and COMMIT itself (Lane, ADR 0441)


# A resend that differs from the stored event: the first is kept, and the answer says what.
CONFLICTS = {
    "payload_differs": "Seen before with another payload; the first one is kept.",
    "type_differs": "Seen before with the same id but another type; the first one is kept.",
    "sequence_differs": "Seen before with the same id but another source_sequence; the first "
                        "one is kept.",
    "emitted_at_differs": "Seen before with the same id but another source_emitted_at; the "
                          "first one is kept.",
}


def outcome(kind: str, ledger_id: int) -> dict[str, Any]:
    """The statement's answer for one delivery: new, duplicate or the conflict's code."""
    if kind == "new" or kind == "duplicate":
        return {"outcome": kind, "ledger_id": ledger_id}
    return {"outcome": "conflict", "ledger_id": ledger_id, "code": kind,
            "detail": CONFLICTS[kind]}


async def report_forever(pool: db.AsyncPool, metrics: Metrics, interval_s: float) -> None:
    """Boot-time rehydration report (log + gauges), then the same gauges every interval."""
    first = True
    while True:
        try:
            async with pool.connection() as conn:
                stats = await (await conn.execute(Q["ledger_stats"])).fetchone()
            assert stats is not None
            age = float(stats["oldest_pending_age_s"] or 0)
            metrics.pending.set(stats["pending"])
            metrics.dead_letter.set(stats["dead_letter"])
            metrics.oldest_pending.set(age)
            if first:
                log.info("event ledger at start", extra={
                    "pending": stats["pending"], "dead_letter": stats["dead_letter"],
                    "oldest_pending_age_s": round(age, 1)})
                first = False
        except Exception as exc:  # noqa: BLE001 - a report must never stop the gateway
            log.warning("event ledger figures unavailable: %s", type(exc).__name__)
        await asyncio.sleep(interval_s)
