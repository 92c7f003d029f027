"""The gateway application: ``create_app(settings)`` builds everything; nothing runs at import."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager

from litestar import Litestar, Router
from litestar.di import Provide
from litestar.exceptions import NotFoundException
from litestar.openapi import OpenAPIConfig
from litestar.types import ASGIApp, Receive, Scope, Send

from gateway import auth, errors, openapi
from gateway.auth import routes as auth_routes
from gateway.auth import user_routes as users
from gateway.context import Context, provide
from gateway.documents import attachments
from gateway.documents import ingest_routes as ingest
from gateway.documents import routes as documents
from gateway.edge import json_depth, methods, query, strict_body, transport
from gateway.events import keys as event_keys
from gateway.events import replay_routes as event_replay
from gateway.events import routes as event_routes
from gateway.events import timing as event_timing
from gateway.events import writer as event_writer
from gateway.imports import batches as import_batches
from gateway.imports import clients as ad_clients
from gateway.imports import intake as import_intake
from gateway.imports import ops as import_ops
from gateway.imports import routes as imports
from gateway.live import hub as live_hub
from gateway.live import routes as live_routes
from gateway.operations import crash_guard, housekeeping, metrics, metrics_routes
from gateway.operations import dead_letter_routes as dead_letters
from gateway.operations import dlq_routes as admin_dlq
from gateway.operations import health_routes as health
from gateway.operations import retry_routes as retry
from gateway.outbox import OutboxRelay
from gateway.records import routes as records
from gateway.runs import routes as runs
from gateway.search import routes as search_routes
from gateway.search import service as search
from gateway.sources import routes as source_routes
from gateway.sources import syncs
from gateway.web import ui
from gateway.webhooks import routes as webhook_routes
from shared import alerts, aws, db, heap, objectstore
from shared import logging as applog
from shared.queue import Queue
from shared.settings import GatewaySettings

log = logging.getLogger(__name__)

# A shutdown step slower than this is logged with its name (normally each takes milliseconds).
SLOW_SHUTDOWN_STEP_S = 2.0

# How long a gateway sharing its port waits for its query model before it listens anyway.
MODEL_WAIT_S = 120.0


def create_app(settings: GatewaySettings) -> Litestar:
    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with _running(settings) as ctx:
            app.state.ctx = ctx
            if settings.search_enabled and settings.search_model_at_start:
                # Vector queries answer model_loading until it is in (docs/decisions/0321).
                app.state.search.embedder.start_loading()
                if settings.reuse_port:
                    # Peers on the port serve meanwhile: listen once every route can be served.
                    await app.state.search.embedder.wait_loaded(MODEL_WAIT_S)
            yield

    web_router, templates = ui.mount()  # the web UI: pages, static assets, templates
    app = Litestar(
        route_handlers=[
            auth_routes.login, auth_routes.me, auth_routes.logout, auth_routes.change_password,
            users.router, ingest.ingest,
            runs.get_run, runs.list_runs, documents.list_documents, documents.get_document,
            documents.deactivate_document, documents.reactivate_document, web_router,
            health.live, health.ready, source_routes.router,
            retry.retry_run, admin_dlq.list_dead_letters, admin_dlq.show_dead_letter,
            admin_dlq.redrive_dead_letters, admin_dlq.purge_dead_letters,
            metrics_routes.prometheus, metrics_routes.dashboard,
            # Operators' and tenant admins' dead letters, a tenant's figures (docs/decisions/0060).
            dead_letters.list_own, dead_letters.show_own, dead_letters.redrive_own,
            metrics_routes.tenant_dashboard,
            *imports.ROUTES,  # records imports: contracts (docs/decisions/0080)
            *search_routes.ROUTES,  # search and cited answers (docs/decisions/0105-0109)
            # Records imports (DESIGN.md "Records imports", docs/decisions/0090).
            import_intake.create_import, import_batches.get_batch, import_batches.get_batch_errors,
            import_batches.list_imports, import_batches.export_errors,
            *import_ops.ROUTES,  # imports ops views (docs/decisions/0129)
            *records.ROUTES,  # records read-back and duplicate candidates (docs/decisions/0121)
            *event_routes.ROUTES,  # event intake, API keys, cursor (docs/decisions/0135-0136)
            *event_replay.ROUTES,  # ledger events: list, show, replay (docs/decisions/0142)
            *webhook_routes.ROUTES,  # webhook endpoints and deliveries (docs/decisions/0153)
            *ad_clients.ROUTES,  # advertiser clients of ad-metrics imports (docs/decisions/0147)
            *live_routes.ROUTES,  # live updates for the web UI (docs/decisions/0160)
        ],
        dependencies={"ctx": Provide(provide, sync_to_thread=False)},
        guards=[auth.authenticate],
        # JSON bodies are converted as JSON says them, not leniently (gateway/edge, ADR 0331).
        before_request=strict_body.check,
        # An unknown address: the HTML 404 page for browsers, JSON for the API (gateway/web).
        exception_handlers={**errors.HANDLERS, NotFoundException: ui.not_found},  # type: ignore[dict-item]
        # OPTIONS is answered before any guard; JSON bodies are checked for depth as they are
        # read, whichever parser the handler uses (gateway/edge, ADR 0200-0201).
        middleware=[_request_context, transport.hsts(settings.hsts_max_age_s),
                    methods.middleware, query.middleware,
                    transport.slow_body(settings.body_min_bytes_per_s,
                                        settings.body_rate_window_s),
                    json_depth.middleware],
        lifespan=[lifespan],
        template_config=templates,
        # The API's description holds no tenant data, and a browser cannot attach a bearer
        # token to open it: the docs are public like the health checks.
        openapi_config=OpenAPIConfig(
            title="Dragonfly Ingest", version="0.1.0",
            openapi_router=Router("/schema", route_handlers=[], include_in_schema=False,
                                  opt={"public": True})),
        # Our JSON handler (shared/logging.py) is already on the root logger; Litestar's default
        # config would replace it with plain text.
        logging_config=None,
        debug=False,
    )
    # The query model lives as long as the process; it loads as the process starts, or on first
    # use with SEARCH_MODEL_AT_START=false (docs/decisions/0108, 0321).
    app.state.search = search.Runtime(settings)
    openapi.complete(app)  # bearer scheme, shared error answers (docs/decisions/0051)
    return app


@asynccontextmanager
async def _running(settings: GatewaySettings) -> AsyncIterator[Context]:
    """Open the pool and clients, start the background loops, and tear all down at exit."""
    pool = db.async_pool(settings.database_url, min_size=settings.db_pool_min,
                         max_size=settings.db_pool_max, name="gateway",
                         timeout_s=settings.db_pool_timeout_s)
    await pool.open(wait=False)
    s3 = aws.client("s3", endpoint_url=settings.aws_endpoint_url, region=settings.aws_region)
    sqs = aws.client("sqs", endpoint_url=settings.aws_endpoint_url, region=settings.aws_region,
                     read_timeout=10, retries=2)
    queue = Queue(sqs, settings.sqs_queue_url, settings.sqs_dlq_url)
    relay = OutboxRelay(pool, queue, poll_s=settings.outbox_poll_s,
                        max_backoff_s=settings.outbox_max_backoff_s,
                        # e-mail attachments become documents, runs and jobs (ADR 0250)
                        feeders=[lambda: attachments.feed(pool)])
    upload_store = objectstore.open_store(settings.upload_store_uri, s3)
    sync_manager = syncs.SyncManager(settings, pool, upload_store, s3, on_queued=relay.wake)
    ctx = Context(settings, pool, queue, s3, upload_store, relay, syncs=sync_manager)
    alerter = ctx.alerter = alerts.Alerter.from_settings(settings, "gateway")
    ctx.exporter = metrics.Exporter(relay, alerter)
    # Event intake: the writer runs before the server takes its first request (the lifespan
    # ends before uvicorn listens), and reports the ledger's backlog at start (ADR 0135).
    # Its own connections (ADR 0192): a burst of intake never takes the requests' pool. Not
    # checked per group: a group a dead connection broke is retried (ADR 0287).
    writer_pool = db.async_pool(settings.database_url, min_size=1,
                                max_size=settings.events_writer_connections,
                                name="event-writer", timeout_s=settings.db_pool_timeout_s,
                                configure=event_writer.prepare, check=False)
    await writer_pool.open(wait=False)
    ctx.events = event_writer.Writer(
        writer_pool, queue_size=settings.events_queue_size, group_max=settings.events_group_max,
        retry_budget=settings.events_writer_retry_budget, registry=ctx.exporter.registry,
        tasks=settings.events_writer_connections,
        linger_s=settings.events_group_linger_ms / 1000,
        server_timing=settings.events_server_timing)
    ctx.events.start()
    # API keys: one statement at a time for all waiting requests, on a connection of its own.
    key_pool = db.async_pool(settings.database_url, min_size=1, max_size=1, name="api-keys",
                             timeout_s=settings.db_pool_timeout_s)
    await key_pool.open(wait=False)
    ctx.key_lookups = event_keys.Lookups(key_pool, cache_s=settings.events_key_cache_s)
    if settings.events_server_timing:
        event_timing.start()  # the loop-lag sampler and GC timer behind Server-Timing (ADR 0341)
    # Live updates: one LISTEN connection of its own for all open streams (ADR 0160).
    ctx.live = live_hub.Hub(settings.database_url, pool, max_streams=settings.live_max_streams,
                            queue_size=settings.live_queue_size, registry=ctx.exporter.registry,
                            max_per_tenant=settings.live_max_streams_per_tenant,
                            session_check_s=settings.live_heartbeat_s)
    tasks = [
        asyncio.create_task(event_writer.report_forever(
            pool, ctx.events.metrics, settings.events_stats_interval_s), name="event-report"),
        asyncio.create_task(relay.run_forever(), name="outbox-relay"),
        asyncio.create_task(ctx.live.run_forever(), name="live-updates"),
        # API key revocations heard at commit, so live keys may be answered from memory.
        asyncio.create_task(ctx.key_lookups.listen_forever(settings.database_url),
                            name="api-key-revocations"),
        asyncio.create_task(crash_guard.run_forever(
            pool, interval_s=settings.crash_guard_interval_s,
            queued_ttl_s=settings.crash_guard_queued_ttl_hours * 3600,
            running_stale_s=settings.crash_guard_running_stale_min * 60,
            republish_after_s=settings.crash_guard_republish_after_s,
            max_republishes=settings.crash_guard_max_republishes,
            sync_stale_s=settings.sync_stale_s,
            on_failed_runs=lambda r: alerter.send(alerts.runs_interrupted(
                list(r.run_ids), r.failed_queued, r.failed_running))), name="crash-guard"),
        asyncio.create_task(housekeeping.run_forever(
            settings, pool, queue, s3, ctx.depths, alerter, syncs=sync_manager),
            name="housekeeping"),
    ]
    heap.freeze_startup_objects()  # short full GC passes: intake p95 (ADR 0163)
    try:
        yield ctx
    finally:
        # Running syncs record themselves as interrupted while the pool is still open.
        await _timed("syncs", sync_manager.shutdown())
        await _timed("event writer", ctx.events.close())  # commits what requests queued
        for task in tasks:
            task.cancel()
        await _timed("background tasks", asyncio.gather(*tasks, return_exceptions=True))
        await _timed("alerts", asyncio.to_thread(alerter.close, 2.0))
        await _timed("pools", asyncio.gather(writer_pool.close(), key_pool.close()))
        await pool.close()


async def _timed(step: str, work: Awaitable[object]) -> None:
    """Await one step of the shutdown and say so when it was slow: a gateway that takes long
    to stop is killed by its supervisor, and its log should name the step that held it."""
    started = time.monotonic()
    await work
    took = time.monotonic() - started
    if took > SLOW_SHUTDOWN_STEP_S:
        log.warning("slow shutdown step", extra={"step": step, "took_s": round(took, 2)})


def _request_context(app: ASGIApp) -> ASGIApp:
    """Give every request an id, in its logs and in the X-Request-ID response header."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        request_id = headers.get(b"x-request-id", b"").decode()[:64] or uuid.uuid4().hex

        async def send_with_id(message: dict) -> None:  # type: ignore[type-arg]
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)  # type: ignore[arg-type]

        with applog.context(request_id=request_id):
            await app(scope, receive, send_with_id)  # type: ignore[arg-type]

    return middleware
