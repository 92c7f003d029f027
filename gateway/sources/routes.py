"""Admin S3 sources and their syncs: a thin HTTP layer over gateway/sources/definitions.py and syncs.py."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from litestar import Request, Response, Router, delete, get, patch, post
from litestar.params import FromPath, JSONBody

from gateway import auth, openapi, paging
from gateway.context import Ctx
from gateway.sources import access as source_access
from gateway.sources import definitions as sources
from gateway.sources import syncs

# The bodies are dicts checked by sources.parse against these types (their /schema too).
CREATE = {"body": sources.SourceFields}


@post("/", status_code=201, responses=openapi.errors(409), opt=CREATE)
async def create_source(data: JSONBody[dict[str, Any]], request: Request, ctx: Ctx) -> dict:
    """Register a bucket/prefix (optional endpoint_url, region, include/exclude globs).

    A tenant admin only inside a bucket granted to its tenant (403 bucket_not_granted);
    operators any bucket; nobody the platform's own (403 platform_bucket)."""
    principal = auth.current(request)
    fields = sources.parse(data, partial=False)
    row = await sources.create(ctx.pool, source_access.Rules.of(ctx.settings),
                               tenant_id=principal.tenant_id, created_by=principal.user_id,
                               by_operator=principal.is_operator, fields=fields)
    return sources.view(row)


@post("/test-connection", status_code=200, responses=openapi.errors(400, 403), opt=CREATE)
async def test_connection(data: JSONBody[dict[str, Any]], request: Request, ctx: Ctx) -> dict:
    """List one page of a source's bucket before saving it, with the checks of a sync: 403
    for a bucket not granted or the platform's, 400 for an endpoint not allowed; what S3
    answers comes back as `ok` and a `detail` in plain words."""
    principal = auth.current(request)
    return await syncs.test_connection(source_access.Rules.of(ctx.settings), ctx.settings,
                                       ctx.pool, tenant_id=principal.tenant_id,
                                       by_operator=principal.is_operator,
                                       fields=sources.parse_probe(data))


@get("/", dependencies=paging.PAGES)
async def list_sources(request: Request, ctx: Ctx, window: paging.Paged) -> dict:
    principal = auth.current(request)
    rows = await sources.list_page(ctx.pool, tenant_id=principal.tenant_id, limit=window.limit,
                                   offset=(window.page - 1) * window.limit)
    return window.result(rows, sources.view)


@get("/{source_id:uuid}", responses=openapi.errors(404))
async def get_source(source_id: FromPath[UUID], request: Request, ctx: Ctx) -> dict:
    principal = auth.current(request)
    return sources.view(await sources.get(ctx.pool, tenant_id=principal.tenant_id,
                                          source_id=source_id))


@patch("/{source_id:uuid}", responses=openapi.errors(404, 409),
       opt={"body": sources.SourceChange})
async def update_source(source_id: FromPath[UUID], data: JSONBody[dict[str, Any]], request: Request,
                        ctx: Ctx) -> dict:
    """Change any field but the bucket; takes effect at the next sync."""
    principal = auth.current(request)
    changes = sources.parse(data, partial=True)
    return sources.view(await sources.update(ctx.pool, source_access.Rules.of(ctx.settings),
                                             tenant_id=principal.tenant_id, source_id=source_id,
                                             by_operator=principal.is_operator, changes=changes))


@delete("/{source_id:uuid}", status_code=200, responses=openapi.errors(404, 409))
async def delete_source(source_id: FromPath[UUID], request: Request, ctx: Ctx) -> dict:
    """Soft-delete: the source disappears and its documents stop being served; no row is
    removed (docs/decisions/0020-s3-source-deletion.md)."""
    principal = auth.current(request)
    return await sources.delete(ctx.pool, tenant_id=principal.tenant_id, source_id=source_id)


@post("/{source_id:uuid}/sync", status_code=202, responses=openapi.errors(400, 404, 409))
async def trigger_sync(source_id: FromPath[UUID], request: Request, ctx: Ctx) -> Response:
    """Start a sync in the background: 202 with its id, or 409 with the running one's id; 403
    when the tenant's grant for the bucket was revoked, 400 when the endpoint is no longer
    allowed."""
    principal = auth.current(request)
    started = await ctx.syncs.trigger(tenant_id=principal.tenant_id, source_id=source_id,
                                      initiated_by=principal.user_id)
    location = f"/v1/sources/{source_id}/syncs/{started['sync_id']}"
    return Response(started, status_code=202, headers={"Location": location})


@get("/{source_id:uuid}/syncs", dependencies=paging.PAGES)
async def list_syncs(source_id: FromPath[UUID], request: Request, ctx: Ctx,
                     window: paging.Paged) -> dict:
    principal = auth.current(request)
    rows = await syncs.list_page(ctx.pool, tenant_id=principal.tenant_id, source_id=source_id,
                                 limit=window.limit, offset=(window.page - 1) * window.limit)
    return window.result(rows, syncs.view)


@get("/{source_id:uuid}/syncs/{sync_id:uuid}", responses=openapi.errors(404))
async def get_sync(source_id: FromPath[UUID], sync_id: FromPath[UUID], request: Request,
                   ctx: Ctx) -> dict:
    principal = auth.current(request)
    row = await syncs.get(ctx.pool, tenant_id=principal.tenant_id, source_id=source_id,
                          sync_id=sync_id)
    # The runs that did not succeed, to link them: failed first, then those in flight.
    return syncs.view(row) | {"runs": row["runs"]}


# Every route here is admin-only (gateway-worker-ingestion.md §10): the guard sits on the router.
router = Router("/v1/sources", guards=[auth.admin_only], tags=["sources"], route_handlers=[
    create_source, test_connection, list_sources, get_source, update_source, delete_source, trigger_sync,
    list_syncs, get_sync])
