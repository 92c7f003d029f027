"""The webhook dispatcher: claim due deliveries, POST them concurrently, settle each
(docs/decisions/0154, 0195).

Runs as a thread of `ingest worker` beside the SQS consumer (WEBHOOK_DISPATCH_ENABLED), with an
event loop of its own: up to WEBHOOK_CONCURRENCY attempts are in flight at once, each bounded
by one deadline (WEBHOOK_TIMEOUT_S: connect, send and the whole answer; worker/webhooks/send.py).
A place that frees up is filled at once by a new claim. The claim (dispatch.sql) allows at most
WEBHOOK_PER_ENDPOINT deliveries in flight per endpoint across the fleet, and is fair between
tenants: one tenant's slow endpoints can hold the places they have, but every free place goes
first to the tenant with the fewest in flight. So another tenant's due delivery waits at most
one deadline (until some place frees), whatever one tenant's receivers do.

Delivery is at least once: a claim hides its rows for a lease, so the rows of a dispatcher that
dies mid-POST come due again, and a receiver may see a message twice (same webhook-id).

An attempt is delivered on a 2xx answer. Anything else (another status, a redirect, which is never
followed, the deadline, a URL that now resolves to a refused address) is retried after a
full-jitter backoff until WEBHOOK_RETRY_WINDOW_S after the event, then the delivery is failed and
stays in the log. Logs name the delivery, tenant, endpoint and the URL without its query string;
never the secret or the body.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from shared import addresses, db, retry
from shared.settings import WorkerSettings
from shared.webhooks import urls
from worker.background import TableLoop
from worker.webhooks import metrics, send

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("dispatch.sql"))
MAX_ERROR_CHARS = 500
REPORT_EVERY_S = 10.0
# Claims and settles; a handful of connections whatever the number of attempts in flight.
POOL_CONNECTIONS = 3


backoff_s = retry.full_jitter_s


class Dispatcher(TableLoop):
    name = "webhook-dispatcher"

    def __init__(self, settings: WorkerSettings, *,
                 resolve: addresses.Resolver | None = None) -> None:
        super().__init__(settings.database_url, settings.webhook_dispatch_poll_s)
        self.settings = settings
        self.resolve = resolve  # tests only: the name lookup the URL check uses
        self._last_report = 0.0
        self._pool: db.AsyncPool | None = None

    # ── loops ──────────────────────────────────────────────────────────────────────────────
    def run_forever(self) -> None:
        asyncio.run(self.serve(until_idle=False))

    def drain(self) -> None:
        """`ingest worker --once`: deliver what is due now, again until nothing is; retries that
        come due later are left to a running worker."""
        asyncio.run(self.serve(until_idle=True))

    def step(self) -> bool:  # pragma: no cover - the loop is serve(), not TableLoop's
        raise NotImplementedError("the dispatcher runs serve()")

    async def serve(self, *, until_idle: bool) -> None:
        places = self.settings.webhook_concurrency
        self._pool = db.async_pool(self.database_url, min_size=1, max_size=POOL_CONNECTIONS,
                                   name="webhook-dispatcher", timeout_s=5.0)
        await self._pool.open(wait=False)
        running: set[asyncio.Task[None]] = set()
        try:
            async with send.client(places) as http:
                while not self.stopping.is_set():
                    try:
                        await self._report()
                        free = places - len(running)
                        claimed = await self._claim(free) if free > 0 else []
                    except Exception:  # noqa: BLE001 - a database outage must not end the loop
                        log.exception("%s claim failed; retrying shortly", self.name)
                        claimed = []
                        if not running:
                            await asyncio.sleep(self.poll_s)
                            continue
                    for delivery in claimed:
                        running.add(asyncio.create_task(self._deliver(http, delivery)))
                    metrics.IN_FLIGHT.set(len(running))
                    if until_idle and not claimed and not running:
                        return
                    if claimed and len(running) < places:
                        continue  # room left and work found: more may be due
                    running = await self._wait(running)
                # Stopping: what is in flight ends within its deadline; nothing new starts.
                if running:
                    await asyncio.wait(running, timeout=self.settings.webhook_timeout_s + 5)
        finally:
            for task in running:
                task.cancel()  # past its deadline and the grace: its lease brings it back
            await self._pool.close()
            metrics.IN_FLIGHT.set(0)

    async def _wait(self, running: set[asyncio.Task[None]]) -> set[asyncio.Task[None]]:
        """Until an attempt ends (a place is free) or the poll interval passes."""
        if running:
            await asyncio.wait(running, timeout=self.poll_s, return_when=asyncio.FIRST_COMPLETED)
        else:
            await asyncio.sleep(self.poll_s)
        return {task for task in running if not task.done()}

    async def _claim(self, free: int) -> list[dict[str, Any]]:
        assert self._pool is not None
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(Q["claim_lock"])
            return await (await conn.execute(Q["claim"], {
                "limit": min(free, self.settings.webhook_dispatch_batch),
                "per_endpoint": self.settings.webhook_per_endpoint,
                "lease_s": self.settings.webhook_dispatch_lease_s})).fetchall()

    # ── one delivery ───────────────────────────────────────────────────────────────────────
    async def _deliver(self, http: httpx.AsyncClient, delivery: dict[str, Any]) -> None:
        context = {"delivery_id": delivery["delivery_id"], "tenant_id": str(delivery["tenant_id"]),
                   "webhook_id": str(delivery["webhook_id"]), "event_id": str(delivery["event_id"]),
                   "event_type": delivery["event_type"], "attempt": delivery["attempts"],
                   "url": urls.loggable(delivery["url"])}
        started = time.monotonic()
        try:
            result = await send.attempt(
                http, delivery, deadline_s=self.settings.webhook_timeout_s,
                allowlist=self.settings.webhook_url_allowlist, dev_mode=self.settings.dev_mode,
                resolve=self.resolve)
        except Exception as exc:  # noqa: BLE001 - one delivery must not take the loop down
            log.exception("webhook attempt raised", extra=context)
            result = send.Result(None, f"{type(exc).__name__}: the attempt failed")
        metrics.ATTEMPT_SECONDS.observe(time.monotonic() - started)
        try:
            await self._settle(delivery, result, context)
        except Exception:  # noqa: BLE001 - its lease brings the delivery back
            log.warning("webhook delivery could not be settled; it comes due again after its "
                        "lease", extra=context, exc_info=True)

    async def _settle(self, delivery: dict[str, Any], result: send.Result,
                      context: dict[str, Any]) -> None:
        keys = {"delivery_id": delivery["delivery_id"], "claim_token": delivery["claim_token"],
                "status_code": result.status_code}
        if result.error is None:
            await self._execute(Q["delivered"], keys)
            metrics.ATTEMPTS.labels("delivered").inc()
            log.info("webhook delivered", extra={**context, "status_code": result.status_code})
            return
        delay = backoff_s(delivery["attempts"], self.settings.webhook_backoff_base_s,
                          self.settings.webhook_backoff_max_s)
        error = result.error[:MAX_ERROR_CHARS]
        if float(delivery["age_s"]) + delay > self.settings.webhook_retry_window_s:
            await self._execute(Q["give_up"], {**keys, "error": error})
            metrics.ATTEMPTS.labels("failed").inc()
            log.warning("webhook delivery failed for good", extra={
                **context, "status_code": result.status_code, "error": error})
            return
        await self._execute(Q["retry"], {**keys, "error": error, "delay_s": delay})
        metrics.ATTEMPTS.labels("retry").inc()
        log.info("webhook attempt failed; will retry", extra={
            **context, "status_code": result.status_code, "error": error,
            "retry_in_s": round(delay, 2)})

    async def _execute(self, query: str, params: dict[str, Any]) -> None:
        assert self._pool is not None
        async with self._pool.connection() as conn:
            await conn.execute(query, params)

    async def _report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_report < REPORT_EVERY_S:
            return
        self._last_report = now
        assert self._pool is not None
        async with self._pool.connection() as conn:
            row = await (await conn.execute(Q["backlog"])).fetchone() or {}
        metrics.PENDING.set(row.get("pending") or 0)
        metrics.OLDEST.set(float(row.get("oldest_pending_s") or 0))


def start(dispatcher: Dispatcher) -> threading.Thread:
    return dispatcher.start()
