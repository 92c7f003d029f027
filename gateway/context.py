"""What request handlers need from the running gateway, built once by the app's lifespan."""

from __future__ import annotations

from typing import Any

from litestar.datastructures import State
from psycopg_pool import AsyncConnectionPool

from gateway.outbox import OutboxRelay
from shared.objectstore import FileStore, S3Store
from shared.queue import Queue
from shared.settings import GatewaySettings


class Context:
    # A plain class, not a dataclass: Litestar would otherwise try to validate its fields.
    def __init__(self, settings: GatewaySettings, pool: AsyncConnectionPool, queue: Queue, s3: Any,
                 upload_store: FileStore | S3Store, relay: OutboxRelay) -> None:
        self.settings = settings
        self.pool = pool
        self.queue = queue
        self.s3 = s3
        self.upload_store = upload_store
        self.relay = relay


def provide(state: State) -> Context:
    ctx: Context = state.ctx
    return ctx
