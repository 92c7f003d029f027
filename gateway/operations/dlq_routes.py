"""Operators' API over the archived dead letters of every tenant (docs/decisions/0060).

Platform operators only: dead letters span tenants, and messages that name no tenant are
theirs alone. Tenant admins have their own tenant's at /v1/dead-letters (routes/dead_letters.py).
Nothing here touches SQS: the housekeeping mover fills the table (gateway/operations/dlq.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal
from uuid import UUID

from litestar import Request, get, post
from litestar.params import FromQuery, JSONBody, PathParameter
from msgspec import Meta

from gateway import auth, openapi, paging
from gateway.context import Context, Ctx
from gateway.operations import dlq, reopen
from shared import db, errors

TAGS = ["admin"]
GUARDS = [auth.operator_only]
# What the operator guard's 403 says these routes are (gateway/auth operator_only).
OPT = {"operators_see": "every tenant's dead letters", "tenant_view": "/v1/dead-letters"}


# What /schema declares (ADR 0200): a status, a body's fields, and which dead letters.
MessageId = Annotated[str, PathParameter(max_length=200, pattern=openapi.NO_NUL)]
Status = Literal["open", "redriven", "purged", "all"]
Reason = Annotated[str, Meta(max_length=1000, pattern=openapi.NO_NUL)]


@dataclass
class RedriveRequest:
    all: bool = False
    run_ids: list[UUID] = field(default_factory=list)
    message_ids: list[Annotated[str, Meta(max_length=200, pattern=openapi.NO_NUL)]] = field(
        default_factory=list)
    dry_run: bool = False
    limit: Annotated[int, Meta(ge=1, le=1000)] | None = None
    reason: Reason = "redriven from the dead-letter queue through the API"


# dlq.Selection's rule: all, or some run ids, or some message ids.
Redrive = Annotated[RedriveRequest, Meta(extra_json_schema={"anyOf": [
    {"properties": {"all": {"const": True}}, "required": ["all"]},
    {"properties": {"run_ids": {"minItems": 1}}, "required": ["run_ids"]},
    {"properties": {"message_ids": {"minItems": 1}}, "required": ["message_ids"]}]})]


@dataclass
class PurgeRequest:
    older_than: Annotated[str, Meta(pattern=dlq.AGE_PATTERN,
                                    description="an age like 90s, 15m, 2h, 7d or 1w.")]
    dry_run: bool = False
    # Purging resolves dead letters for good: the caller says so, as the CLI asks.
    confirm: bool = False
    reason: Reason = "purged from the dead-letter queue through the API"


# Purging resolves for good: confirm, or only look (dry_run).
Purge = Annotated[PurgeRequest, Meta(extra_json_schema={"anyOf": [
    {"properties": {"confirm": {"const": True}}, "required": ["confirm"]},
    {"properties": {"dry_run": {"const": True}}, "required": ["dry_run"]}]})]


@get("/v1/admin/dlq", guards=GUARDS, opt=OPT, tags=TAGS, dependencies=paging.PAGES,
     responses=openapi.errors(503))
async def list_dead_letters(ctx: Ctx, window: paging.Paged, status: FromQuery[Status] = "open",
                            tenant_id: FromQuery[UUID | None] = None) -> dict:
    """Every tenant's dead letters, oldest first (status open, redriven, purged or all)."""
    return await call(ctx, dlq.list_letters, tenant_id=tenant_id, status=_status(status),
                      page=window.page, limit=window.limit)


@get("/v1/admin/dlq/{message_id:str}", guards=GUARDS, opt=OPT, tags=TAGS,
     responses=openapi.errors(503))
async def show_dead_letter(message_id: MessageId, ctx: Ctx) -> dict:
    """One dead letter in full: body, attributes and its run."""
    return await call(ctx, dlq.show, message_id)


@post("/v1/admin/dlq/redrive", guards=GUARDS, opt=OPT, status_code=200, tags=TAGS,
      responses=openapi.errors(503))
async def redrive_dead_letters(data: JSONBody[Redrive], request: Request, ctx: Ctx) -> dict:
    """Send dead letters' jobs back through the outbox; failed runs are reopened, on the record."""
    return await redrive_for(data, request, ctx, tenant_id=None)


@post("/v1/admin/dlq/purge", guards=GUARDS, opt=OPT, status_code=200, tags=TAGS,
      responses=openapi.errors(503))
async def purge_dead_letters(data: JSONBody[Purge], request: Request, ctx: Ctx) -> dict:
    """Resolve the dead letters older than `older_than` (90s, 15m, 2h, 7d) as purged."""
    if not (data.dry_run or data.confirm):
        raise errors.InvalidRequest("Purging resolves dead letters for good: send "
                                    "confirm=true, or dry_run=true to see what would go.")
    # An age past ten years selects what ten years select (nothing lives that long here).
    older_than_s = min(dlq.parse_age(data.older_than), dlq.MAX_AGE_S)
    return await call(ctx, dlq.purge, older_than_s=older_than_s,
                      actor=actor(request), reason=data.reason, dry_run=data.dry_run)


# ── shared with routes/dead_letters.py ──────────────────────────────────────────────────────
async def redrive_for(data: RedriveRequest, request: Request, ctx: Context, *,
                      tenant_id: UUID | None) -> dict:
    selection = dlq.Selection(all=data.all, run_ids=frozenset(data.run_ids),
                              message_ids=frozenset(data.message_ids))
    if data.limit is not None and not 1 <= data.limit <= 1000:
        raise errors.InvalidRequest("limit must be between 1 and 1000.")
    result = await call(ctx, dlq.redrive, selection=selection, actor=actor(request),
                        reason=data.reason, tenant_id=tenant_id, dry_run=data.dry_run,
                        limit=data.limit)
    if result["redriven"] and not data.dry_run:
        ctx.relay.wake()  # publish the requeued jobs now rather than at the next poll
    return result


def _status(text: str) -> str | None:
    return None if text == "all" else text


def actor(request: Request) -> reopen.Actor:
    principal = auth.current(request)
    return reopen.Actor.user(principal.user_id, principal.is_admin)


async def call(ctx: Context, operation: Callable[..., dict[str, Any]], *args: Any,
               **kwargs: Any) -> dict[str, Any]:
    """Run a DLQ operation in a thread with a connection of its own (the service is sync, and
    the CLI shares it)."""

    def work() -> dict[str, Any]:
        with db.connect(ctx.settings.database_url, autocommit=True, connect_timeout=5) as conn:
            return operation(conn, *args, **kwargs)

    with db.translate():
        return await asyncio.to_thread(work)
