"""Turn a stored file into a document, a queued run and its job — or decide it needs no work.

One transaction (gateway-worker-ingestion.md §4.1 steps 3–6): get-or-create the document by
identity (or, for an upload that names a ``doc_id``, take that document of the tenant), compare
with its active version, write the run and its job to the outbox. The job reaches SQS through
the outbox relay after commit, so an accepted upload is never lost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal
from uuid import UUID

from psycopg.types.json import Jsonb

from shared import db, errors, jobs

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).parents[1] / "queries.sql")


@dataclass(frozen=True)
class Submission:
    tenant_id: UUID
    run_id: UUID
    initiated_by: UUID | None
    source_uri: str
    source_type: str
    title: str
    original_filename: str
    content_type: str
    size_bytes: int
    content_hash: str
    upload_uri: str
    embedding_model: str
    embedding_dim: int
    run_type: Literal["manual_upload", "s3_sync"] = "manual_upload"
    source_id: UUID | None = None
    # An upload that is a new version of this document of the tenant (docs/decisions/0045).
    doc_id: UUID | None = None
    # For a new version: whether ``title`` was given and replaces the document's title.
    replace_title: bool = True


@dataclass(frozen=True)
class Outcome:
    status: Literal["queued", "skipped"]
    doc_id: UUID
    # new: first time this identity is seen; reprocess: known but without active content;
    # new_version: known with other content; skipped / in_progress: nothing to do.
    dedup_result: Literal["new", "reprocess", "new_version", "skipped", "in_progress"]
    run_id: UUID | None = None
    reason: str | None = None


def upload_source_uri(content_hash: str) -> str:
    """Uploads are content-addressed: the same bytes are the same document (§4.1 step 3)."""
    return f"upload://{content_hash}"


def versioned_upload_uri(doc_id: UUID) -> str:
    """The identity of an upload document once it was given a new version by id (ADR 0045):
    no longer its first bytes, which a later upload of those bytes must not find."""
    return f"upload://doc:{doc_id}"


async def submit(pool: db.AsyncPool, sub: Submission) -> Outcome:
    with db.translate():
        async with pool.connection() as conn:
            try:
                return await _submit(conn, sub)
            except _Skip as skip:
                return skip.outcome


async def _submit(conn: db.AsyncConn, sub: Submission) -> Outcome:
    keys = {"tenant_id": sub.tenant_id}
    async with conn.transaction():
        if sub.doc_id is None:
            doc_id, is_new = await _document_by_identity(conn, sub)
        else:
            doc_id, sub = await _document_by_id(conn, sub, sub.doc_id)
            is_new = False
        result = "new" if is_new else await _compare(conn, sub, doc_id)
        await conn.execute(Q["insert_run"], {
            **keys, "run_id": sub.run_id, "doc_id": doc_id, "run_type": sub.run_type,
            "source_id": sub.source_id, "initiated_by": sub.initiated_by,
            "config": Jsonb(_config(sub))})
        await conn.execute(Q["insert_outbox"], {
            **keys, "run_id": sub.run_id, "payload": Jsonb(_job(sub, doc_id).model_dump(mode="json"))})
    return Outcome("queued", doc_id, result, run_id=sub.run_id)  # type: ignore[arg-type]


async def _document_by_identity(conn: db.AsyncConn, sub: Submission) -> tuple[UUID, bool]:
    doc = await (await conn.execute(Q["upsert_document"], {
        "tenant_id": sub.tenant_id, "source_type": sub.source_type, "source_uri": sub.source_uri,
        "title": sub.title, "source_id": sub.source_id})).fetchone()
    assert doc is not None
    return doc["doc_id"], bool(doc["is_new"])


async def _document_by_id(conn: db.AsyncConn, sub: Submission,
                          doc_id: UUID) -> tuple[UUID, Submission]:
    """Lock the tenant's upload document ``doc_id`` and make it this upload's document.

    Returns the submission as the run and job must carry it: the document's identity and title.
    """
    keys = {"tenant_id": sub.tenant_id, "doc_id": doc_id}
    # The row lock also queues a concurrent upload of the document's first bytes behind us.
    doc = await (await conn.execute(Q["lock_document_for_upload"], keys)).fetchone()
    if doc is None:
        raise errors.DocumentNotFound()
    if doc["source_uri"].startswith("attachment://"):  # docs/decisions/0250
        raise errors.VersionedByMessage()
    if not doc["source_uri"].startswith("upload://"):
        raise errors.VersionedBySync()
    title = sub.title if sub.replace_title else doc["title"]
    await conn.execute(Q["set_upload_identity"], {
        **keys, "source_uri": versioned_upload_uri(doc_id), "source_type": sub.source_type,
        "title": title})
    return doc_id, replace(sub, source_uri=versioned_upload_uri(doc_id), title=title)


async def _compare(conn: db.AsyncConn, sub: Submission, doc_id: UUID) -> str:
    """A known document: skip what is already its content or already on its way there."""
    keys = {"tenant_id": sub.tenant_id, "doc_id": doc_id}
    active = await (await conn.execute(Q["active_version_hash"], keys)).fetchone()
    if active and active["content_hash"] == sub.content_hash:
        raise _Skip(Outcome("skipped", doc_id, "skipped", reason="already ingested, no changes"))
    inflight = await (await conn.execute(Q["inflight_run_for_hash"], {
        **keys, "content_hash": sub.content_hash})).fetchone()
    if inflight:
        raise _Skip(Outcome("skipped", doc_id, "in_progress", run_id=inflight["run_id"],
                            reason="already being ingested by another run"))
    return "new_version" if active else "reprocess"


class _Skip(Exception):
    """Raised inside the transaction so that a skip rolls back and leaves no trace."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


def _config(sub: Submission) -> dict[str, object]:
    return {
        "source_type": "upload" if sub.run_type == "manual_upload" else "s3",
        "upload_uri": sub.upload_uri,
        "title": sub.title,
        "original_filename": sub.original_filename,
        "content_type": sub.content_type,
        "file_size_bytes": sub.size_bytes,
        "content_hash": sub.content_hash,
        "created_by_user_id": str(sub.initiated_by) if sub.initiated_by else None,
    }


def _job(sub: Submission, doc_id: UUID) -> jobs.IngestJob:
    return jobs.IngestJob(
        job_type="upload_ingest" if sub.run_type == "manual_upload" else "s3_sync_ingest",
        run_id=sub.run_id, doc_id=doc_id, tenant_id=sub.tenant_id, upload_uri=sub.upload_uri,
        title=sub.title, source_type=sub.source_type,  # type: ignore[arg-type]
        source_uri=sub.source_uri, original_filename=sub.original_filename,
        content_hash=sub.content_hash, embedding_model=sub.embedding_model,
        embedding_dim=sub.embedding_dim, submitted_at=datetime.now(UTC))
