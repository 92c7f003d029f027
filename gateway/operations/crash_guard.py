"""Finish off runs that can no longer finish (gateway-worker-ingestion.md §11.1), so nothing
hangs, without racing the workers' takeover (docs/decisions/0076-crash-guard-republishes.md).

A run that no live worker owns and that has been silent for a republish window first gets its
job re-published through the outbox, at most ``max_republishes`` times, recorded on the run; a
worker that receives it takes the run over at once. Only when that did not help is the run
failed. Queued runs past their never-picked-up TTL are treated alike. Runs at gateway start and
then periodically; a transaction-scoped advisory lock makes one gateway replica do each pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gateway.sources import syncs
from shared import db
from shared.settings import GatewaySettings

log = logging.getLogger(__name__)
_FIELDS = GatewaySettings.model_fields
REPUBLISH_AFTER_S: float = _FIELDS["crash_guard_republish_after_s"].default
MAX_REPUBLISHES: int = _FIELDS["crash_guard_max_republishes"].default
Q = db.load_queries(Path(__file__).with_name("crash_guard.sql"))
_LOCK_KEY = 0x1D6E57_0002


@dataclass(frozen=True)
class GuardResult:
    ran: bool
    failed_queued: int = 0
    failed_running: int = 0
    failed_syncs: int = 0
    # Runs whose job was re-published instead of failing them (this pass).
    republished: int = 0
    # Import batches failed with their records runs (docs/decisions/0128).
    failed_batches: int = 0
    # The runs it failed, for the alert (shared/alerts.py); not part of equality.
    run_ids: tuple = field(default=(), compare=False)


async def sweep(pool: db.AsyncPool, *, queued_ttl_s: float, running_stale_s: float,
                republish_after_s: float = REPUBLISH_AFTER_S,
                max_republishes: int = MAX_REPUBLISHES,
                sync_stale_s: float = 120.0) -> GuardResult:
    windows = {"queued_ttl_s": queued_ttl_s, "running_stale_s": running_stale_s,
               "republish_after_s": republish_after_s, "max_republishes": max_republishes}
    async with pool.connection() as conn, conn.transaction():
        got = await (await conn.execute("SELECT pg_try_advisory_xact_lock(%s) AS ok",
                                        (_LOCK_KEY,))).fetchone()
        if not got or not got["ok"]:
            return GuardResult(ran=False)
        # Fail first, then republish: a run republished in this pass is not failed in it.
        running = await (await conn.execute(Q["fail_abandoned_running"], windows)).fetchall()
        queued = await (await conn.execute(Q["fail_abandoned_queued"], windows)).fetchall()
        republished = await (await conn.execute(Q["republish_abandoned"], windows)).fetchall()
        batches = await _fail_batches(conn, [*running, *queued])
        # S3 syncs of a gateway that died: their heartbeat stops (gateway/sources/syncs.py).
        syncs_failed = await syncs.fail_stale(conn, stale_s=sync_stale_s)
    _log(queued, running, republished, syncs_failed)
    return GuardResult(ran=True, failed_queued=len(queued), failed_running=len(running),
                       failed_syncs=len(syncs_failed), republished=len(republished),
                       run_ids=tuple(row["run_id"] for row in [*queued, *running]),
                       failed_batches=len(batches))


async def _fail_batches(conn: db.AsyncConn, failed_runs: list) -> list:
    """The batches of the records runs just failed, failed with them (docs/decisions/0128)."""
    run_ids = [row["run_id"] for row in failed_runs if row["batch_id"] is not None]
    if not run_ids:
        return []
    rows = await (await conn.execute(Q["fail_batches_of_runs"], {"run_ids": run_ids})).fetchall()
    for row in rows:
        log.warning("crash guard failed import batch", extra={
            "batch_id": str(row["batch_id"]), "tenant_id": str(row["tenant_id"])})
    return rows


def _log(queued: list, running: list, republished: list, syncs_failed: list) -> None:
    for row in republished:
        log.warning("crash guard re-published the job of an abandoned run", extra={
            "run_id": str(row["run_id"]), "tenant_id": str(row["tenant_id"]),
            "status": row["status"], "republish_count": row["republish_count"]})
    for kind, rows in (("never picked up", queued), ("no live worker", running)):
        for row in rows:
            log.warning("crash guard failed run", extra={
                "run_id": str(row["run_id"]), "tenant_id": str(row["tenant_id"]), "reason": kind})
    for row in syncs_failed:
        log.warning("crash guard failed sync", extra={
            "sync_id": str(row["sync_id"]), "tenant_id": str(row["tenant_id"]),
            "reason": "no heartbeat"})


async def run_forever(pool: db.AsyncPool, *, interval_s: float, queued_ttl_s: float,
                      running_stale_s: float, republish_after_s: float, max_republishes: int,
                      sync_stale_s: float = 120.0,
                      on_failed_runs: Callable[[GuardResult], None] | None = None) -> None:
    while True:
        try:
            result = await sweep(pool, queued_ttl_s=queued_ttl_s,
                                 running_stale_s=running_stale_s,
                                 republish_after_s=republish_after_s,
                                 max_republishes=max_republishes, sync_stale_s=sync_stale_s)
            if on_failed_runs is not None and result.run_ids:
                on_failed_runs(result)  # the terminal-failure alert
        except Exception:
            log.exception("crash guard pass failed")
        await asyncio.sleep(interval_s)
