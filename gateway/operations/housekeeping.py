"""The gateway's periodic operations loop: dead letters into Postgres, cached queue depths,
threshold alerts, cleanup.

The dead-letter mover (gateway/operations/dlq.py ``archive``) runs on every replica: SQS hands each
message to one receiver at a time and the insert is idempotent on the message id, so replicas
need no lock between them. It runs before the depth refresh, so the cached depth is what is
left in SQS after the move (docs/decisions/0060).

Every replica refreshes its own depth cache (one SQS call per queue per interval, whatever the
scrape rate). The threshold check (import-runs-state-machine.md §5.2: DLQ depth, backlog) runs
on one replica at a time under a transaction-scoped advisory lock, and the alert window in
Postgres makes sure a second replica that checks a moment later raises nothing new. Cleanup
takes its own lock (gateway/operations/cleanup.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from pathlib import Path

from gateway.operations import cleanup, dlq
from gateway.operations.metrics import DepthCache
from gateway.sources.syncs import SyncManager
from shared import alerts, db
from shared.queue import Queue
from shared.settings import GatewaySettings

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("operations.sql"))
_LOCK_KEY = 0x1D6E57_0004


async def run_forever(settings: GatewaySettings, pool: db.AsyncPool, queue: Queue,
                      s3: object, depths: DepthCache, alerter: alerts.Alerter,
                      syncs: SyncManager | None = None) -> None:
    next_cleanup = time.monotonic() if settings.cleanup_interval_s else float("inf")
    next_archive = time.monotonic() if settings.dlq_archive_interval_s else float("inf")
    while True:
        if queue.dlq_url and time.monotonic() >= next_archive:
            next_archive = time.monotonic() + settings.dlq_archive_interval_s
            await _step("dead-letter archive", asyncio.to_thread(archive_dead_letters,
                                                                 settings, queue))
        await _step("queue depth refresh", depths.refresh(queue))
        await _step("alert threshold check", check_thresholds(settings, pool, depths, alerter))
        if syncs is not None:  # scheduled source syncs (docs/decisions/0118)
            await _step("scheduled syncs", syncs.run_due())
        if time.monotonic() >= next_cleanup:
            next_cleanup = time.monotonic() + settings.cleanup_interval_s
            await _step("cleanup", asyncio.to_thread(
                cleanup.run, settings.database_url, s3,
                upload_store_uri=settings.upload_store_uri,
                artifact_store_uri=settings.artifact_store_uri,
                policy=cleanup.Policy.from_settings(settings)))
        await asyncio.sleep(settings.housekeeping_interval_s)


def archive_dead_letters(settings: GatewaySettings, queue: Queue) -> dlq.ArchiveReport:
    with db.connect(settings.database_url, autocommit=True, connect_timeout=5) as conn:
        return dlq.archive(dlq.DeadLetterQueue.of(queue), conn, max_messages=settings.dlq_scan_max,
                           body_max_bytes=settings.dlq_body_max_bytes)


async def _step(what: str, work: Awaitable[object]) -> None:
    try:
        await work
    except Exception as exc:  # noqa: BLE001 - one failed step must not stop the others
        log.warning("housekeeping step failed", extra={
            "step": what, "error_type": type(exc).__name__, "error": str(exc)})


async def check_thresholds(settings: GatewaySettings, pool: db.AsyncPool,
                           depths: DepthCache, alerter: alerts.Alerter) -> list[alerts.Alert]:
    """Raise the backlog and DLQ-depth alerts that are over their thresholds; return them."""
    async with pool.connection() as conn, conn.transaction():
        got = await (await conn.execute("SELECT pg_try_advisory_xact_lock(%s) AS ok",
                                        (_LOCK_KEY,))).fetchone()
        if not got or not got["ok"]:
            return []
        row = await (await conn.execute(Q["backlog"])).fetchone()
        archived = await (await conn.execute(Q["open_dead_letters"],
                                             {"tenant_id": None})).fetchone()
        imports = await (await conn.execute(Q["imports_alert_figures"])).fetchone()
    fired = []
    backlog = int(row["backlog"]) if row else 0
    if backlog > settings.alert_backlog:
        fired.append(alerts.backlog(backlog, settings.alert_backlog))
    # Waiting for someone: still in SQS, plus archived and neither redriven nor purged.
    dead = None if depths.dlq_depth is None else depths.dlq_depth + int(archived["open"] if archived else 0)
    if dead is not None and dead > settings.alert_dlq_depth:
        fired.append(alerts.dlq_depth(dead, settings.alert_dlq_depth))
    fired += _import_alerts(settings, imports)
    for alert in fired:
        log.warning("alert threshold exceeded", extra={"alert": alert.key})
        alerter.send(alert)
    return fired


def _import_alerts(settings: GatewaySettings, row: dict | None) -> list[alerts.Alert]:
    """Records imports (docs/decisions/0130): a burst of failed batches, stale batches."""
    if row is None:
        return []
    fired = []
    if row["failed_1h"] > settings.alert_imports_failed_1h:
        fired.append(alerts.imports_failed(int(row["failed_1h"]), settings.alert_imports_failed_1h))
    if row["stale_count"]:
        fired.append(alerts.stale_imports(int(row["stale_count"]), row["oldest_stale_batch_id"],
                                          float(row["oldest_stale_hours"])))
    return fired
