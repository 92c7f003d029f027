"""Admin API over the dead-letter queue: the same service as `ingest dlq`, scoped to the caller's
tenant (docs/decisions/0010). Messages whose body is no job have no tenant: CLI only."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from botocore.exceptions import BotoCoreError, ClientError
from litestar import Request, get, post

from gateway import auth, dlq, openapi, reopen
from gateway.context import Context
from shared import db, errors

TAGS = ["admin"]


@dataclass
class RedriveRequest:
    all: bool = False
    run_ids: list[UUID] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)
    dry_run: bool = False
    limit: int | None = None
    reason: str = "redriven from the dead-letter queue through the admin API"


@dataclass
class PurgeRequest:
    older_than: str
    dry_run: bool = False
    # Purging deletes messages for good: the caller says so, as the CLI asks.
    confirm: bool = False
    reason: str = "purged from the dead-letter queue through the admin API"


@get("/v1/admin/dlq", guards=[auth.admin_only], tags=TAGS, responses=openapi.errors(503))
async def list_dead_letters(request: Request, ctx: Context, page: int = 1,
                            limit: int = 50) -> dict:
    """Your tenant's dead letters, oldest first, with reason, receive count and age."""
    if page < 1 or not 1 <= limit <= 500:
        raise errors.InvalidRequest("page must be ≥ 1 and limit between 1 and 500.")
    return await _call(ctx, dlq.list_letters, tenant_id=_tenant(request), page=page, limit=limit)


@get("/v1/admin/dlq/{message_id:str}", guards=[auth.admin_only], tags=TAGS,
     responses=openapi.errors(404, 503))
async def show_dead_letter(message_id: str, request: Request, ctx: Context) -> dict:
    """One dead letter in full: body, attributes and its run."""
    return await _call(ctx, dlq.show, message_id, tenant_id=_tenant(request))


@post("/v1/admin/dlq/redrive", guards=[auth.admin_only], status_code=200, tags=TAGS,
      responses=openapi.errors(503))
async def redrive_dead_letters(data: RedriveRequest, request: Request, ctx: Context) -> dict:
    """Send dead letters back to the ingest queue; failed runs are reopened, on the record."""
    selection = dlq.Selection(all=data.all, run_ids=frozenset(data.run_ids),
                              message_ids=frozenset(data.message_ids))
    return await _call(ctx, dlq.redrive, selection=selection, actor=_actor(request),
                       reason=data.reason, tenant_id=_tenant(request), dry_run=data.dry_run,
                       limit=data.limit)


@post("/v1/admin/dlq/purge", guards=[auth.admin_only], status_code=200, tags=TAGS,
      responses=openapi.errors(503))
async def purge_dead_letters(data: PurgeRequest, request: Request, ctx: Context) -> dict:
    """Delete your tenant's dead letters older than `older_than` (90s, 15m, 2h, 7d)."""
    if not (data.dry_run or data.confirm):
        raise errors.InvalidRequest("Purging deletes messages for good: send confirm=true, or "
                                    "dry_run=true to see what would go.")
    return await _call(ctx, dlq.purge, older_than_s=dlq.parse_age(data.older_than),
                       actor=_actor(request), reason=data.reason, tenant_id=_tenant(request),
                       dry_run=data.dry_run)


def _tenant(request: Request) -> UUID:
    return auth.current(request).tenant_id


def _actor(request: Request) -> reopen.Actor:
    principal = auth.current(request)
    return reopen.Actor.user(principal.user_id, principal.is_admin)


async def _call(ctx: Context, operation: Callable[..., dict[str, Any]], *args: Any,
                **kwargs: Any) -> dict[str, Any]:
    """Run a DLQ operation in a thread with a connection of its own (the service is sync)."""

    def work() -> dict[str, Any]:
        queue = dlq.DeadLetterQueue.of(ctx.queue)
        with db.connect(ctx.settings.database_url, autocommit=True, connect_timeout=5) as conn:
            return operation(queue, conn, *args, max_scan=ctx.settings.dlq_scan_max, **kwargs)

    try:
        with db.translate():
            return await asyncio.to_thread(work)
    except (BotoCoreError, ClientError) as exc:
        raise errors.ServiceUnavailable("The queue is unreachable; retry in a minute.") from exc
