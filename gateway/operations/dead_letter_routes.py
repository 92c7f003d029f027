"""A tenant admin's own dead letters: list, show and redrive (docs/decisions/0060).

Scoped to the caller's tenant from the verified token; messages that name another tenant, or
none, are not there. Purge is the operators' (/v1/admin/dlq/purge): a tenant admin redrives
what they can fix, and what cannot run again stays on record until platform staff look.
"""

from __future__ import annotations

from uuid import UUID

from litestar import Request, get, post
from litestar.params import FromQuery, JSONBody

from gateway import auth, openapi, paging
from gateway.context import Ctx
from gateway.operations import dlq
from gateway.operations import dlq_routes as admin_dlq

TAGS = ["dead letters"]
GUARDS = [auth.admin_only]


@get("/v1/dead-letters", guards=GUARDS, tags=TAGS, dependencies=paging.PAGES,
     responses=openapi.errors(503))
async def list_own(request: Request, ctx: Ctx, window: paging.Paged,
                   status: FromQuery[admin_dlq.Status] = "open") -> dict:
    """Your tenant's dead letters, oldest first (status open, redriven, purged or all)."""
    return await admin_dlq.call(ctx, dlq.list_letters, tenant_id=_tenant(request),
                                status=None if status == "all" else status,
                                page=window.page, limit=window.limit)


@get("/v1/dead-letters/{message_id:str}", guards=GUARDS, tags=TAGS,
     responses=openapi.errors(503))
async def show_own(message_id: admin_dlq.MessageId, request: Request,
                   ctx: Ctx) -> dict:
    """One of your tenant's dead letters in full: body, attributes and its run."""
    return await admin_dlq.call(ctx, dlq.show, message_id, tenant_id=_tenant(request))


@post("/v1/dead-letters/redrive", guards=GUARDS, status_code=200, tags=TAGS,
      responses=openapi.errors(503))
async def redrive_own(data: JSONBody[admin_dlq.Redrive], request: Request, ctx: Ctx) -> dict:
    """Send your tenant's dead letters back through the outbox; failed runs are reopened."""
    return await admin_dlq.redrive_for(data, request, ctx, tenant_id=_tenant(request))


def _tenant(request: Request) -> UUID:
    return auth.current(request).tenant_id
