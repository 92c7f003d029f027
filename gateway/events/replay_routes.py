"""Event ledger reads and replay over HTTP (docs/decisions/0142, 0194): GET /v1/events,
GET /v1/events/{ledger_id}, POST /v1/events/replay, and one event's discard and
edit-and-replay (POST /v1/events/{ledger_id}/discard, /edit).

Admins only (a tenant admin sees and replays their own tenant's events; an operator every
tenant's, or one with ?tenant_id=). The tenant comes from the verified token, never from the
request, for everyone but operators. API keys open intake only, never these.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal
from uuid import UUID

import msgspec
from litestar import Request, get, post
from litestar.params import FromPath, FromQuery, JSONBody, Parameter, PathParameter, QueryParameter
from msgspec import Meta

from gateway import auth, openapi
from gateway.context import Context, Ctx
from gateway.events import replay
from shared import db, errors

TAGS = ["events"]
GUARDS = [auth.admin_only]


# Ids up to 2**53: what every JSON reader holds exactly (Postgres' bigint holds more).
LedgerId = Annotated[int, Meta(ge=1, le=2**53)]
FilterText = Annotated[str, Meta(max_length=replay.MAX_FILTER_CHARS, pattern=openapi.NO_NUL)]
# Why an operator acts: required, one visible character at least (ADR 0194), declared so
# /schema says what the handler enforces (ADR 0200).
Reason = Annotated[str, Meta(max_length=replay.MAX_REASON_CHARS, pattern=openapi.NON_BLANK,
                             description="Why, for the record: at most "
                                         f"{replay.MAX_REASON_CHARS} characters.")]
if TYPE_CHECKING:
    State = str
else:
    State = Literal[replay.STATES]  # an enum in /schema (ADR 0200)


@dataclass
class ReplayRequest:
    ledger_ids: list[LedgerId] = field(default_factory=list)
    # A filter instead of ids: every dead letter matching it (all: true with no filter = all).
    all: bool = False
    source_system: FilterText | None = None
    type: FilterText | None = None
    error: FilterText | None = None


# replay_events' rule, as /schema declares it: some ids, or a filter, never both.
_IDS = {"required": ["ledger_ids"], "properties": {"ledger_ids": {"minItems": 1}}}
_FILTERED = {"anyOf": [{"required": ["all"], "properties": {"all": {"const": True}}}] + [
    {"required": [name], "properties": {name: {"type": "string", "minLength": 1}}}
    for name in ("source_system", "type", "error")]}
Replay = Annotated[ReplayRequest, Meta(extra_json_schema={"oneOf": [
    {**_IDS, "not": _FILTERED}, {**_FILTERED, "not": _IDS}]})]


Version = Annotated[int, Meta(ge=1, le=2**31 - 1, description=(
    "The event's version you decided on, as GET /v1/events/{id} shows it: 409 event_changed "
    "once the event changed since; a retry of the same request gets the same answer."))]
# Times arrive as text that replay.rfc3339 reads (with the offset): a datetime parameter
# would also take a bare number as seconds since 1970, which /schema does not say.
TIME: dict[str, Any] = {"min_length": 1, "max_length": 64,
                        "schema_extra": {"format": "date-time"}}
TIME_META: dict[str, Any] = {"min_length": 1, "max_length": 64,
                             "extra_json_schema": {"format": "date-time"}}
Since = Annotated[str, Meta(**TIME_META, description="First seen at or after this time "
                                                     "(RFC 3339, with its offset).")]
Until = Annotated[str, Meta(**TIME_META, description="First seen before this time.")]


class DiscardRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    reason: Reason
    # What the operator saw (ADR 0283): the version, or else the state.
    version: Version | None = None
    state: State | None = None


# intake.sequence's rule, as /schema declares it: a sequence is a Postgres bigint, never negative
# (schemathesis sent 3.8e31, which the route refused with 400 while /schema allowed it).
SourceSequence = Annotated[int, Meta(ge=0, le=2**63 - 1)]
# intake.emitted_at's shape: an RFC 3339 time with its offset (its clock and year rules are
# the route's 400s, which no schema states: tests/support/schemathesis.toml).
EmittedAt = Annotated[str, Meta(min_length=1, max_length=40,
                                extra_json_schema={"format": "date-time"})]


class EditRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Any of payload, source_emitted_at, source_sequence (null clears an envelope field)."""

    reason: Reason
    version: Version | None = None
    state: State | None = None
    payload: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    source_emitted_at: EmittedAt | None | msgspec.UnsetType = msgspec.UNSET
    source_sequence: SourceSequence | None | msgspec.UnsetType = msgspec.UNSET


