"""Stage index: write a version and its content, and finish the run — in ONE transaction.

Either everything lands (new active version, chunks, embeddings, FTS vectors, run succeeded)
or nothing does, so a crash or redelivery can never leave half a version or a duplicate.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import numpy as np
from pgvector import HalfVector
from psycopg.types.json import Jsonb

from shared import db, jobs
from worker import runs
from worker.pipeline.attachments import Stored
from worker.pipeline.chunk import Chunk

Q = db.load_queries(Path(__file__).parents[1] / "queries.sql")


class RunNoLongerRunning(Exception):
    """The run left `running` meanwhile (the crash guard failed it) or another worker took it
    over; the write was rolled back."""


@dataclass(frozen=True)
class VersionContent:
    doc_version_id: UUID
    chunks: Sequence[Chunk]
    vectors: np.ndarray
    char_count: int
    page_count: int | None
    artifact_uri: str | None
    embedding_model: str
    # How the vectors were computed from that model (embed.VARIANTS; ADR 0110).
    embedding_variant: str = "torch"
    # An e-mail's attachments, stored, to become its child documents (ADR 0250).
    attachments: Sequence[Stored] = ()


def write(conn: db.Conn, job: jobs.IngestJob, content: VersionContent,
          stats: dict[str, Any], *, started: float, fts_config: str,
          fence: int) -> tuple[int, dict[str, Any]]:
    """Commit the version and mark the run succeeded; return the version number and final stats
    (0 when a newer submission's version already exists: the run is superseded, nothing written).

    ``started`` is when the index stage began; its time is measured up to the run's update.
    ``fence`` is the run's takeover_count as of our claim: if another worker has taken the run
    over since, nothing is written (RunNoLongerRunning), so a run never gets two versions.
    """
    keys = {"tenant_id": job.tenant_id, "doc_id": job.doc_id}
    with conn.transaction():
        # An attachment's document: its message's version row first (ADR 0250's lock order).
        conn.execute(Q["lock_message_version"], keys)
        conn.execute(Q["lock_document"], {"key": runs.lock_key(job.doc_id)})
        newer = conn.execute(Q["newer_version_exists"], {**keys, "run_id": job.run_id}).fetchone()
        if newer is not None and newer["newer"]:
            return _superseded(conn, job, stats, started, fence)
        conn.execute(Q["deactivate_active_version"], keys)
        row = conn.execute(Q["insert_version"], {
            **keys, "doc_version_id": content.doc_version_id, "run_id": job.run_id,
            "content_hash": job.content_hash, "embedding_model": content.embedding_model,
            "embedding_variant": content.embedding_variant,
            "embedding_dim": int(content.vectors.shape[1]), "chunk_count": len(content.chunks),
            "char_count": content.char_count, "page_count": content.page_count,
            "artifact_uri": content.artifact_uri}).fetchone()
        assert row is not None
        chunk_ids = [uuid4() for _ in content.chunks]
        _copy_chunks(conn, job.tenant_id, content, chunk_ids)
        _copy_embeddings(conn, job.tenant_id, content, chunk_ids)
        conn.execute(Q["insert_fts"], {"tenant_id": job.tenant_id, "config": fts_config,
                                       "doc_version_id": content.doc_version_id})
        _insert_attachments(conn, job, content)
        stages = {**stats["stages"], "index_ms": round((time.monotonic() - started) * 1000)}
        final = {**stats, "stages": stages, "duration_ms": sum(stages.values())}
        done = conn.execute(Q["succeed_run"], {"run_id": job.run_id, "tenant_id": job.tenant_id,
                                               "stats": Jsonb(final), "fence": fence})
        if done.rowcount != 1:
            raise RunNoLongerRunning(f"run {job.run_id} is no longer running")
        return int(row["version_number"]), final


def _superseded(conn: db.Conn, job: jobs.IngestJob, stats: dict[str, Any], started: float,
                fence: int) -> tuple[int, dict[str, Any]]:
    """A run submitted later already made this document's version (found by the chaos soak,
    ADR 0242): the run succeeds without one, so its older bytes never replace the newer."""
    stages = {**stats["stages"], "index_ms": round((time.monotonic() - started) * 1000)}
    final = {**stats, "stages": stages, "duration_ms": sum(stages.values()), "superseded": True}
    done = conn.execute(Q["succeed_run"], {"run_id": job.run_id, "tenant_id": job.tenant_id,
                                           "stats": Jsonb(final), "fence": fence})
    if done.rowcount != 1:
        raise RunNoLongerRunning(f"run {job.run_id} is no longer running")
    return 0, final


def _copy_chunks(conn: db.Conn, tenant_id: UUID, content: VersionContent,
                 chunk_ids: list[UUID]) -> None:
    with conn.cursor().copy(
        "COPY chunks (chunk_id, tenant_id, doc_version_id, ordinal, text, token_count, "
        "char_start, char_end, page, heading_path, context) FROM STDIN"
    ) as copy:
        for chunk_id, c in zip(chunk_ids, content.chunks, strict=True):
            copy.write_row((chunk_id, tenant_id, content.doc_version_id, c.ordinal, c.text,
                            c.token_count, c.char_start, c.char_end, c.page,
                            list(c.heading_path), c.context))


def _copy_embeddings(conn: db.Conn, tenant_id: UUID, content: VersionContent,
                     chunk_ids: list[UUID]) -> None:
    # Binary COPY: pgvector's text form is ~30x slower to parse (measured here). The column is
    # halfvec (migration 0024, ADR 0156): the vectors are rounded to float16 here, once.
    halves = content.vectors.astype(np.float16)
    with conn.cursor().copy(
        "COPY chunk_embeddings (chunk_id, tenant_id, doc_version_id, embedding) "
        "FROM STDIN WITH (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["uuid", "uuid", "uuid", "halfvec"])
        for chunk_id, vector in zip(chunk_ids, halves, strict=True):
            copy.write_row((chunk_id, tenant_id, content.doc_version_id, HalfVector(vector)))


def _insert_attachments(conn: db.Conn, job: jobs.IngestJob, content: VersionContent) -> None:
    if not content.attachments:
        return
    with conn.cursor() as cursor:
        cursor.executemany(Q["insert_attachment"], [{
            "attachment_id": a.attachment_id, "tenant_id": job.tenant_id,
            "doc_version_id": content.doc_version_id, "doc_id": job.doc_id,
            "ordinal": a.ordinal, "filename": a.filename, "source_type": a.source_type,
            "size_bytes": a.size_bytes, "content_hash": a.content_hash,
            "upload_uri": a.upload_uri, "depth": a.depth, "subject": a.message_subject}
            for a in content.attachments])
