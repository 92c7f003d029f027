"""Fail runs that can no longer finish (gateway-worker-ingestion.md §11.1), so nothing hangs.

Runs at gateway start and then periodically; a transaction-scoped advisory lock makes one
gateway replica do each pass, the others skip it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gateway import syncs
from shared import db

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("queries.sql"))
_LOCK_KEY = 0x1D6E57_0002


@dataclass(frozen=True)
class GuardResult:
    ran: bool
    failed_queued: int = 0
    failed_running: int = 0
    failed_syncs: int = 0
    # The runs it failed, for the alert (shared/alerts.py); not part of equality.
    run_ids: tuple = field(default=(), compare=False)


async def sweep(pool: db.AsyncPool, *, queued_ttl_s: float, running_stale_s: float,
                sync_stale_s: float = 120.0) -> GuardResult:
    async with pool.connection() as conn, conn.transaction():
        got = await (await conn.execute("SELECT pg_try_advisory_xact_lock(%s) AS ok",
                                        (_LOCK_KEY,))).fetchone()
        if not got or not got["ok"]:
            return GuardResult(ran=False)
        queued = await (await conn.execute(Q["fail_stale_queued"], {"ttl_s": queued_ttl_s})).fetchall()
        running = await (await conn.execute(Q["fail_stale_running"],
                                            {"stale_s": running_stale_s})).fetchall()
        # S3 syncs of a gateway that died: their heartbeat stops (gateway/syncs.py).
        syncs_failed = await syncs.fail_stale(conn, stale_s=sync_stale_s)
    for kind, rows in (("never picked up", queued), ("no heartbeat", running)):
        for row in rows:
            log.warning("crash guard failed run", extra={
                "run_id": str(row["run_id"]), "tenant_id": str(row["tenant_id"]), "reason": kind})
    for row in syncs_failed:
        log.warning("crash guard failed sync", extra={
            "sync_id": str(row["sync_id"]), "tenant_id": str(row["tenant_id"]),
            "reason": "no heartbeat"})
    return GuardResult(ran=True, failed_queued=len(queued), failed_running=len(running),
                       failed_syncs=len(syncs_failed),
                       run_ids=tuple(row["run_id"] for row in [*queued, *running]))


async def run_forever(pool: db.AsyncPool, *, interval_s: float, queued_ttl_s: float,
                      running_stale_s: float, sync_stale_s: float = 120.0,
                      on_failed_runs: Callable[[GuardResult], None] | None = None) -> None:
    while True:
        try:
            result = await sweep(pool, queued_ttl_s=queued_ttl_s,
                                 running_stale_s=running_stale_s, sync_stale_s=sync_stale_s)
            if on_failed_runs is not None and result.run_ids:
                on_failed_runs(result)  # the terminal-failure alert
        except Exception:
            log.exception("crash guard pass failed")
        await asyncio.sleep(interval_s)
