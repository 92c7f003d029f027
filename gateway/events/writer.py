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

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_random_exponential

from gateway.events import intake, keys
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
                 retry_budget: int, registry: CollectorRegistry, tasks: int = 1) -> None:
        self.pool = pool
        # One entry per request (its events, in order); capacity is counted in events.
        self.queue: asyncio.Queue[list[Item]] = asyncio.Queue()
        self.queue_size = queue_size
        self.queued = 0                   # events waiting in the queue
        self.in_flight = 0                # events in a group being committed
        self.group_max = group_max
        self.retry_budget = retry_budget
        self.metrics = Metrics(registry)
        self.metrics.depth.set_function(lambda: self.queued)
        self.failed_attempts = 0          # transient failures in a row
        self.failing_since: float | None = None
        self._n_tasks = tasks
        self._tasks: list[asyncio.Task[None]] = []

    # ── intake side ────────────────────────────────────────────────────────────────────────
    def submit(self, events: list[Event]) -> asyncio.Future[list[Any]]:
        """Queue every event or none: a half-queued batch would answer for events it did not
        say it took. No await in here, so nothing else can take the room meanwhile. The future
        resolves after commit with each event's outcome, in order."""
        if self.queue_size - self.queued < len(events):
            self.metrics.saturated.inc()
            raise IntakeBusy(retry_after_s=1)
        pending = Pending(len(events))
        items = [Item(e, pending, i) for i, e in enumerate(events)]
        self.queue.put_nowait(items)
        self.queued += len(items)
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

    def _take(self, first: list[Item]) -> list[Item]:
        """A group: whole requests, in queue order, up to about group_max events."""
        group = list(first)
        while len(group) < self.group_max and not self.queue.empty():
            group.extend(self.queue.get_nowait())
        self.queued -= len(group)
        return group

    async def _run(self) -> None:
        while True:
            group = self._take(await self.queue.get())
            self.in_flight += len(group)
            try:
                await self._commit_group(group)
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

    async def _commit_group(self, group: list[Item]) -> None:
        try:
            outcomes = await self._with_retries(group)
        except Exception as exc:  # noqa: BLE001 - not transient: find the event(s) at fault
            if len(group) == 1:
                log.warning("event refused by the database: %s", type(exc).__name__)
                _settle(group[0], error=Unstorable(type(exc).__name__))
                return
            for item in group:  # one by one, so one unstorable event fails alone
                await self._commit_group([item])
            return
        counts: dict[str, int] = {}
        for item, outcome in zip(group, outcomes, strict=True):
            counts[outcome["outcome"]] = counts.get(outcome["outcome"], 0) + 1
            _settle(item, result=outcome)
        for kind, n in counts.items():  # once per group, not per event
            self.metrics.committed.labels(kind).inc(n)

    async def _with_retries(self, group: list[Item]) -> list[dict[str, Any]]:
        async for attempt in AsyncRetrying(retry=retry_if_exception(transient), wait=BACKOFF,
                                           before_sleep=self._failed, reraise=True):
            with attempt:
                outcomes = await upsert(self.pool, [item.event for item in group])
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


async def upsert(pool: db.AsyncPool, events: list[Event]) -> list[dict[str, Any]]:
    """Commit ``events`` in one transaction; the outcome of each, in order.

    One statement may not touch a key twice, so the upsert takes each key's first event (their
    ledger ids follow the array; events.sql upsert_events), and a second statement counts the
    group's further deliveries of the same keys."""
    by_key: dict[tuple, list[int]] = {}  # in order of each key's first appearance
    for i, event in enumerate(events):
        by_key.setdefault(event.key, []).append(i)
    firsts = [events[indexes[0]] for indexes in by_key.values()]
    async with pool.connection() as conn, conn.transaction():
        rows = await (await conn.execute(Q["upsert_events"], _columns(firsts))).fetchall()
        stored = {row["rank"]: row for row in rows}
        outcomes: list[dict[str, Any]] = [{} for _ in events]
        repeats: dict[str, list] = {"ledger_id": [], "repeats": [], "conflicts": [],
                                    "conflict_sha256": []}
        for rank, indexes in enumerate(by_key.values()):
            row = stored[rank]
            for n, i in enumerate(indexes):
                outcomes[i] = outcome(events[i], row, first=n == 0)
            if len(indexes) > 1:
                others = [events[i] for i in indexes[1:]]
                differing = [e.payload_sha256 for e in others
                             if e.payload_sha256 != row["payload_sha256"]]
                repeats["ledger_id"].append(row["ledger_id"])
                repeats["repeats"].append(len(others))
                repeats["conflicts"].append(sum(difference(e, row) is not None for e in others))
                repeats["conflict_sha256"].append(differing[-1] if differing else None)
        if repeats["ledger_id"]:
            await conn.execute(Q["count_repeats"], repeats)
    return outcomes


# A resend that differs from the stored event: the first is kept, and the answer says what.
CONFLICTS = {
    "payload_differs": "Seen before with another payload; the first one is kept.",
    "type_differs": "Seen before with the same id but another type; the first one is kept.",
    "sequence_differs": "Seen before with the same id but another source_sequence; the first "
                        "one is kept.",
    "emitted_at_differs": "Seen before with the same id but another source_emitted_at; the "
                          "first one is kept.",
}


def difference(event: Event, row: dict[str, Any]) -> str | None:
    """How a delivery differs from the stored event (the first difference), or None."""
    if event.payload_sha256 != row["payload_sha256"]:
        return "payload_differs"
    if event.type != row["type"]:
        return "type_differs"
    if event.source_sequence != row["source_sequence"]:
        return "sequence_differs"
    if intake.micros(event.source_emitted_at) != row["emitted_us"]:
        return "emitted_at_differs"
    return None


def outcome(event: Event, row: dict[str, Any], *, first: bool) -> dict[str, Any]:
    if first and row["inserted"]:
        return {"outcome": "new", "ledger_id": row["ledger_id"]}
    code = difference(event, row)
    if code is None:
        return {"outcome": "duplicate", "ledger_id": row["ledger_id"]}
    return {"outcome": "conflict", "ledger_id": row["ledger_id"], "code": code,
            "detail": CONFLICTS[code]}


def _columns(events: list[Event]) -> dict[str, Any]:
    """The statement's parameters: the group as JSON rows, each payload embedded as the
    canonical text intake made (orjson.Fragment: not parsed or written again)."""
    rows = [{"rank": rank, "tenant_id": e.tenant_id, "source_system": e.source_system,
             "source_event_id": e.source_event_id, "source_sequence": e.source_sequence,
             "source_emitted_at": e.source_emitted_at, "type": e.type,
             "payload": orjson.Fragment(e.payload_json), "payload_sha256": e.payload_sha256}
            for rank, e in enumerate(events)]
    return {"rows": orjson.dumps(rows).decode(), "n": len(events)}


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
