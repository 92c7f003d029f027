from __future__ import annotations

import asyncio

from litestar import Response, get

from gateway import openapi
from gateway.context import Context


@get("/health/live", opt={"public": True}, tags=["health"])
async def live() -> dict:
    return {"status": "ok"}


@get("/health/ready", opt={"public": True}, tags=["health"], responses=openapi.errors(503))
async def ready(ctx: Context) -> Response:
    """Ready when the database answers and the queue is reachable."""
    checks = {"database": await _database(ctx), "queue": await _queue(ctx)}
    ok = all(v == "ok" for v in checks.values())
    return Response({"status": "ok" if ok else "unavailable", "checks": checks},
                    status_code=200 if ok else 503)


async def _database(ctx: Context) -> str:
    try:
        async with ctx.pool.connection(timeout=3) as conn:
            await conn.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        return f"unreachable: {type(exc).__name__}"


async def _queue(ctx: Context) -> str:
    try:
        await asyncio.wait_for(asyncio.to_thread(ctx.queue.depth), timeout=5)
        return "ok"
    except Exception as exc:  # noqa: BLE001
        return f"unreachable: {type(exc).__name__}"
