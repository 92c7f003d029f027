"""Fail runs that can no longer finish (gateway-worker-ingestion.md §11.1), so nothing hangs.

Runs at gateway start and then periodically; a transaction-scoped advisory lock makes one
gateway replica do each pass, the others skip it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from psycopg_pool import AsyncConnectionPool

from shared import db

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("queries.sql"))
_LOCK_KEY = 0x1D6E57_0002


@dataclass(frozen=True)
class GuardResult:
    ran: bool
    failed_queued: int = 0
    failed_running: int = 0


async def sweep(pool: AsyncConnectionPool, *, queued_ttl_s: float, running_stale_s: float) -> GuardResult:
    async with pool.connection() as conn, conn.transaction():
        got = await (await conn.execute("SELECT pg_try_advisory_xact_lock(%s) AS ok",
                                        (_LOCK_KEY,))).fetchone()
        if not got or not got["ok"]:
            return GuardResult(ran=False)
        queued = await (await conn.execute(Q["fail_stale_queued"], {"ttl_s": queued_ttl_s})).fetchall()
        running = await (await conn.execute(Q["fail_stale_running"],
                                            {"stale_s": running_stale_s})).fetchall()
    for kind, rows in (("never picked up", queued), ("no heartbeat", running)):
        for row in rows:
            log.warning("crash guard failed run", extra={
                "run_id": str(row["run_id"]), "tenant_id": str(row["tenant_id"]), "reason": kind})
    return GuardResult(ran=True, failed_queued=len(queued), failed_running=len(running))


async def run_forever(pool: AsyncConnectionPool, *, interval_s: float, queued_ttl_s: float,
                      running_stale_s: float) -> None:
    while True:
        try:
            await sweep(pool, queued_ttl_s=queued_ttl_s, running_stale_s=running_stale_s)
        except Exception:
            log.exception("crash guard pass failed")
        await asyncio.sleep(interval_s)
