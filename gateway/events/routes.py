"""Event intake over HTTP: API keys (admins), POST /v1/events and the producer's cursor
(API key). docs/decisions/0135-0136."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, cast
from uuid import UUID

from litestar import Request, Response, Router, delete, get, post
from litestar.params import FromPath, JSONBody, Parameter
from litestar.types import ControllerRouterHandler
from msgspec import Meta

from gateway import auth, openapi
from gateway.context import Ctx
from gateway.events import intake, keys, timing
from gateway.events.writer import Unstorable
from shared import errors

OUTCOMES = ("new", "duplicate", "conflict", "rejected")


class BodyTooLarge(errors.FileTooLarge):
    """The batch is larger than the intake limit; send fewer events per request."""

    code = "body_too_large"


class TooManyEvents(errors.FileTooLarge):
    """The batch holds more events than one request may carry; split it."""

    code = "too_many_events"


class CommitPending(errors.ServiceUnavailable):
    """The events were not confirmed in time; send the batch again (a repeat is harmless)."""

    code = "commit_pending"


# ── API keys: a tenant admin's ─────────────────────────────────────────────────────────────
@dataclass
class NewKeyRequest:
    # keys.create's rule as /schema declares it.
    name: Annotated[str, Meta(max_length=100, pattern=openapi.NON_BLANK,
                              description="name must be 1 to 100 characters, e.g. "
                                          "'billing-system'.")]


@post("/", status_code=201, responses=openapi.errors(400))
async def create_key(data: JSONBody[NewKeyRequest], request: Request, ctx: Ctx) -> Response:
    """A new key for this tenant's producers. The key is in this answer only: store it now."""
    principal = auth.current(request)
    new = await keys.create(ctx.pool, principal.tenant_id, principal.user_id, data.name)
    return Response({"key_id": str(new.key_id), "key": new.key, "name": new.name,
                     "prefix": new.prefix}, status_code=201, headers={"Cache-Control": "no-store"})


@get("/")
async def list_keys(request: Request, ctx: Ctx) -> dict:
    """This tenant's keys, revoked ones included; never a secret."""
    items = await keys.listing(ctx.pool, auth.current(request).tenant_id)
    return {"items": items, "total": len(items)}


@delete("/{key_id:uuid}", status_code=204, responses=openapi.errors(404))
async def revoke_key(key_id: FromPath[UUID], request: Request, ctx: Ctx) -> None:
    """Revoke a key at once: its next request is refused with 401."""
    principal = auth.current(request)
    await keys.revoke(ctx.pool, principal.tenant_id, principal.user_id, key_id)
    # This gateway forgets it before answering, not when its announcement arrives (ADR 0440).
    ctx.key_lookups.revoked(key_id)


api_keys = Router("/v1/api-keys", route_handlers=[create_key, list_keys, revoke_key],
                  guards=[auth.admin_only], tags=["events"])


# ── intake: a producer's, with its API key ─────────────────────────────────────────────────
# /schema: the batch this route reads by hand. Each item is judged on its own (a refused one
# is an outcome of the 202), so the array's items are any JSON; its size limits are 413s.
EVENTS_BODY = openapi.json_body({"type": "array", "minItems": 1, "items": {}}, (
    "A JSON array of events, each an object of source_system, source_event_id, optional "
    "source_sequence and source_emitted_at, type and payload (an object). At most "
    "EVENTS_MAX_BATCH events and EVENTS_MAX_BODY_KB of JSON (else 413)."))


@post("/v1/events", opt={"api_key": "only"}, request_max_body_size=None, status_code=202,
      tags=["events"], responses=openapi.errors(400, 401, 413, 429, 503),
      operation_class=EVENTS_BODY)
