"""Operators' API over the archived dead letters of every tenant (docs/decisions/0060).

Platform operators only: dead letters span tenants, and messages that name no tenant are
theirs alone. Tenant admins have their own tenant's at /v1/dead-letters (routes/dead_letters.py).
Nothing here touches SQS: the housekeeping mover fills the table (gateway/operations/dlq.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from litestar import Request, get, post
from litestar.params import FromPath, FromQuery, JSONBody

from gateway import auth, openapi, paging
from gateway.context import Context, Ctx
from gateway.operations import dlq, reopen
from shared import db, errors

TAGS = ["admin"]
GUARDS = [auth.operator_only]


@dataclass
class RedriveRequest:
    all: bool = False
    run_ids: list[UUID] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)
    dry_run: bool = False
    limit: int | None = None
    reason: str = "redriven from the dead-letter queue through the API"


@dataclass
class PurgeRequest:
    older_than: str
    dry_run: bool = False
    # Purging resolves dead letters for good: the caller says so, as the CLI asks.
    confirm: bool = False
    reason: str = "purged from the dead-letter queue through the API"


@get("/v1/admin/dlq", guards=GUARDS, tags=TAGS, dependencies=paging.PAGES,
     responses=openapi.errors(503))
async def list_dead_letters(ctx: Ctx, window: paging.Paged, status: FromQuery[str] = "open",
                            tenant_id: FromQuery[UUID | None] = None) -> dict:
    """Every tenant's dead letters, oldest first (status open, redriven, purged or all)."""
    return await call(ctx, dlq.list_letters, tenant_id=tenant_id, status=_status(status),
                      page=window.page, limit=window.limit)


@get("/v1/admin/dlq/{message_id:str}", guards=GUARDS, tags=TAGS,
     responses=openapi.errors(503))
async def show_dead_letter(message_id: FromPath[str], ctx: Ctx) -> dict:
    """One dead letter in full: body, attributes and its run."""
    return await call(ctx, dlq.show, message_id)


@post("/v1/admin/dlq/redrive", guards=GUARDS, status_code=200, tags=TAGS,
      responses=openapi.errors(503))
async def redrive_dead_letters(data: JSONBody[RedriveRequest], request: Request, ctx: Ctx) -> dict:
    """Send dead letters' jobs back through the outbox; failed runs are reopened, on the record."""
    return await redrive_for(data, request, ctx, tenant_id=None)


@post("/v1/admin/dlq/purge", guards=GUARDS, status_code=200, tags=TAGS,
      responses=openapi.errors(503))
async def purge_dead_letters(data: JSONBody[PurgeRequest], request: Request, ctx: Ctx) -> dict:
    """Resolve the dead letters older than `older_than` (90s, 15m, 2h, 7d) as purged."""
    if not (data.dry_run or data.confirm):
        raise errors.InvalidRequest("Purging resolves dead letters for good: send "
                                    "confirm=true, or dry_run=true to see what would go.")
    return await call(ctx, dlq.purge, older_than_s=dlq.parse_age(data.older_than),
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
