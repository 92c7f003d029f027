"""/metrics (Prometheus text) and /api/metrics (JSON, import-runs-state-machine.md §6), and a
tenant admin's own figures at /v1/metrics.

The first two are fleet-wide aggregates without tenant identifiers; scrapers carry no JWT, so
they skip the login guard and need METRICS_TOKEN as a bearer token, which the settings require
outside DEV_MODE (docs/decisions/0011, 0062).
"""

from __future__ import annotations

import hmac
from uuid import UUID

from litestar import Request, Response, get
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from gateway import auth, openapi
from gateway.context import Context, Ctx
from gateway.operations import metrics
from shared import db, errors


async def metrics_token(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    expected = connection.app.state.ctx.settings.metrics_token
    if not expected:
        return  # only in DEV_MODE: the settings refuse to start without it otherwise
    given = auth.bearer_token(connection) or ""
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise errors.Unauthorized("Send the metrics token: "
                                  "'Authorization: Bearer <METRICS_TOKEN>'.")


OPT = {"public": True}


@get("/metrics", opt=OPT, guards=[metrics_token], include_in_schema=False)
async def prometheus(ctx: Ctx) -> Response:
    snap = await _snapshot(ctx)
    body = ctx.exporter.render(snap)
    return Response(body, media_type=CONTENT_TYPE_PLAIN_0_0_4)


@get("/api/metrics", opt=OPT, guards=[metrics_token], tags=["operations"],
     responses=openapi.errors(401, 503))
async def dashboard(ctx: Ctx) -> dict:
    """Backlog, failures of the last 24 h, stale runs, processing time, DLQ depth."""
    return metrics.dashboard_json(await _snapshot(ctx))


@get("/v1/metrics", guards=[auth.admin_only], tags=["operations"])
async def tenant_dashboard(request: Request, ctx: Ctx) -> dict:
    """Your tenant's figures: runs by status, failures of the last 24 h, the last failed run,
    open dead letters."""
    return metrics.tenant_json(await _snapshot(ctx, auth.current(request).tenant_id))


async def _snapshot(ctx: Context, tenant_id: UUID | None = None) -> metrics.Snapshot:
    with db.translate():
        return await metrics.snapshot(ctx.pool, ctx.depths, tenant_id=tenant_id,
                                      stale_s=ctx.settings.metrics_stale_after_s)
