from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal
from uuid import UUID

from litestar import Request, get
from litestar.params import FromPath, FromQuery, Parameter

from gateway import auth, openapi, paging, views
from gateway.context import Ctx
from shared import db, errors

Q = db.load_queries(Path(__file__).parents[1] / "queries.sql")
STATUSES = ("queued", "running", "succeeded", "failed")
Status = Literal["queued", "running", "succeeded", "failed"]  # STATUSES, an enum in /schema
# A file-name filter longer than any name we store is a mistake (or an attack on the planner).
FILENAME_MAX = 255


@get("/v1/ingestion-runs/{run_id:uuid}", tags=["runs"], responses=openapi.errors(404))
async def get_run(run_id: FromPath[UUID], request: Request, ctx: Ctx) -> dict:
    """One run with its `attempts` (each delivery, takeover, retry and redrive), and for a
    failed run whether retrying can help (`retryable`, `advice`)."""
    principal = auth.current(request)
    keys = {"tenant_id": principal.tenant_id, "run_id": run_id}
    async with ctx.pool.connection() as conn:
        row = await (await conn.execute(Q["get_run"], keys)).fetchone()
        if row is None:
            raise errors.NotFound("No ingestion run with that id exists in your tenant.")
        attempts = await (await conn.execute(Q["list_run_attempts"], keys)).fetchall()
    return views.run(row) | {"attempts": [views.attempt(a) for a in attempts]}


@get("/v1/ingestion-runs", tags=["runs"], dependencies=paging.CURSORS,
     responses=openapi.errors(400))
async def list_runs(
    request: Request, ctx: Ctx, window: paging.Paged, status: FromQuery[Status | None] = None,
    filename: Annotated[str | None, Parameter(
        max_length=FILENAME_MAX, pattern=openapi.NO_NUL,
        description="Runs whose file name (or S3 key) contains this text, any case.")] = None,
    source_id: Annotated[UUID | None, Parameter(
        description="Runs of this S3 source of your tenant.")] = None,
) -> dict:
    """Runs, newest first; follow `next_cursor` to read them all."""
    principal = auth.current(request)
    if status is not None and status not in STATUSES:
        raise errors.InvalidRequest(f"status must be one of {', '.join(STATUSES)}.")
    filename = filename.strip() if filename else None
    async with ctx.pool.connection() as conn:
        rows = await (await conn.execute(Q["list_runs"], {
            "tenant_id": principal.tenant_id, **filters(status, filename, source_id),
            **window.params()})).fetchall()
    return window.result(rows, views.run, key=("created_at", "run_id"))


def filters(status: str | None, filename: str | None, source_id: UUID | None) -> dict:
    """The listing's filter parameters; the file name is matched as a substring, literally."""
    return {"status": status, "source_id": source_id,
            "filename": _contains(filename) if filename else None}


def _contains(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"
