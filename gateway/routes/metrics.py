"""/metrics (Prometheus text) and /api/metrics (JSON, import-runs-state-machine.md §6).

Both are fleet-wide aggregates without tenant data; scrapers carry no JWT, so they skip the
login guard and, when METRICS_TOKEN is set, need it as a bearer token (docs/decisions/0011).
"""

from __future__ import annotations

import hmac

from litestar import Response, get
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from gateway import auth, metrics, openapi
from gateway.context import Context
from shared import db, errors


async def metrics_token(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    expected = connection.app.state.ctx.settings.metrics_token
    if not expected:
        return
    given = auth.bearer_token(connection) or ""
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise errors.Unauthorized("Send the metrics token: "
                                  "'Authorization: Bearer <METRICS_TOKEN>'.")


OPT = {"public": True}


@get("/metrics", opt=OPT, guards=[metrics_token], include_in_schema=False)
async def prometheus(ctx: Context) -> Response:
    snap = await _snapshot(ctx)
    body = ctx.exporter.render(snap)
    return Response(body, media_type=CONTENT_TYPE_PLAIN_0_0_4)


@get("/api/metrics", opt=OPT, guards=[metrics_token], tags=["operations"],
     responses=openapi.errors(401, 503))
async def dashboard(ctx: Context) -> dict:
    """Backlog, failures of the last 24 h, stale runs, processing time, DLQ depth."""
    return metrics.dashboard_json(await _snapshot(ctx))


async def _snapshot(ctx: Context) -> metrics.Snapshot:
    with db.translate():
        return await metrics.snapshot(ctx.pool, ctx.depths,
                                      stale_s=ctx.settings.metrics_stale_after_s)