async def post_events(request: Request, ctx: Ctx) -> dict:
    """Up to EVENTS_MAX_BATCH events as a JSON array, sent with 'X-Api-Key'. The answer comes
    after the accepted events committed and gives each event's outcome, in order: new,
    duplicate (seen before, identical), conflict (seen before with another payload, type,
    source_sequence or source_emitted_at: `code` says which; the first is kept) or rejected
    (with a code; the others are still taken).

    `source_emitted_at` needs an offset and must not be later than the server's clock plus
    EVENTS_MAX_FUTURE_SKEW_S (default one day; `source_emitted_at_in_future`) nor outside
    years 1-9999 in UTC (`source_emitted_at_out_of_range`).

    Order: when two events of one batch change the same record and neither a
    `source_sequence` (of the same source system) nor a `source_emitted_at` tells which is
    newer, the later one in the array wins.

    Workers then apply each event by its `type`: `judgment.upserted` and `plaintiff.upserted`
    carry one row of that contract (GET /v1/contracts/{name}), keyed by its column or field
    names; `ad_metric.daily` carries one row of a platform's daily export plus `platform`
    (meta, google or tiktok) and, optionally, `client_id` (GET /v1/clients). Follow them at
    GET /v1/events."""
    settings = ctx.settings
    began = time.perf_counter()
    stamps = timing.Stamps(cast(float, request.scope.get("events_arrived", began)), began) \
        if settings.events_server_timing else None
    caller: keys.KeyCaller = request.state.key_caller
    body = await _read_body(request, settings.events_max_body_kb * 1024)
    if stamps:
        stamps.read = time.perf_counter()
    raw = _parse(body)
    now = datetime.now(UTC)
    if len(raw) > settings.events_max_batch:
        raise TooManyEvents(f"A batch may hold at most {settings.events_max_batch} events; "
                            f"this one holds {len(raw)}.")
    outcomes: list[dict[str, Any]] = [{} for _ in raw]
    checked: list[tuple[int, intake.Event]] = []
    for i, item in enumerate(raw):
        try:
            checked.append((i, intake.check(
                item, caller.tenant_id, settings.events_max_payload_kb * 1024,
                max_future_skew_s=settings.events_max_future_skew_s, now=now)))
        except intake.Refused as exc:
            outcomes[i] = {"outcome": "rejected", "code": exc.code, "detail": exc.detail}
    if stamps:
        stamps.checked = time.perf_counter()
    results = await _committed(ctx.events.submit([event for _, event in checked], stamps),
                               settings.events_commit_timeout_s) if checked else []
    if stamps:
        stamps.woke = time.perf_counter()
    for (i, _), result in zip(checked, results, strict=True):
        outcomes[i] = result
    counts = dict.fromkeys(OUTCOMES, 0)
    for outcome in outcomes:
        counts[outcome["outcome"]] += 1
    answer = {"outcomes": [{"index": i, **o} for i, o in enumerate(outcomes)], "counts": counts}
    if stamps is None:
        return answer
    return Response(answer, status_code=202,  # type: ignore[return-value]
                    headers={"Server-Timing": timing.header(stamps, time.perf_counter())})


async def _read_body(request: Request, limit: int) -> bytes:
    # Counted while it streams: a huge body is refused before it is held in memory.
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"The body is larger than {limit // 1024} KiB; send fewer events "
                               "per request.")
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(body: bytes) -> list[Any]:
    try:
        raw = intake.loads(body)
    except (ValueError, UnicodeError) as exc:
        raise errors.InvalidRequest("The body must be a JSON array of events.") from exc
    if not isinstance(raw, list) or not raw:
        raise errors.InvalidRequest("The body must be a JSON array of 1 or more events.")
    return raw


async def _committed(future: asyncio.Future[list[Any]], timeout_s: float) -> list[dict[str, Any]]:
    try:
        # On timeout the future is cancelled: the writer may still commit the events, and a
        # resend is then a duplicate.
        settled = await asyncio.wait_for(future, timeout_s)
    except TimeoutError:
        raise CommitPending() from None
    return [{"outcome": "rejected", "code": "unstorable",
             "detail": "The database refused this event; check its values."}
            if isinstance(result, Unstorable) else result for result in settled]


@get("/v1/events/cursor", opt={"api_key": "also"}, tags=["events"],
      responses=openapi.errors(400, 401, 403))
async def cursor(request: Request, ctx: Ctx, source_system: Annotated[str, Parameter(
        min_length=1, max_length=intake.MAX_SOURCE_SYSTEM, pattern=openapi.NO_NUL)]) -> dict:
    """The highest source_sequence stored without a gap from the lowest one, for this tenant
    and source (null: none stored): a reconnecting producer resends from the next one. With
    an API key, or as a signed-in admin."""
    if not 1 <= len(source_system) <= intake.MAX_SOURCE_SYSTEM or "\x00" in source_system:
        raise errors.InvalidRequest("source_system must be 1 to 100 characters.")
    caller = getattr(request.state, "key_caller", None)
    if caller is None:
        await auth.admin_only(request, request.route_handler)
    tenant_id = caller.tenant_id if caller else auth.current(request).tenant_id
    async with ctx.pool.connection() as conn:
        row = await (await conn.execute(keys.Q["cursor"], {
            "tenant_id": tenant_id, "source_system": source_system})).fetchone()
    return {"source_system": source_system, "sequence": row["sequence"] if row else None}


ROUTES: list[ControllerRouterHandler] = [api_keys, post_events, cursor]
