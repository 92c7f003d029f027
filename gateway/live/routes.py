"""GET /v1/live: the caller's tenant's events as server-sent events (docs/decisions/0160).

Authenticated like every route (the web session's cookie, or a bearer token); tenant-scoped by
the hub. Each event_outbox row comes with its number as the SSE id, so a browser that
reconnects sends it back as Last-Event-ID and gets what it missed from the outbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Annotated
from uuid import UUID

import orjson
from litestar import Request, get
from litestar.params import HeaderParameter
from litestar.response import ServerSentEvent
from litestar.response.sse import ServerSentEventMessage
from litestar.types import ControllerRouterHandler

from gateway import auth, openapi
from gateway.context import Ctx
from gateway.live import hub as live_hub
from shared import errors
from shared.settings import GatewaySettings

# How long a browser waits before it reconnects a stream that ended (the SSE `retry:` field).
RECONNECT_MS = 2000
LISTENER_WAIT_S = 5.0
LastEventId = Annotated[str | None, HeaderParameter(
    name="last-event-id", required=False, pattern=r"^[0-9]{1,18}$",
    description="The id of the last event this client received; the stream first sends the "
                "tenant's events after it.")]


@get("/v1/live", tags=["live"], media_type="text/event-stream",
     response_description="A text/event-stream of the tenant's events (see above).",
     responses=openapi.errors(400, 429, 503))
async def live(request: Request, ctx: Ctx,
               last_event_id: LastEventId = None) -> ServerSentEvent:
    """Server-sent events for the caller's tenant: each new outbox event (`ingestion.complete`,
    `webhook.test`, with its id), run and import-batch status changes (`run.status`,
    `batch.status`, no id), and `live.resync` when something may have been missed. A comment
    every few seconds keeps the connection open; the stream ends after a while and the client
    reconnects with `Last-Event-ID`. Event ids count this tenant's events only. The stream
    ends as soon as its session ends (sign-out, deactivation, password change), before any
    event committed after that.
    503 `live_streams_full` when this server has too many streams, 429
    `live_tenant_streams_full` when the caller's tenant has LIVE_MAX_STREAMS_PER_TENANT."""
    hub: live_hub.Hub = ctx.live
    principal = auth.current(request)
    hub.check_room(principal.tenant_id)  # refuse with a proper answer while one can be given
    after = int(last_event_id) if last_event_id is not None else None
    session = live_hub.Session(principal.user_id, principal.tenant_id, principal.token_version) \
        if ctx.settings.auth_enabled else None
    return ServerSentEvent(
        _stream(hub, principal.tenant_id, session, after, ctx.settings),
        # Proxies must pass each event on at once and never cache a tenant's stream.
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def _stream(hub: live_hub.Hub, tenant_id: UUID, session: live_hub.Session | None,
                  after: int | None,
                  settings: GatewaySettings) -> AsyncIterator[ServerSentEventMessage]:
    try:
        sub = hub.subscribe(tenant_id, session)
    except (errors.LiveStreamsFull, live_hub.TenantStreamsFull):
        return  # filled up since the check: an empty stream, and the client retries later
    try:
        # Announcements made before the listener is up reach nobody: wait for it a little, so
        # the opening comment means "subscribed and listening" (it resyncs pages if it was not).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(hub.listening.wait(), LISTENER_WAIT_S)
        yield ServerSentEventMessage(data=None, comment="live", retry=RECONNECT_MS)
        replayed: set[int] = set()
        if after is not None:
            try:
                backlog = await hub.backlog(tenant_id, after)
            except errors.DatabaseUnavailable:
                return  # the client reconnects with the same Last-Event-ID
            for missed in backlog:
                if missed.id is not None:
                    replayed.add(missed.id)
                yield _encode(missed)
        deadline = time.monotonic() + settings.live_stream_max_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = await asyncio.wait_for(sub.queue.get(),
                                                  min(settings.live_heartbeat_s, left))
            except TimeoutError:
                yield ServerSentEventMessage(data=None, comment="keepalive")
                continue
            if message is None:
                return  # fell behind, or the session ended: the client reconnects
            if message.id is not None and message.id in replayed:
                continue  # committed while the backlog was read: sent once already
            yield _encode(message)
    finally:
        hub.unsubscribe(sub)


def _encode(message: live_hub.Message) -> ServerSentEventMessage:
    return ServerSentEventMessage(data=orjson.dumps(message.data).decode(),
                                  event=message.event, id=message.id)


ROUTES: list[ControllerRouterHandler] = [live]
