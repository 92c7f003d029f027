"""What request handlers need from the running gateway, built once by the app's lifespan."""

from __future__ import annotations

from typing import Any, TypeAlias

from litestar.datastructures import State
from litestar.di import NamedDependency

from gateway.operations import metrics
from gateway.outbox import OutboxRelay
from shared import alerts, db
from shared.objectstore import FileStore, S3Store
from shared.queue import Queue
from shared.settings import GatewaySettings


class Context:
    # A plain class, not a dataclass: Litestar would otherwise try to validate its fields.
    def __init__(self, settings: GatewaySettings, pool: db.AsyncPool, queue: Queue, s3: Any,
                 upload_store: FileStore | S3Store, relay: OutboxRelay,
                 syncs: Any = None) -> None:
        self.settings = settings
        self.pool = pool
        self.queue = queue
        self.s3 = s3
        self.upload_store = upload_store
        self.relay = relay
        # gateway.syncs.SyncManager: runs S3 source syncs in the background.
        self.syncs = syncs
        # Operations: cached queue depths, the Prometheus exporter and the alerter, which the
        # app's lifespan replaces with the running ones.
        self.depths = metrics.DepthCache()
        self.exporter = metrics.Exporter(relay)
        self.alerter = alerts.Alerter([], window_s=600)
        # gateway.events.writer.Writer: this process's event writer (docs/decisions/0135).
        self.events: Any = None
        # gateway.events.keys.Lookups: API key lookups, batched across requests (issue 32).
        self.key_lookups: Any = None
        # gateway.live.hub.Hub: this process's live-update listener (docs/decisions/0160).
        self.live: Any = None


# How a handler asks for it: `ctx: Ctx`, injected by name from the app's `ctx` dependency.
# Litestar 3 drops dependencies inferred from a bare `ctx: Context` (its DI docs ask for this).
Ctx: TypeAlias = NamedDependency[Context]


def provide(state: State) -> Context:
    ctx: Context = state.ctx
    return ctx
