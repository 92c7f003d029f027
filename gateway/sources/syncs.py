"""Running syncs in the gateway's background: one per source across all replicas.

A trigger opens a dedicated connection and takes the source's session advisory lock on it;
whoever holds the lock runs the source's sync, and Postgres drops the lock with the connection
if the gateway dies. The same connection writes the sync's heartbeat (and its counters so far);
if a heartbeat cannot be written the lock may be gone, so the sync stops. The crash guard
fails a running sync whose heartbeat went stale (fail_stale), and a trigger that gets the lock
fails any running row left behind, so a dead gateway never blocks a source for long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
)
from psycopg.rows import dict_row

from gateway.sources import access as source_access
from gateway.sources import definitions as sources
from gateway.sources import endpoints, s3objects, sync
from shared import db, errors, objectstore
from shared.settings import GatewaySettings

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("sources.sql"))
# How long a sync's end waits for a heartbeat under way before it cancels it.
BEAT_STOP_S = 5.0
SHUTDOWN_ERROR = "Interrupted: the gateway shut down during the sync; sync again."
COUNTERS = ("listed", "excluded", "new", "changed", "unchanged", "deleted", "skipped", "failed",
            "still_failed")
INGEST = ("queued", "running", "succeeded", "failed")
SYNC_RUNS_SHOWN = 50


class NotDue(Exception):
    """A scheduled sync found, under the lock, that another replica just ran it."""


class _LeaseLost(Exception):
    """The heartbeat could not be written: the lock may be gone, another sync may start."""


class SyncManager:
    def __init__(self, settings: GatewaySettings, pool: db.AsyncPool,
                 store: objectstore.Store, upload_s3: Any, on_queued: Any = None) -> None:
        self.settings, self.pool, self.store, self.upload_s3 = settings, pool, store, upload_s3
        self.on_queued = on_queued or (lambda: None)
        self.rules = source_access.Rules.of(settings)
        # Bounds downloads across every sync this gateway runs (SYNC_DOWNLOAD_CONCURRENCY).
        self.executor = ThreadPoolExecutor(settings.sync_download_concurrency,
                                           thread_name_prefix="sync-fetch")
        self.runner = f"{socket.gethostname()}:{os.getpid()}"
        self._all: set[asyncio.Task[None]] = set()
        self._by_id: dict[UUID, asyncio.Task[None]] = {}

    # ── trigger ─────────────────────────────────────────────────────────────────────────────
    async def trigger(self, *, tenant_id: UUID, source_id: UUID,
                      initiated_by: UUID | None, scheduled: bool = False) -> dict[str, Any]:
        """Start a sync in the background and return its row; SyncInProgress if one runs.
        ``scheduled``: only if still due once the lock is held (NotDue otherwise)."""
        await sources.get(self.pool, tenant_id=tenant_id, source_id=source_id)  # 404 first
        started: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._start(tenant_id, source_id, initiated_by, started,
                                               scheduled))
        self._all.add(task)
        task.add_done_callback(self._all.discard)
        # Shielded: a request cancelled at this point must not cancel a sync that has already
        # taken the lock; the task claims and runs on its own.
        return await asyncio.shield(started)

    async def _start(self, tenant_id: UUID, source_id: UUID, initiated_by: UUID | None,
                     started: asyncio.Future[dict[str, Any]], scheduled: bool = False) -> None:
        """Claim the source (lock, sync row), report to the trigger, then run the sync."""
        try:
            with db.translate():
                conn = await db.AsyncConn.connect(
                    self.settings.database_url, autocommit=True, row_factory=dict_row,
                    connect_timeout=10)
            try:
                source, row = await self._claim(conn, tenant_id, source_id, initiated_by,
                                                scheduled)
            except BaseException:
                await conn.close()
                raise
        except asyncio.CancelledError:
            started.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the trigger, which raises it
            started.set_exception(exc)
            return
        sync_id = row["sync_id"]
        this = asyncio.current_task()
        assert this is not None
        self._by_id[sync_id] = this
        log.info("sync started", extra={"sync_id": str(sync_id), "source_id": str(source_id),
                                         "tenant_id": str(tenant_id)})
        started.set_result({"sync_id": sync_id, "source_id": source_id, "status": "running",
                            "started_at": row["started_at"]})
        try:
            await self._run(conn, source, sync_id, initiated_by)
        finally:
            self._by_id.pop(sync_id, None)

    async def _claim(self, conn: db.AsyncConn, tenant_id: UUID, source_id: UUID,
                     initiated_by: UUID | None,
                     scheduled: bool = False) -> tuple[sources.Source, dict[str, Any]]:
        keys = {"tenant_id": tenant_id, "source_id": source_id}
        with db.translate():
            got = await (await conn.execute(Q["try_lock_source"],
                                            {"key": sources.lock_key(source_id)})).fetchone()
            if not got or not got["locked"]:
                running = await (await conn.execute(Q["running_sync"], keys)).fetchone()
                raise errors.SyncInProgress(running and running["sync_id"])
            # Read again under the lock: a DELETE or PATCH may have landed since the 404 check.
            row = await (await conn.execute(Q["get_source"], keys)).fetchone()
            if row is None:
                raise errors.NotFound("No source with that id exists in your tenant.")
            if not row["enabled"]:
                raise errors.SourceDisabled()
            if scheduled and await (await conn.execute(Q["is_due"], keys)).fetchone() is None:
                await conn.execute(Q["unlock_source"], {"key": sources.lock_key(source_id)})
                raise NotDue()
            await source_access.check_before_sync(conn, self.rules, row)  # revoked? DNS moved?
            async with conn.transaction():
                for orphan in await (await conn.execute(Q["fail_orphaned_sync"], keys)).fetchall():
                    log.warning("sync left by a dead gateway failed", extra={
                        "sync_id": str(orphan["sync_id"]), "source_id": str(source_id)})
                sync_row = await (await conn.execute(Q["insert_sync"], {
                    **keys, "initiated_by": initiated_by, "runner": self.runner})).fetchone()
        assert sync_row is not None
        return sources.Source.from_row(row), sync_row

    # ── the background task ─────────────────────────────────────────────────────────────────
    async def _run(self, conn: db.AsyncConn, source: sources.Source, sync_id: UUID,
                   initiated_by: UUID | None) -> None:
        tally = sync.Tally()
        lost: list[str] = []
        done = asyncio.Event()
        beat = asyncio.create_task(self._beat_forever(conn, source.tenant_id, sync_id, tally,
                                                      asyncio.current_task(), lost, done))
        status, error, complete = "failed", None, False
        try:
            result = await self._sync(source, sync_id, initiated_by, tally)
            complete, error = result.listing_complete, result.error
            status = ("failed" if error else
                      "completed_with_errors" if tally.failed or tally.still_failed
                      else "succeeded")
        except asyncio.CancelledError:
            error = lost[0] if lost else SHUTDOWN_ERROR
        except Exception as exc:  # noqa: BLE001 - recorded on the sync, which then ends
            log.error("sync failed", exc_info=exc, extra={"sync_id": str(sync_id)})
            error = f"The sync failed ({sync.describe(exc)}); fix the cause and sync again."
        finally:
            await self._stop_beating(beat, done)
            await self._finish(conn, source, sync_id, tally, status, error, complete)
        log.info("sync finished", extra={"sync_id": str(sync_id), "status": status,
                                          **{k: getattr(tally, k) for k in COUNTERS}})

    async def _sync(self, source: sources.Source, sync_id: UUID, initiated_by: UUID | None,
                    tally: sync.Tally) -> sync.Result:
        settings = self.settings
        s3 = await asyncio.to_thread(
            s3objects.client, endpoint_url=source.endpoint_url or settings.aws_endpoint_url,
            region=source.region or settings.aws_region)
        limits = sync.Limits(
            max_bytes=settings.upload_max_bytes, allowed=settings.allowed_types,
            page_size=settings.sync_list_page_size,
            concurrency=settings.sync_download_concurrency,
            embedding_model=settings.embedding_model, embedding_dim=settings.embedding_dim)
        return await sync.Sync(
            pool=self.pool, source=source, sync_id=sync_id, initiated_by=initiated_by, s3=s3,
            store=self.store, upload_s3=self.upload_s3, executor=self.executor, limits=limits,
            tally=tally, on_queued=self.on_queued).run()

    async def _beat_forever(self, conn: db.AsyncConn, tenant_id: UUID, sync_id: UUID,
                            tally: sync.Tally, main: asyncio.Task[Any] | None,
                            lost: list[str], done: asyncio.Event) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), self.settings.sync_heartbeat_s)
                return  # the sync ended: the lock connection is _finish's now
            try:
                row = await (await conn.execute(Q["heartbeat_sync"], {
                    "tenant_id": tenant_id, "sync_id": sync_id, **tally.params()})).fetchone()
                if row is None:
                    raise _LeaseLost("the sync was failed meanwhile (stale heartbeat)")
            except (psycopg.Error, _LeaseLost) as exc:
                log.error("sync heartbeat failed; stopping the sync",
                          extra={"sync_id": str(sync_id), "error": str(exc)})
                lost.append("Interrupted: the sync lost its database lock (heartbeat failed); "
                            "sync again.")
                if main is not None and not done.is_set():  # never cancel the sync's _finish
                    main.cancel()
                return

    @staticmethod
    async def _stop_beating(beat: asyncio.Task[None], done: asyncio.Event) -> None:
        """Let the heartbeat end between two beats rather than cancel it mid-query: psycopg
        answers a cancelled query by asking the server to cancel it and waiting up to 5 + 5 s,
        on the very connection that holds the source's lock and records the sync's end. A
        beat that hangs (the database gone) is cancelled after BEAT_STOP_S all the same."""
        done.set()
        try:
            await asyncio.wait_for(asyncio.shield(beat), BEAT_STOP_S)
        except BaseException:  # noqa: BLE001 - a beat that failed or hung ends here either way
            beat.cancel()
            with contextlib.suppress(BaseException):
                await beat

    async def _finish(self, conn: db.AsyncConn, source: sources.Source,
                      sync_id: UUID, tally: sync.Tally, status: str, error: str | None,
                      complete: bool) -> None:
        params = {"tenant_id": source.tenant_id, "sync_id": sync_id, "status": status,
                  "error": error, "listing_complete": complete, **tally.params()}
        try:
            await conn.execute(Q["finish_sync"], params)
            await conn.execute(Q["unlock_source"], {"key": sources.lock_key(source.source_id)})
        except psycopg.Error:
            # The lock connection is gone (and the lock with it): record through the pool.
            with contextlib.suppress(Exception):
                async with self.pool.connection() as other:
                    await other.execute(Q["finish_sync"], params)
        finally:
            with contextlib.suppress(Exception):
                await conn.close()

    # ── schedules (docs/decisions/0118) ─────────────────────────────────────────────────────
    async def run_due(self, limit: int = 20) -> list[UUID]:
        """Start the syncs of scheduled sources that are due; return the started sync ids.

        Called by the gateway's housekeeping on every replica: the per-source lock lets one
        replica run a source, and is_due (read under the lock) keeps a second replica from
        running it again right after. A refusal (a revoked grant, an endpoint no longer
        allowed) is logged and the source tried again at its next turn.
        """
        async with self.pool.connection() as conn:
            due = await (await conn.execute(Q["due_sources"], {"limit": limit})).fetchall()
        started = []
        for row in due:
            try:
                sync_row = await self.trigger(tenant_id=row["tenant_id"],
                                              source_id=row["source_id"], initiated_by=None,
                                              scheduled=True)
            except (errors.SyncInProgress, NotDue):
                continue
            except errors.AppError as exc:
                log.warning("scheduled sync refused", extra={
                    "source_id": str(row["source_id"]), "tenant_id": str(row["tenant_id"]),
                    "error": exc.detail})
                continue
            started.append(sync_row["sync_id"])
        return started

    # ── lifecycle ───────────────────────────────────────────────────────────────────────────
    async def wait(self, sync_id: UUID) -> None:
        """Return when a sync started by this gateway has finished (tests and benchmarks)."""
        task = self._by_id.get(sync_id)
        if task is not None:
            await asyncio.shield(task)

    async def shutdown(self) -> None:
        """Stop running syncs; each records itself failed and lets go of its lock."""
        tasks = list(self._all)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.executor.shutdown(wait=False, cancel_futures=True)


# ── test connection ─────────────────────────────────────────────────────────────────────────
TEST_PAGE = 10  # keys: a test lists one small page, never the bucket


async def test_connection(rules: source_access.Rules, settings: GatewaySettings, pool: db.AsyncPool,
                          *, tenant_id: UUID, by_operator: bool,
                          fields: dict[str, Any]) -> dict[str, Any]:
    """List one page of a source that is not saved yet, with the checks a sync makes first.

    A refusal of our own rules (a bucket not granted, the platform's bucket, an endpoint not
    allowed) is raised like on create; what S3 answers is reported as {"ok": false, "detail"}
    in plain words, since the test itself worked.
    """
    await source_access.check_endpoint(rules, fields["endpoint_url"])
    async with pool.connection() as conn:
        await source_access.authorize(conn, rules, tenant_id=tenant_id, bucket=fields["bucket"],
                                      prefix=fields["prefix"], by_operator=by_operator)

    def list_one() -> endpoints.Probe:
        # One signed request, sent once: no retry, no redirect (docs/decisions/0206).
        s3 = s3objects.client(endpoint_url=fields["endpoint_url"] or settings.aws_endpoint_url,
                              region=fields["region"] or settings.aws_region)
        return endpoints.probe(s3, bucket=fields["bucket"], prefix=fields["prefix"],
                               max_keys=TEST_PAGE)
    try:
        page = await asyncio.to_thread(list_one)
    except Exception as exc:  # noqa: BLE001 - signing failed (no credentials): the answer
        log.info("source connection test failed", extra={"tenant_id": str(tenant_id),
                                                          "error": sync.describe(exc)})
        return {"ok": False, "detail": plain_error(exc, fields["bucket"])}
    if not page.ok:
        log.info("source connection test failed", extra={"tenant_id": str(tenant_id),
                                                          "error": page.detail})
        return {"ok": False, "detail": page.detail}
    keys = page.keys
    return {"ok": True, "keys": keys, "more": page.more,
            "detail": (f"Connected: bucket {fields['bucket']!r} lists "
                       + (f"{len(keys)}{'+' if page.more else ''} object"
                          f"{'s' if len(keys) != 1 else ''}" if keys else "no object")
                       + (f" under {fields['prefix']!r}." if fields["prefix"] else "."))}


def plain_error(exc: BaseException, bucket: str) -> str:
    """What a failed listing means, for the person filling in the form: a sentence, never an
    exception's name."""
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        return endpoints.describe_refusal(code, bucket, 400)
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError)):
        return "The endpoint could not be reached; check the endpoint URL and the region."
    if isinstance(exc, NoCredentialsError):
        return "The gateway has no S3 credentials to sign with; ask an operator to give it some."
    return "Listing the bucket failed; check the endpoint URL, the region and the bucket."


