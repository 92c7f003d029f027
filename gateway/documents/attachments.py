"""E-mail attachments become child documents of their message (docs/decisions/0250).

The worker stores each readable attachment of an EML/MSG upload and records it in
message_attachments, in the message version's own transaction; it never creates documents.
Here the gateway does, in the outbox relay's pass: for each recorded attachment of a served
message version, one transaction creates the child document (``parent_doc_id`` = the message),
a queued run whose run_id is the attachment's id (its file lies in that run's folder of the
upload store) and the run's job in the outbox, which the same relay then publishes. Claims are
SKIP LOCKED and every insert is keyed, so replicas and repeats make each child exactly once.
Serving follows the message: migrations/0066's triggers take children down with their message
version and bring them back with it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from shared import db, jobs

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("attachments.sql"))
BATCH = 100


def source_uri(attachment_id: UUID) -> str:
    """A child document's identity: the attachment of one message version."""
    return f"attachment://{attachment_id}"


async def feed(pool: db.AsyncPool) -> bool:
    """The outbox relay's feeder: True when a full batch was made (there may be more)."""
    return await make_children(pool) == BATCH


async def make_children(pool: db.AsyncPool, *, limit: int = BATCH) -> int:
    """Create the documents, runs and jobs of up to ``limit`` pending attachments; return how
    many were made (a full batch means there may be more)."""
    async with pool.connection() as conn, conn.transaction():
        rows = await (await conn.execute(Q["claim_pending_attachments"],
                                         {"limit": limit})).fetchall()
        for row in rows:
            await _make_child(conn, row)
    for row in rows:
        # Ids only: an attachment's file name may name a person.
        log.info("attachment queued as a document", extra={
            "tenant_id": str(row["tenant_id"]), "run_id": str(row["attachment_id"]),
            "parent_doc_id": str(row["parent_doc_id"])})
    return len(rows)


async def _make_child(conn: db.AsyncConn, row: dict[str, Any]) -> None:
    keys = {"tenant_id": row["tenant_id"], "run_id": row["attachment_id"]}
    doc = await (await conn.execute(Q["insert_child_document"], {
        "tenant_id": row["tenant_id"], "source_type": row["source_type"],
        "source_uri": source_uri(row["attachment_id"]), "title": row["filename"],
        "source_id": row["source_id"], "parent_doc_id": row["parent_doc_id"]})).fetchone()
    assert doc is not None
    await conn.execute(Q["insert_child_run"], {
        **keys, "doc_id": doc["doc_id"], "initiated_by": row["initiated_by"],
        "config": Jsonb(_config(row))})
    await conn.execute(Q["insert_child_job"], {
        **keys, "payload": Jsonb(_job(row, doc["doc_id"]).model_dump(mode="json"))})
    await conn.execute(Q["mark_attachment_made"], {
        "tenant_id": row["tenant_id"], "attachment_id": row["attachment_id"],
        "child_doc_id": doc["doc_id"]})


def _config(row: dict[str, Any]) -> dict[str, object]:
    """The run's config, shaped like an upload's so the runs pages and cleanup read it alike."""
    return {
        "source_type": "attachment",
        "upload_uri": row["upload_uri"],
        "title": row["filename"],
        "original_filename": row["filename"],
        "file_size_bytes": row["size_bytes"],
        "content_hash": row["content_hash"],
        "created_by_user_id": str(row["initiated_by"]) if row["initiated_by"] else None,
        "parent_doc_id": str(row["parent_doc_id"]),
        "parent_run_id": str(row["parent_run_id"]) if row["parent_run_id"] else None,
        "attachment_ordinal": row["ordinal"],
    }


def _job(row: dict[str, Any], doc_id: UUID) -> jobs.IngestJob:
    return jobs.IngestJob(
        job_type="upload_ingest", run_id=row["attachment_id"], doc_id=doc_id,
        tenant_id=row["tenant_id"], upload_uri=row["upload_uri"], title=row["filename"],
        source_type=row["source_type"], source_uri=source_uri(row["attachment_id"]),
        original_filename=row["filename"], content_hash=row["content_hash"],
        embedding_model=row["embedding_model"], embedding_dim=row["embedding_dim"],
        submitted_at=datetime.now(UTC), attachment_depth=row["depth"])


async def family(conn: db.AsyncConn, *, tenant_id: UUID, doc_id: UUID) -> dict[str, Any]:
    """The message a document came from (or None) and the documents its attachments became."""
    rows = await (await conn.execute(Q["document_family"], {
        "tenant_id": tenant_id, "doc_id": doc_id})).fetchall()
    parent = next(({"doc_id": r["doc_id"], "title": r["title"], "subject": r["message_subject"]}
                   for r in rows if r["relation"] == "parent"), None)
    children = [{"doc_id": r["doc_id"], "title": r["title"], "source_type": r["source_type"]}
                for r in rows if r["relation"] == "attachment"]
    return {"parent": parent, "attachments": children}