# replay.Seen's rule, as /schema declares it: the version or the state the operator saw.
_SEEN = {"anyOf": [
    {"required": ["version"], "properties": {"version": {"type": "integer"}}},
    {"required": ["state"], "properties": {"state": {"type": "string"}}}]}
Discard = Annotated[DiscardRequest, Meta(extra_json_schema=_SEEN)]
# And edit's: something to correct.
Edit = Annotated[EditRequest, Meta(extra_json_schema={"allOf": [_SEEN, {"anyOf": [
    {"required": [name]} for name in ("payload", "source_emitted_at", "source_sequence")]}]})]


class DiscardMatching(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Every pending or dead-letter event matching the filter (ADR 0282)."""

    reason: Reason | None = None
    preview: bool = False
    # The count the operator confirmed: 409 purge_grew when more match by then.
    at_most: Annotated[int, Meta(ge=0)] | None = None
    state: Annotated[str, Meta(pattern="^(pending|dead_letter)$")] | None = None
    source_system: FilterText | None = None
    type: FilterText | None = None
    error: FilterText | None = None
    since: Since | None = None
    until: Until | None = None


# discard_matching's rule: only count (preview), or discard saying why.
Matching = Annotated[DiscardMatching, Meta(extra_json_schema={"anyOf": [
    {"required": ["preview"], "properties": {"preview": {"const": True}}},
    {"required": ["reason"], "properties": {"reason": {"type": "string"}}}]})]


@get("/v1/events", guards=GUARDS, tags=TAGS, responses=openapi.errors(400, 503))
async def list_events(request: Request, ctx: Ctx,
                      # `state` is a name Litestar reserves for the app state.
                      wanted_state: Annotated[State | None, QueryParameter(name="state")] = None,
                      source_system: Annotated[str | None, Parameter(
                          max_length=replay.MAX_FILTER_CHARS, pattern=openapi.NO_NUL)] = None,
                      type: Annotated[str | None, Parameter(
                          max_length=replay.MAX_FILTER_CHARS, pattern=openapi.NO_NUL)] = None,
                      error: Annotated[str | None, Parameter(
                          max_length=replay.MAX_FILTER_CHARS, pattern=openapi.NO_NUL)] = None,
                      since: Annotated[str | None, Parameter(
                          description="First seen at or after (ISO 8601).", **TIME)] = None,
                      until: Annotated[str | None, Parameter(
                          description="First seen before (ISO 8601).", **TIME)] = None,
                      limit: Annotated[int, Parameter(ge=1, le=replay.MAX_LIMIT)] = 100,
                      offset: Annotated[int, Parameter(ge=0, le=2**53)] = 0,
                      tenant_id: FromQuery[UUID | None] = None) -> dict:
    """Your tenant's ledger events, newest first, filtered by state, source, type, error and
    when they were first seen."""
    wanted = replay.Filter.of(state=wanted_state, source_system=source_system, type=type,
                              error=error, since=replay.rfc3339("since", since),
                              until=replay.rfc3339("until", until))
    return await _call(ctx, replay.list_events, tenant_id=_scope(request, tenant_id),
                       wanted=wanted, limit=limit, offset=offset)


@get("/v1/events/{ledger_id:int}", guards=GUARDS, tags=TAGS, responses=openapi.errors(404, 503))
async def show_event(ledger_id: Annotated[int, PathParameter(ge=1, le=2**53)], request: Request,
                     ctx: Ctx) -> dict:
    """One event in full: payload, apply state and error, and the replays that touched it."""
    return await _call(ctx, replay.show, ledger_id, tenant_id=_scope(request, None))


@post("/v1/events/replay", guards=GUARDS, tags=TAGS, status_code=200,
      responses=openapi.errors(400, 503))
async def replay_events(data: JSONBody[Replay], request: Request, ctx: Ctx) -> dict:
    """Reset dead letters (chosen ids, or all matching a filter) to pending, on the record."""
    principal = auth.current(request)
    filtered = data.all or any((data.source_system, data.type, data.error))
    if data.ledger_ids and filtered:
        raise errors.InvalidRequest("Send either ledger_ids or a filter, not both.")
    if not data.ledger_ids and not filtered:
        raise errors.InvalidRequest("Choose events: ledger_ids, a filter (source_system, type, "
                                    "error), or all: true for every dead letter.")
    wanted = None if data.ledger_ids else replay.Filter.of(
        source_system=data.source_system, type=data.type, error=data.error)
    return await _call(ctx, replay.replay, tenant_id=_scope(request, None),
                       actor=f"user:{principal.user_id}", actor_user_id=principal.user_id,
                       ledger_ids=data.ledger_ids or None, wanted=wanted)


@post("/v1/events/{ledger_id:int}/discard", guards=GUARDS, tags=TAGS, status_code=200,
      responses=openapi.errors(400, 404, 409, 503))
async def discard_event(ledger_id: FromPath[int], data: JSONBody[Discard],
                        request: Request, ctx: Ctx) -> dict:
    """Set a pending or dead-letter event aside for good (never applied), saying why, on the
    version (or state) you saw. A resend of it stays a duplicate. 409 `event_settled` once it
    was applied or discarded, `event_changed` when it changed since you saw it; the same
    request sent again answers as the first did, and is one action."""
    principal = auth.current(request)
    return await _call(ctx, replay.discard, ledger_id, tenant_id=_scope(request, None),
                       actor=f"user:{principal.user_id}", actor_user_id=principal.user_id,
                       reason=data.reason, seen=replay.Seen(data.version, data.state))


@post("/v1/events/{ledger_id:int}/edit", guards=GUARDS, tags=TAGS, status_code=200,
      responses=openapi.errors(400, 404, 409, 503))
async def edit_event(ledger_id: FromPath[int], data: JSONBody[Edit], request: Request,
                     ctx: Ctx) -> dict:
    """Correct a pending or dead-letter event and apply it again (due now, a fresh attempt
    budget), saying why, on the version (or state) you saw: its payload, its
    source_emitted_at or its source_sequence (null clears them). What it replaced stays on
    the record; a resend of the producer's original stays a duplicate. 409 as for discard."""
    principal = auth.current(request)
    return await _call(ctx, replay.edit, ledger_id, tenant_id=_scope(request, None),
                       actor=f"user:{principal.user_id}", actor_user_id=principal.user_id,
                       reason=data.reason, seen=replay.Seen(data.version, data.state),
                       payload=_given(data.payload), source_sequence=_given(data.source_sequence),
                       source_emitted_at=_given(data.source_emitted_at),
                       max_payload_bytes=ctx.settings.events_max_payload_kb * 1024,
                       max_future_skew_s=ctx.settings.events_max_future_skew_s)


@post("/v1/events/discard", guards=GUARDS, tags=TAGS, status_code=200,
      responses=openapi.errors(400, 409, 503))
async def discard_matching(data: JSONBody[Matching], request: Request, ctx: Ctx,
                           tenant_id: FromQuery[UUID | None] = None) -> dict:
    """Discard every pending or dead-letter event that matches a filter (state, source, type,
    error, first seen since/until), each on the record as a single discard, in committed
    slices. `preview: true` only counts (`matched`); then send the same filter with a
    `reason` and `at_most` set to the count you confirmed (409 `purge_grew` if more match)."""
    principal = auth.current(request)
    if not data.preview and not data.reason:
        raise errors.InvalidRequest("reason is required: say why these events are discarded.")
    wanted = replay.Filter.of(state=data.state, source_system=data.source_system,
                              type=data.type, error=data.error,
                              since=replay.rfc3339("since", data.since),
                              until=replay.rfc3339("until", data.until))
    return await _call(ctx, replay.discard_matching, tenant_id=_scope(request, tenant_id),
                       wanted=wanted, actor=f"user:{principal.user_id}",
                       actor_user_id=principal.user_id, reason=data.reason or "",
                       preview=data.preview, at_most=data.at_most)


def _given(value: Any) -> Any:
    return replay.UNSET if value is msgspec.UNSET else value


ROUTES = [list_events, show_event, replay_events, discard_event, edit_event, discard_matching]


def _scope(request: Request, asked: UUID | None) -> UUID | None:
    """The tenant a call may see: an operator's choice (None = all), else the caller's own."""
    principal = auth.current(request)
    return asked if principal.is_operator else principal.tenant_id


async def _call(ctx: Context, operation: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The service is sync (the CLI shares it): a thread with a connection of its own."""

    def work() -> dict[str, Any]:
        with db.connect(ctx.settings.database_url, autocommit=True, connect_timeout=5) as conn:
            result: dict[str, Any] = operation(conn, *args, **kwargs)
            return result

    with db.translate():
        return await asyncio.to_thread(work)
