"""/health/live (the process answers) and /health/ready (it can serve every route).

Readiness is this process's own truth, for a load balancer or a supervisor to act on
(docs/decisions/0321): 503 while the database, the queue or the object store does not answer,
while its query model is still loading, or while the event writer is past its retry budget.
Each check says its state, so an operator sees which one holds the process back.
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Request, Response, get

from gateway import openapi
from gateway.context import Context, Ctx
from shared import objectstore

# Each probe gives up after this long: a check that hangs is a check that failed.
PROBE_TIMEOUT_S = 3.0
# A process that is not ready says when to ask again.
RETRY_AFTER_S = 5
# The query model's states in which every route can be served (gateway/search/embedding.py).
MODEL_READY = ("loaded", "on first use", "disabled")


@get("/health/live", opt={"public": True}, tags=["health"])
async def live() -> dict:
    return {"status": "ok"}


@get("/health/ready", opt={"public": True}, tags=["health"], responses=openapi.errors(503))
async def ready(request: Request, ctx: Ctx) -> Response:
    """Ready (200) only when this process can serve every route: the database, the queue and
    the object store answer, its query model is loaded (or loads on first use), and the event
    writer is within its retry budget. Otherwise 503 `not_ready` with `Retry-After`; `checks`
    gives each one's state either way."""
    database, queue, store = await asyncio.gather(_database(ctx), _queue(ctx), _store(ctx))
    # The event writer retries transient errors without end; past its budget it is critical
    # and this replica leaves the load balancer while it keeps retrying (ADR 0135).
    events = ctx.events.status() if ctx.events is not None else "ok"
    checks = {"database": database, "queue": queue, "object_store": store,
              "event_writer": events, "query_model": _model(request, ctx)}
    failing = [name for name, state in checks.items() if not _fine(name, state)]
    if failing:
        return Response({"code": "not_ready", "status": "unavailable", "checks": checks,
                         "detail": f"Not ready: {', '.join(failing)}; retry in a few seconds."},
                        status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})
    return Response({"status": "ok", "checks": checks}, status_code=200)


def _fine(name: str, state: str) -> bool:
    if name == "query_model":
        return state in MODEL_READY
    if name == "event_writer":
        return not state.startswith("critical")
    return state == "ok"


def _model(request: Request, ctx: Context) -> str:
    if not ctx.settings.search_enabled:
        return "disabled"
    runtime: Any = request.app.state.get("search")
    return runtime.embedder.state if runtime is not None else "disabled"


async def _database(ctx: Context) -> str:
    try:
        async with ctx.pool.connection(timeout=PROBE_TIMEOUT_S) as conn:
            await conn.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        return f"unreachable: {type(exc).__name__}"


async def _queue(ctx: Context) -> str:
    return await _probe(ctx.queue.depth)


async def _store(ctx: Context) -> str:
    return await _probe(lambda: objectstore.probe(ctx.upload_store))


async def _probe(call: Any) -> str:
    try:
        await asyncio.wait_for(asyncio.to_thread(call), timeout=PROBE_TIMEOUT_S + 2)
        return "ok"
    except Exception as exc:  # noqa: BLE001
        return f"unreachable: {type(exc).__name__}"
