"""Stop serving the documents of S3 objects that are gone: deactivate, never delete (§14).

Versions are otherwise the worker's, but §14 gives the gateway this one write. The document
lock is the worker's own (see lock_documents in sources.sql), so a deactivation and a version
activation of one document never interleave.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from shared import db

Q = db.load_queries(Path(__file__).with_name("sources.sql"))
# Keys per statement and per transaction of a sync: bounded locks and parameter sizes.
BATCH = 500
# Which runs of a gone object are cancelled: a source's DELETE leaves running runs to the worker
# (ADR 0020), a sync ends them too (ADR 0241).
QUEUED, UNFINISHED = ["queued"], ["queued", "running"]


@dataclass(frozen=True)
class Deactivated:
    objects: int = 0
    documents: int = 0
    runs_cancelled: int = 0

    def __add__(self, other: Deactivated) -> Deactivated:
        return Deactivated(self.objects + other.objects, self.documents + other.documents,
                           self.runs_cancelled + other.runs_cancelled)


async def deactivate(conn: db.AsyncConn, *, tenant_id: UUID, source_id: UUID,
                     rows: list[dict[str, Any]], run_error: str) -> Deactivated:
    """Inside the caller's transaction: deactivate the rows' documents, cancel their queued
    runs and mark the objects deleted. ``rows`` are source_objects rows (key, doc_id)."""
    total = Deactivated()
    for start in range(0, len(rows), BATCH):
        total += await _batch(conn, tenant_id, source_id, rows[start:start + BATCH], run_error,
                              QUEUED)
    return total


async def deactivate_in_batches(pool: db.AsyncPool, *, tenant_id: UUID, source_id: UUID,
                                rows: list[dict[str, Any]], run_error: str) -> Deactivated:
    """Like ``deactivate``, one transaction per batch: a sync never holds thousands of locks.
    A sync's gone objects also end their *running* runs, so none of them brings its object
    back after the sync (ADR 0241).

    A batch that commits is final; if the gateway dies between batches, the next sync finds
    the rest still missing and finishes the job.
    """
    total = Deactivated()
    for start in range(0, len(rows), BATCH):
        async with pool.connection() as conn, conn.transaction():
            total += await _batch(conn, tenant_id, source_id, rows[start:start + BATCH],
                                  run_error, UNFINISHED)
    return total


async def _batch(conn: db.AsyncConn, tenant_id: UUID, source_id: UUID,
                 rows: list[dict[str, Any]], run_error: str,
                 statuses: list[str]) -> Deactivated:
    keys = {"tenant_id": tenant_id, "source_id": source_id}
    doc_ids = sorted({r["doc_id"] for r in rows if r["doc_id"] is not None})
    documents = cancelled = 0
    if doc_ids:
        await conn.execute(Q["lock_documents"], {"doc_ids": doc_ids})
        documents = len(await (await conn.execute(Q["deactivate_documents"], {
            **keys, "doc_ids": doc_ids})).fetchall())
        row = await (await conn.execute(Q["cancel_queued_runs"], {
            **keys, "doc_ids": doc_ids, "error": run_error, "statuses": statuses})).fetchone()
        cancelled = row["n"] if row else 0
    await conn.execute(Q["mark_objects_deleted"], {**keys, "keys": [r["key"] for r in rows]})
    return Deactivated(len(rows), documents, cancelled)
