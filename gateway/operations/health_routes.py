from __future__ import annotations

import asyncio

from litestar import Response, get

from gateway import openapi
from gateway.context import Context, Ctx


@get("/health/live", opt={"public": True}, tags=["health"])
async def live() -> dict:
    return {"status": "ok"}


@get("/health/ready", opt={"public": True}, tags=["health"], responses=openapi.errors(503))
async def ready(ctx: Ctx) -> Response:
    """Ready while the database answers: 503 only when it does not.

    The queue alone being unreachable is reported as degraded (200): uploads still commit their
    jobs to the outbox and the relay publishes them when SQS is back, so taking every gateway out
    of the load balancer would turn a queue outage into a full one.
    """
    database, queue = await asyncio.gather(_database(ctx), _queue(ctx))
    # The event writer retries transient errors without end; past its budget it is critical
    # and this replica leaves the load balancer while it keeps retrying (ADR 0135).
    events = ctx.events.status() if ctx.events is not None else "ok"
    checks = {"database": database, "queue": queue, "event_writer": events}
    if database != "ok" or events.startswith("critical"):
        return Response({"status": "unavailable", "checks": checks}, status_code=503)
    status = "ok" if queue == "ok" else "degraded"
    return Response({"status": status, "checks": checks}, status_code=200)


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
