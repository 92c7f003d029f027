from __future__ import annotations

from pathlib import Path
from uuid import UUID

from litestar import Request, get

from gateway import auth, openapi, paging, views
from gateway.context import Context
from shared import db, errors

Q = db.load_queries(Path(__file__).parents[1] / "queries.sql")
STATUSES = ("queued", "running", "succeeded", "failed")


@get("/v1/ingestion-runs/{run_id:uuid}", tags=["runs"], responses=openapi.errors(404))
async def get_run(run_id: UUID, request: Request, ctx: Context) -> dict:
    principal = auth.current(request)
    async with ctx.pool.connection() as conn:
        row = await (await conn.execute(
            Q["get_run"], {"tenant_id": principal.tenant_id, "run_id": run_id})).fetchone()
    if row is None:
        raise errors.NotFound("No ingestion run with that id exists in your tenant.")
    return views.run(row)


@get("/v1/ingestion-runs", tags=["runs"], dependencies=paging.CURSORS)
async def list_runs(request: Request, ctx: Context, window: paging.Window,
                    status: str | None = None) -> dict:
    """Runs, newest first; follow `next_cursor` to read them all."""
    principal = auth.current(request)
    if status is not None and status not in STATUSES:
        raise errors.InvalidRequest(f"status must be one of {', '.join(STATUSES)}.")
    scope = ("runs", principal.tenant_id, status)
    secret = ctx.settings.jwt_secret
    async with ctx.pool.connection() as conn:
        rows = await (await conn.execute(Q["list_runs"], {
            "tenant_id": principal.tenant_id, "status": status,
            **window.params(secret, scope)})).fetchall()
    return window.result(rows, views.run, secret=secret, scope=scope, key=("created_at", "run_id"))