# ── reads and the crash guard ───────────────────────────────────────────────────────────────
def view(row: dict[str, Any]) -> dict[str, Any]:
    counters = {k: row[f"{k}_count"] for k in COUNTERS}
    counters["bytes"] = row["bytes_downloaded"]
    return {
        "sync_id": row["sync_id"], "source_id": row["source_id"], "status": row["status"],
        "listing_complete": row["listing_complete"], "counters": counters,
        # How the files this sync queued ingested, from their runs (docs/decisions/0117).
        "ingest": {k: row[f"runs_{k}"] for k in INGEST},
        "reasons": row["reasons"], "issues": row["issues"], "error": row["error"],
        "timings": row["timings"], "initiated_by": row["initiated_by"], "runner": row["runner"],
        "started_at": row["started_at"], "heartbeat_at": row["heartbeat_at"],
        "finished_at": row["finished_at"],
    }


async def get(pool: db.AsyncPool, *, tenant_id: UUID, source_id: UUID,
              sync_id: UUID) -> dict[str, Any]:
    async with pool.connection() as conn:
        row = await (await conn.execute(Q["get_sync"], {
            "tenant_id": tenant_id, "source_id": source_id, "sync_id": sync_id})).fetchone()
        if row is None:
            raise errors.NotFound("No sync with that id exists for this source in your tenant.")
        runs = await (await conn.execute(Q["sync_runs"], {
            "tenant_id": tenant_id, "sync_id": sync_id, "limit": SYNC_RUNS_SHOWN})).fetchall()
    return row | {"runs": runs}


async def list_page(pool: db.AsyncPool, *, tenant_id: UUID, source_id: UUID, limit: int,
                    offset: int) -> list[dict[str, Any]]:
    await sources.get(pool, tenant_id=tenant_id, source_id=source_id)  # 404 for others' sources
    async with pool.connection() as conn:
        return await (await conn.execute(Q["list_syncs"], {
            "tenant_id": tenant_id, "source_id": source_id, "limit": limit,
            "offset": offset})).fetchall()


async def fail_stale(conn: db.AsyncConn, *, stale_s: float) -> list[dict[str, Any]]:
    """Crash guard: fail running syncs whose gateway stopped beating (inside its transaction)."""
    return await (await conn.execute(Q["fail_stale_syncs"], {"stale_s": stale_s})).fetchall()
