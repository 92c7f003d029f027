"""One sync of an S3 source: list, diff, fetch what changed, queue runs, deactivate what is gone.

Change detection has two stages. Listing metadata (ETag, size, last-modified) only decides
whether to download: multipart ETags are not content hashes, and a copy or re-upload changes
them without changing the bytes. The SHA-256 of the downloaded bytes decides whether a new
version is needed: intake (gateway/documents/intake.py, shared with uploads) skips bytes that the active
version or an in-flight run already has. Deactivation happens only after a complete listing,
so a listing cut short never takes anything away. Failures of single objects are counted with
their reason and the sync goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import posixpath
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from botocore.exceptions import ClientError
from psycopg.types.json import Jsonb

from gateway import filenames, filetypes
from gateway.documents import intake
from gateway.sources import deactivation, s3objects
from gateway.sources.definitions import Source
from shared import db, errors, objectstore

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("sources.sql"))
# Objects whose key and reason the sync record keeps; the counters cover all of them.
MAX_ISSUES = 100
GONE_REASON = "Cancelled: the object was deleted from the bucket before this run finished."
STILL_FAILED = ("its last ingest failed and it has not changed since; fix the object, or retry "
                "its run")


@dataclass
class Tally:
    """What a sync has done so far; the heartbeat publishes it, the end writes it."""

    listed: int = 0
    excluded: int = 0
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    deleted: int = 0
    skipped: int = 0
    failed: int = 0
    still_failed: int = 0
    bytes: int = 0
    reasons: dict[str, Counter[str]] = field(
        default_factory=lambda: {"skipped": Counter(), "failed": Counter()})
    issues: list[dict[str, str]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=lambda: {
        "list_s": 0.0, "db_s": 0.0, "fetch_s": 0.0})
    started: float = field(default_factory=time.monotonic)

    def skip(self, key: str, reason: str) -> None:
        self.skipped += 1
        self._note("skipped", key, reason, reason)

    def fail(self, key: str, reason: str, detail: str) -> None:
        """``reason`` is counted (few distinct values); ``detail`` is kept with the key."""
        self.failed += 1
        self._note("failed", key, reason, detail)

    def still_failing(self, key: str, run_id: UUID) -> None:
        """An unchanged object whose last ingest failed: listed, not fetched again (0117)."""
        self.still_failed += 1
        self.reasons.setdefault("still_failed", Counter())[STILL_FAILED] += 1
        if len(self.issues) < MAX_ISSUES:
            self.issues.append({"key": key, "outcome": "still_failed", "reason": STILL_FAILED,
                                "run_id": str(run_id)})

    def _note(self, outcome: str, key: str, reason: str, detail: str) -> None:
        self.reasons[outcome][reason] += 1
        if len(self.issues) < MAX_ISSUES:
            self.issues.append({"key": key, "outcome": outcome, "reason": detail})

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] += time.perf_counter() - start

    def params(self) -> dict[str, Any]:
        """The counters as the sync queries take them."""
        timings = {k: round(v, 4) for k, v in self.timings.items()}
        timings["wall_s"] = round(time.monotonic() - self.started, 4)
        return {
            "listed": self.listed, "excluded": self.excluded, "new": self.new,
            "changed": self.changed, "unchanged": self.unchanged, "deleted": self.deleted,
            "skipped": self.skipped, "failed": self.failed, "still_failed": self.still_failed,
            "bytes": self.bytes,
            "reasons": Jsonb({k: dict(v) for k, v in self.reasons.items()}),
            "issues": Jsonb(list(self.issues)), "timings": Jsonb(timings),
        }


@dataclass(frozen=True)
class Limits:
    max_bytes: int
    allowed: tuple[str, ...]
    page_size: int
    concurrency: int
    embedding_model: str
    embedding_dim: int


@dataclass(frozen=True)
class Result:
    listing_complete: bool
    error: str | None = None


@dataclass(frozen=True)
class _Todo:
    obj: s3objects.Listed
    source_type: str
    known: dict[str, Any] | None


class Sync:
    """One pass over a source. ``executor`` bounds downloads across the gateway's syncs."""

    def __init__(self, *, pool: db.AsyncPool, source: Source, sync_id: UUID,
                 initiated_by: UUID | None, s3: Any, store: objectstore.Store, upload_s3: Any,
                 executor: Executor, limits: Limits, tally: Tally,
                 on_queued: Callable[[], None]) -> None:
        self.pool, self.source, self.sync_id = pool, source, sync_id
        self.initiated_by = initiated_by
        self.s3, self.store, self.upload_s3 = s3, store, upload_s3
        self.executor, self.limits, self.tally = executor, limits, tally
        self.on_queued = on_queued
        self.keys = {"tenant_id": source.tenant_id, "source_id": source.source_id}
        # Separate slots for downloads and for intake transactions: a download slot is free
        # again while its object's run is being committed, so S3 and Postgres work overlap.
        # Both bounds keep a page of 1,000 objects from holding 1,000 files or connections.
        self._fetch_slots = asyncio.Semaphore(limits.concurrency)
        self._submit_slots = asyncio.Semaphore(limits.concurrency)

    async def run(self) -> Result:
        result = await self._walk()
        if result.listing_complete:
            await self._deactivate_missing()
        return result

    # ── listing ─────────────────────────────────────────────────────────────────────────────
    async def _walk(self) -> Result:
        # The next page is listed while this one is diffed, so a no-change sync costs about
        # its listing time.
        pending = asyncio.ensure_future(self._list(None))
        try:
            while True:
                try:
                    page = await pending
                except Exception as exc:  # noqa: BLE001 - any listing failure ends the listing
                    return Result(False, self._listing_error(exc))
                if page.next_token:
                    pending = asyncio.ensure_future(self._list(page.next_token))
                await self._page(page.objects)
                if not page.next_token:
                    return Result(True)
        finally:
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending

    async def _list(self, token: str | None) -> s3objects.Page:
        def timed_list() -> s3objects.Page:
            with self.tally.timed("list_s"):
                return s3objects.list_page(self.s3, bucket=self.source.bucket,
                                           prefix=self.source.prefix, token=token,
                                           page_size=self.limits.page_size)
        return await asyncio.to_thread(timed_list)

    def _listing_error(self, exc: Exception) -> str:
        log.warning("sync listing failed", extra={"sync_id": str(self.sync_id),
                                                  "source_id": str(self.source.source_id),
                                                  "error": describe(exc)})
        return (f"The listing stopped after {self.tally.listed} objects ({describe(exc)}), so "
                "no document was deactivated; fix the cause and sync again.")

    # ── one page ────────────────────────────────────────────────────────────────────────────
    async def _page(self, objects: list[s3objects.Listed]) -> None:
        candidates = []
        for obj in objects:
            if obj.key.endswith("/"):
                continue  # a folder marker, not a file
            self.tally.listed += 1
            if self.source.matches(obj.key):
                candidates.append(obj)
            else:
                self.tally.excluded += 1
        if not candidates:
            return
        known = await self._touch([o.key for o in candidates])
        todo = [t for t in (self._triage(o, known.get(o.key)) for o in candidates) if t]
        # A TaskGroup: if one object hits an error that ends the sync (the database is gone),
        # the others are cancelled rather than left running behind a finished sync.
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(self._ingest(t)) for t in todo]
        await self._record([r for r in (t.result() for t in tasks) if r is not None])

    async def _touch(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        with self.tally.timed("db_s"):
            async with self.pool.connection() as conn:
                rows = await (await conn.execute(Q["touch_known_objects"], {
                    **self.keys, "sync_id": self.sync_id, "keys": keys})).fetchall()
        return {r["key"]: r for r in rows}

    def _triage(self, obj: s3objects.Listed, known: dict[str, Any] | None) -> _Todo | None:
        """Decide without downloading: skip, unchanged, or fetch."""
        name = posixpath.basename(obj.key)
        try:
            source_type = filetypes.source_type_for(name, self.limits.allowed)
        except errors.UnsupportedType:
            ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
            self.tally.skip(obj.key, f"unsupported file type '.{ext}'" if ext else
                            "unsupported file type (no extension)")
            return None
        reason = self._refusal(obj)
        if reason:
            self.tally.skip(obj.key, reason)
            return None
        if known and _same_listing(known, obj) and known["status"] == "active":
            if known["settled"]:
                self.tally.unchanged += 1
                return None
            if known["failed_run_id"] is not None:
                # The same bytes failed before: fetching them again fails again, and would
                # count the object as changed at every sync (docs/decisions/0117).
                self.tally.still_failing(obj.key, known["failed_run_id"])
                return None
        return _Todo(obj, source_type, known)

    def _refusal(self, obj: s3objects.Listed) -> str | None:
        if obj.storage_class in s3objects.ARCHIVED:
            return f"archived in {obj.storage_class}; restore it to sync it"
        if obj.size == 0:
            return "empty object"
        if obj.size > self.limits.max_bytes:
            return self._too_large()
        return None

    def _too_large(self) -> str:
        return f"larger than the {self.limits.max_bytes / (1024 * 1024):.3g} MB upload limit"

    # ── one object ──────────────────────────────────────────────────────────────────────────
    async def _ingest(self, todo: _Todo) -> dict[str, Any] | None:
        """Fetch, hash and submit one object; return its source_objects record, or None."""
        run_id = uuid.uuid4()
        async with self._fetch_slots:
            fetched = await self._fetch(todo, run_id)
        if fetched is None:
            return None
        async with self._submit_slots:
            outcome = await self._submit(todo, run_id, fetched)
        if outcome is None:
            return None
        self._count(todo, outcome)
        return {"key": todo.obj.key, "etag": todo.obj.etag, "size_bytes": todo.obj.size,
                "last_modified": todo.obj.last_modified, "content_hash": fetched.content_hash,
                "doc_id": outcome.doc_id}

    async def _fetch(self, todo: _Todo, run_id: UUID) -> s3objects.Fetched | None:
        key = todo.obj.key
        store_key = (f"{self.source.tenant_id}/{run_id}/"
                     f"{filenames.safe_filename(posixpath.basename(key))}")

        def timed_fetch() -> s3objects.Fetched:
            with self.tally.timed("fetch_s"):
                return s3objects.fetch(self.s3, bucket=self.source.bucket, key=key,
                                       store=self.store, store_key=store_key,
                                       max_bytes=self.limits.max_bytes,
                                       source_type=todo.source_type)
        try:
            fetched = await asyncio.get_running_loop().run_in_executor(self.executor, timed_fetch)
        except errors.FileTooLarge:
            self.tally.skip(key, self._too_large())
            return None
        except errors.EmptyFile:
            self.tally.skip(key, "empty object")
            return None
        except errors.UnsupportedType:
            self.tally.skip(key, f"content is not {todo.source_type.upper()} although the name "
                                 f"ends in .{todo.source_type}")
            return None
        except ClientError as exc:
            if _code(exc) in ("NoSuchKey", "404"):
                # Gone between listing and download; the next sync deactivates it.
                self.tally.skip(key, "deleted during the sync")
            else:
                self._failed(key, exc)
            return None
        except Exception as exc:  # noqa: BLE001 - one object never fails the sync
            self._failed(key, exc)
            return None
        self.tally.bytes += fetched.size
        return fetched

    async def _submit(self, todo: _Todo, run_id: UUID,
                      fetched: s3objects.Fetched) -> intake.Outcome | None:
        name = posixpath.basename(todo.obj.key)
        sub = intake.Submission(
            tenant_id=self.source.tenant_id, run_id=run_id, initiated_by=self.initiated_by,
            source_uri=self.source.uri(todo.obj.key), source_type=todo.source_type, title=name,
            original_filename=name, content_type=filetypes.CONTENT_TYPES[todo.source_type],
            size_bytes=fetched.size, content_hash=fetched.content_hash,
            upload_uri=fetched.upload_uri, embedding_model=self.limits.embedding_model,
            embedding_dim=self.limits.embedding_dim, run_type="s3_sync",
            source_id=self.source.source_id)
        try:
            with self.tally.timed("db_s"):
                outcome = await intake.submit(self.pool, sub)
        except errors.ServiceUnavailable:
            await self._discard(fetched)
            raise  # the database is gone: the sync cannot go on, and says so
        except Exception as exc:  # noqa: BLE001 - one object never fails the sync
            await self._discard(fetched)
            self._failed(todo.obj.key, exc, what="could not queue")
            return None
        if outcome.status == "skipped":
            # The same bytes are served or on their way: nothing to do, keep no copy.
            await self._discard(fetched)
        else:
            self.on_queued()
        return outcome

    def _count(self, todo: _Todo, outcome: intake.Outcome) -> None:
        if outcome.status == "skipped":
            self.tally.unchanged += 1
        elif todo.known is None or todo.known["status"] == "deleted":
            self.tally.new += 1
        else:
            self.tally.changed += 1

    async def _discard(self, fetched: s3objects.Fetched) -> None:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(objectstore.delete, fetched.upload_uri, self.upload_s3)

    def _failed(self, key: str, exc: BaseException, what: str = "download failed") -> None:
        detail = f"{what}: {describe(exc)}"
        log.warning("sync object failed", extra={"sync_id": str(self.sync_id), "key": key,
                                                  "reason": detail})
        self.tally.fail(key, f"{what}: {_kind(exc)}", detail)

    async def _record(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        params = [{**self.keys, **r, "sync_id": self.sync_id} for r in records]
        with self.tally.timed("db_s"):
            async with self.pool.connection() as conn, conn.cursor() as cur:
                await cur.executemany(Q["upsert_object"], params)

    # ── deletions ───────────────────────────────────────────────────────────────────────────
    async def _deactivate_missing(self) -> None:
        with self.tally.timed("db_s"):
            async with self.pool.connection() as conn:
                rows = await (await conn.execute(Q["missing_objects"], {
                    **self.keys, "sync_id": self.sync_id})).fetchall()
            if not rows:
                return
            done = await deactivation.deactivate_in_batches(
                self.pool, tenant_id=self.source.tenant_id, source_id=self.source.source_id,
                rows=rows, run_error=GONE_REASON)
        self.tally.deleted += done.objects
        log.info("sync deactivated gone objects", extra={
            "sync_id": str(self.sync_id), "objects": done.objects, "documents": done.documents,
            "runs_cancelled": done.runs_cancelled})


def _same_listing(known: dict[str, Any], obj: s3objects.Listed) -> bool:
    return (known["etag"] == obj.etag and known["size_bytes"] == obj.size
            and known["last_modified"] == obj.last_modified)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _kind(exc: BaseException) -> str:
    """A failure's class, for counting: an S3 error code or the exception type."""
    return (_code(exc) or "ClientError") if isinstance(exc, ClientError) else type(exc).__name__


def describe(exc: BaseException) -> str:
    """A short reason for people: the S3 error code and message, or the exception's text.

    botocore's messages name endpoints and keys, never credentials; the log filter redacts
    anything that looks like one all the same.
    """
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return describe(exc.exceptions[0])
    if isinstance(exc, ClientError):
        message = exc.response.get("Error", {}).get("Message", "")
        return f"{_code(exc) or 'ClientError'}: {message}"[:300].rstrip(": ")
    if isinstance(exc, errors.AppError):
        return exc.detail.rstrip(".")
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__
