"""Put a job on the queue the way the gateway does, for worker tests that need exact control
(duplicates, new versions of one document, hand-made bad files)."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

from shared import jobs

SOURCE_TYPES = {"pdf", "docx", "html", "txt", "md"}


@dataclass(frozen=True)
class Submitted:
    run_id: uuid.UUID
    doc_id: uuid.UUID
    upload_path: Path
    job: jobs.IngestJob

    @property
    def body(self) -> str:
        return jobs.encode(self.job)


def submit(conn: psycopg.Connection, queue, store_root: Path, user, data: bytes, *,
           name: str = "doc.md", source_uri: str | None = None, copies: int = 1) -> Submitted:
    """Store the bytes, create document + queued run, and send ``copies`` identical messages."""
    run_id = uuid.uuid4()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = store_root / str(user.tenant_id) / str(run_id) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    source_type = name.rsplit(".", 1)[-1]
    assert source_type in SOURCE_TYPES
    source_uri = source_uri or f"upload://{digest}"
    doc_id = conn.execute(
        "INSERT INTO documents (tenant_id, source_type, source_uri, title) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (tenant_id, source_uri) DO UPDATE SET title = EXCLUDED.title RETURNING doc_id",
        (user.tenant_id, source_type, source_uri, name)).fetchone()["doc_id"]
    conn.execute(
        "INSERT INTO ingestion_runs (run_id, tenant_id, doc_id, status, initiated_by, config) "
        "VALUES (%s, %s, %s, 'queued', %s, %s)",
        (run_id, user.tenant_id, doc_id, user.user_id,
         Jsonb({"upload_uri": path.as_uri(), "content_hash": digest, "original_filename": name})))
    job = jobs.IngestJob(
        run_id=run_id, doc_id=doc_id, tenant_id=user.tenant_id, upload_uri=path.as_uri(),
        title=name, source_type=source_type, source_uri=source_uri, original_filename=name,  # type: ignore[arg-type]
        content_hash=digest, embedding_model="sentence-transformers/all-MiniLM-L6-v2",
        embedding_dim=384, submitted_at=datetime.now(UTC))
    for _ in range(copies):
        queue.send(jobs.encode(job))
    return Submitted(run_id, doc_id, path, job)


def run_row(conn: psycopg.Connection, run_id: uuid.UUID) -> dict:
    return conn.execute("SELECT * FROM ingestion_runs WHERE run_id = %s", (run_id,)).fetchone()


def status(conn: psycopg.Connection, run_id: uuid.UUID) -> str:
    return run_row(conn, run_id)["status"]


def versions(conn: psycopg.Connection, doc_id: uuid.UUID) -> list[dict]:
    return conn.execute("SELECT * FROM document_versions WHERE doc_id = %s ORDER BY version_number",
                        (doc_id,)).fetchall()
