from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated
from uuid import UUID

from litestar import Request, post
from litestar.params import FromPath, JSONBody
from msgspec import Meta

from gateway import auth, openapi
from gateway.context import Ctx
from gateway.operations import reopen
from shared import objectstore


@dataclass
class RetryRequest:
    reason: Annotated[str, Meta(max_length=1000, pattern=openapi.NO_NUL)] = "retried by its user"


@post("/v1/ingestion-runs/{run_id:uuid}/retry", status_code=202, tags=["runs"],
      responses=openapi.errors(403, 404, 409))
async def retry_run(run_id: FromPath[UUID], request: Request, ctx: Ctx,
                    data: JSONBody[RetryRequest | None] = None) -> dict:
    """Run a failed run again with its stored upload (admins, or the user who started it).

    409 `run_not_failed` for any other status; 409 `upload_expired` when the raw file is gone.
    """
    principal = auth.current(request)

    async def upload_exists(uri: str) -> bool:
        return await asyncio.to_thread(objectstore.exists, uri, ctx.s3)

    result = await reopen.retry(
        ctx.pool, run_id=run_id, tenant_id=principal.tenant_id,
        actor=reopen.Actor.user(principal.user_id, principal.is_admin),
        reason=(data or RetryRequest()).reason, upload_exists=upload_exists)
    ctx.relay.wake()
    return result
