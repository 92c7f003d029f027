"""One listener per gateway process, fanning the database's announcements out to open streams.

Postgres announces every new event_outbox row and every status change of a run or an import
batch on the channel `df_live` (migrations/0025). This process listens on one connection of its
own, whatever the number of open pages, and hands each announcement to the streams of that
announcement's tenant only. A stream holds no database connection: it waits on its own queue.
See docs/decisions/0160-live-updates.md.

Each tenant's events are numbered on their own (docs/decisions/0197). Streams are capped per
process and per tenant. A user's sessions ending (sign-out, deactivation, password change) is
announced on the same channel (migrations/0105) and ends that user's streams at once, before
any event committed after it is handed on (docs/decisions/0322); every heartbeat one query
still finds the streams whose session ended while the listener was away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
from prometheus_client import CollectorRegistry, Gauge

from shared import db, errors
from shared.db import listen

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("live.sql"))
CHANNEL = "df_live"
# The listener's connection, as pg_stat_activity names it.
APPLICATION_NAME = "ingest-gateway-live"
# A resuming stream gets at most this many missed events; past that it is told to reload all.
BACKLOG_MAX = 100


@dataclass(frozen=True)
class Message:
    """One server-sent event: its type, its JSON data and, for outbox events, its id."""

    event: str
    data: dict[str, Any]
    id: int | None = None


# Tells a page that it may have missed something (the listener reconnected, or a resume went
# back further than BACKLOG_MAX): fetch what it shows again.
RESYNC = Message("live.resync", {})


class TenantStreamsFull(errors.TooManyAttempts):
    """Your tenant has too many live streams open on this server; the page checks for changes
    itself meanwhile."""

    code = "live_tenant_streams_full"


@dataclass(frozen=True)
class Session:
    """Who opened a stream, as its token said: the stream lives while this session does."""

    user_id: UUID
    tenant_id: UUID
    token_version: int


@dataclass(eq=False)
class Subscriber:
    tenant_id: UUID
    queue: asyncio.Queue[Message | None]
    # Set when the stream fell too far behind: its queue ends with None, and it reconnects.
    dropped: bool = False
    # None: not watched (AUTH_ENABLED=false in dev mode has no sessions to end).
    session: Session | None = None


class Hub:
    def __init__(self, database_url: str, pool: db.AsyncPool, *, max_streams: int,
                 queue_size: int, registry: CollectorRegistry | None = None,
                 max_per_tenant: int | None = None, session_check_s: float = 15.0) -> None:
        self._url = database_url
        self._pool = pool
        self._max = max_streams
        self._max_per_tenant = max_per_tenant or max_streams
        self._session_check_s = session_check_s
        self._queue_size = queue_size
        self._by_tenant: dict[UUID, set[Subscriber]] = {}
        self._count = 0
        self.listening = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if registry is not None:
            Gauge("ingest_live_streams", "Live streams (GET /v1/live) open on this gateway.",
                  registry=registry).set_function(lambda: self._count)
            Gauge("ingest_live_listening", "1 while this gateway listens for live updates.",
                  registry=registry).set_function(lambda: int(self.listening.is_set()))

    # ── streams ───────────────────────────────────────────────────────────────────────────
    def check_room(self, tenant_id: UUID) -> None:
        """Room for one more stream of ``tenant_id``: under this process's cap and under the
        tenant's share of it, so one tenant (one user with many tabs, a script) cannot take
        every place of the gateway."""
        if self._count >= self._max:
            raise errors.LiveStreamsFull()
        if len(self._by_tenant.get(tenant_id, ())) >= self._max_per_tenant:
            raise TenantStreamsFull(retry_after_s=30, detail=(
                f"Your tenant already has {self._max_per_tenant} live streams open on this "
                "server; close some pages (they check for changes themselves meanwhile)."))

    def subscribe(self, tenant_id: UUID, session: Session | None = None) -> Subscriber:
        self.check_room(tenant_id)
        sub = Subscriber(tenant_id, asyncio.Queue(self._queue_size), session=session)
        self._by_tenant.setdefault(tenant_id, set()).add(sub)
        self._count += 1
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        subs = self._by_tenant.get(sub.tenant_id)
        if subs is None or sub not in subs:
            return
        subs.discard(sub)
        self._count -= 1
        if not subs:
            del self._by_tenant[sub.tenant_id]

    def end_all_soon(self) -> None:
        """``end_all`` on the hub's loop: safe from a signal handler or another thread."""
        self._loop.call_soon_threadsafe(self.end_all)

    def end_all(self) -> None:
        """End every open stream now (the gateway is stopping): uvicorn waits for open
        connections before it shuts down, and a stream never ends by itself. Browsers reconnect
        with Last-Event-ID to another gateway, or to this one once it is back."""
        for subs in list(self._by_tenant.values()):
            for sub in list(subs):
                _end(sub)

    @property
    def open_streams(self) -> int:
        return self._count

    async def backlog(self, tenant_id: UUID, after: int) -> list[Message]:
        """The tenant's events after `after` (a Last-Event-ID), oldest first; RESYNC last when
        there were more than a stream should replay, or when `after` is no id of this tenant's
        (an id of the old global numbering)."""
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(Q["events_after"], {
                "tenant_id": tenant_id, "after": after, "limit": BACKLOG_MAX + 1})).fetchall()
            last = None if rows else await (await conn.execute(Q["last_seq"], {
                "tenant_id": tenant_id})).fetchone()
        if not rows and after > (last["last_seq"] if last else 0):
            return [RESYNC]
        messages = [_event_message(r) for r in rows[:BACKLOG_MAX]]
        return [*messages, RESYNC] if len(rows) > BACKLOG_MAX else messages

    # ── sessions ──────────────────────────────────────────────────────────────────────────
    async def watch_sessions_forever(self) -> None:
        """Every SESSION_CHECK interval (the heartbeat), end the streams whose session ended."""
        while True:
            await asyncio.sleep(self._session_check_s)
            try:
                await self.end_ended_sessions()
            except Exception:  # noqa: BLE001 - the next round tries again
                log.warning("live streams' sessions could not be checked", exc_info=True)

    async def end_ended_sessions(self) -> int:
        watched: dict[Session, list[Subscriber]] = {}
        for tenant_subs in self._by_tenant.values():
            for sub in tenant_subs:
                if sub.session is not None and not sub.dropped:
                    watched.setdefault(sub.session, []).append(sub)
        if not watched:
            return 0
        sessions = list(watched)
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(Q["ended_sessions"], {
                "user_ids": [s.user_id for s in sessions],
                "tenant_ids": [s.tenant_id for s in sessions],
                "versions": [s.token_version for s in sessions]})).fetchall()
        ended = {(r["user_id"], r["token_version"]) for r in rows}
        count = 0
        for session, streams in watched.items():
            if (session.user_id, session.token_version) in ended:
                for sub in streams:
                    _end(sub)
                    count += 1
        if count:
            log.info("live streams ended with their sessions", extra={"streams": count})
        return count

    def session_ended(self, tenant_id: UUID, user_id: UUID, token_version: int, *,
                      active: bool) -> int:
        """End the user's streams that the announced change revoked: all of them when the user
        is no longer active, else those opened with an older token version."""
        ended = 0
        for sub in list(self._by_tenant.get(tenant_id, ())):
            session = sub.session
            if session is None or session.user_id != user_id or sub.dropped:
                continue
            if not active or session.token_version != token_version:
                _end(sub)
                ended += 1
        if ended:
            log.info("live streams ended with their sessions",
                     extra={"streams": ended, "pushed": True})
        return ended

    # ── the listener ──────────────────────────────────────────────────────────────────────
    async def run_forever(self, *, retry_max_s: float = 30.0) -> None:
        """The listener, and beside it the session watch."""
        watch = asyncio.create_task(self.watch_sessions_forever(), name="live-sessions")
        try:
            await self._listen_forever(retry_max_s=retry_max_s)
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch

    async def _listen_forever(self, *, retry_max_s: float) -> None:
        """Listen, dispatch, and after a lost connection listen again with backoff; streams
        stay open meanwhile and are told to resync once the listener is back."""
        delay, lost = 0.5, False
        while True:
            try:
                async with listen.listening(self._url, CHANNEL,
                                            application_name=APPLICATION_NAME) as payloads:
                    self.listening.set()
                    if lost:
                        log.info("live updates listening again")
                        self._broadcast(RESYNC)
                        # Sessions that ended while nobody listened: not announced to us.
                        with contextlib.suppress(Exception):
                            await self.end_ended_sessions()
                    delay, lost = 0.5, False
                    async for payload in payloads:
                        try:
                            await self._dispatch(payload)
                        except (ValueError, KeyError, TypeError):
                            # Not ours to fail on: someone NOTIFYing the channel by hand.
                            log.warning("live update ignored an unreadable announcement")
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - any failure: listen again after a pause
                if not lost:
                    log.warning("live updates lost the database; retrying", exc_info=True)
                self.listening.clear()
                lost = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, retry_max_s)

    async def _dispatch(self, payload: str) -> None:
        note = orjson.loads(payload)
        tenant_id = UUID(note["tenant_id"])
        if tenant_id not in self._by_tenant:
            return  # nobody of this tenant is watching: not even the event's body is read
        if note["kind"] == "session":
            self.session_ended(tenant_id, UUID(note["user_id"]), int(note["token_version"]),
                               active=bool(note["active"]))
            return
        if note["kind"] == "event":
            message = await self._event(tenant_id, int(note["tenant_seq"]))
        elif note["kind"] == "run":
            message = Message("run.status", {k: note.get(k) for k in (
                "run_id", "batch_id", "status", "stage")})
        else:
            message = Message("batch.status", {k: note.get(k) for k in ("batch_id", "status")})
        if message is not None:
            self._send(tenant_id, message)

    async def _event(self, tenant_id: UUID, seq: int) -> Message | None:
        try:
            async with self._pool.connection() as conn:
                row = await (await conn.execute(Q["event_by_seq"], {
                    "tenant_id": tenant_id, "seq": seq})).fetchone()
        except errors.DatabaseUnavailable:
            # The streams resume it from the outbox when they reconnect; meanwhile say so.
            log.warning("live update could not read event %s", seq)
            return RESYNC
        return _event_message(row) if row is not None else None

    def _send(self, tenant_id: UUID, message: Message) -> None:
        for sub in list(self._by_tenant.get(tenant_id, ())):
            self._put(sub, message)

    def _broadcast(self, message: Message) -> None:
        for subs in list(self._by_tenant.values()):
            for sub in list(subs):
                self._put(sub, message)

    def _put(self, sub: Subscriber, message: Message) -> None:
        if sub.dropped:
            return
        try:
            sub.queue.put_nowait(message)
        except asyncio.QueueFull:
            # A reader this far behind would only grow memory: end its stream; the browser
            # reconnects with Last-Event-ID and reads the missed events from the outbox.
            sub.dropped = True
            with contextlib.suppress(asyncio.QueueEmpty):
                sub.queue.get_nowait()
            sub.queue.put_nowait(None)


def _end(sub: Subscriber) -> None:
    """End a stream: its queue ends with None, and the browser reconnects (or, for an ended
    session, is refused and signs in again)."""
    sub.dropped = True
    while not sub.queue.empty():
        sub.queue.get_nowait()
    sub.queue.put_nowait(None)


def _event_message(row: dict[str, Any]) -> Message:
    return Message(row["event_type"], {
        "event_id": str(row["event_id"]), "event_type": row["event_type"],
        "batch_id": str(row["batch_id"]) if row["batch_id"] else None,
        "created_at": row["created_at"].isoformat(), "payload": row["payload"]},
        row["tenant_seq"])
