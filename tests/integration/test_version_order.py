"""The newest submission of a document wins, whatever order its runs finish in (issue 24's
soak invariant "active documents equal the bucket's final listing"): an S3 key changed twice
queues two runs; if the older one finished last it replaced the newer content, and since the
newer bytes had "become a version", no later sync fetched them again. Real Postgres, the
worker's own index stage."""

from __future__ import annotations

import time
import uuid

import numpy as np
from pgvector.psycopg import register_vector

from tests.support import ops, submit
from worker.pipeline import index
from worker.pipeline.chunk import Chunk


def _write(conn, job: submit.Submitted, text: str) -> tuple[int, dict]:
    chunks = [Chunk(0, text, 5, 0, len(text), None)]
    content = index.VersionContent(uuid.uuid4(), chunks, np.ones((1, 384), dtype=np.float32),
                                   len(text), None, None, "sentence-transformers/all-MiniLM-L6-v2")
    return index.write(conn, job.job, content, {"stages": {"read_ms": 1}},
                       started=time.monotonic(), fts_config="english", fence=0)


def _active(conn, doc_id) -> list[str]:
    return [r["content_hash"] for r in conn.execute(
        "SELECT content_hash FROM document_versions WHERE doc_id = %s AND is_active", (doc_id,))]


def test_an_older_run_finishing_last_does_not_replace_the_newer_version(conn, tenants, tmp_path):
    # Given a key changed twice: a run for its bytes B, then one for its newer bytes C
    user = tenants.user()
    register_vector(conn)
    older = submit.submit(conn, None, tmp_path, user, b"# K\n\nB.\n", source_uri="s3://b/k.md",
                          copies=0)
    newer = submit.submit(conn, None, tmp_path, user, b"# K\n\nC.\n", source_uri="s3://b/k.md",
                          copies=0)
    assert older.doc_id == newer.doc_id
    ops.set_status(conn, older.run_id, "running")
    ops.set_status(conn, newer.run_id, "running")

    # When the newer run finishes first, and the older one after it
    _write(conn, newer, "C.")
    _, stats = _write(conn, older, "B.")

    # Then C is still what the document serves; the older run succeeded and says it was
    # superseded, and left no version (nothing of B is searchable)
    assert _active(conn, newer.doc_id) == [newer.job.content_hash]
    row = submit.run_row(conn, older.run_id)
    assert row["status"] == "succeeded" and row["stats"]["superseded"] is True
    assert stats["superseded"] is True
    assert [v["content_hash"] for v in submit.versions(conn, older.doc_id)] == [
        newer.job.content_hash]
    assert [r["text"] for r in conn.execute("SELECT text FROM chunks")] == ["C."]


def test_runs_finishing_in_order_each_become_the_active_version(conn, tenants, tmp_path):
    user = tenants.user()
    register_vector(conn)
    first = submit.submit(conn, None, tmp_path, user, b"# K\n\nB.\n", source_uri="s3://b/k.md",
                          copies=0)
    ops.set_status(conn, first.run_id, "running")
    _write(conn, first, "B.")
    second = submit.submit(conn, None, tmp_path, user, b"# K\n\nC.\n", source_uri="s3://b/k.md",
                           copies=0)
    ops.set_status(conn, second.run_id, "running")
    _, stats = _write(conn, second, "C.")
    assert _active(conn, first.doc_id) == [second.job.content_hash]
    assert "superseded" not in stats
    assert [v["is_active"] for v in submit.versions(conn, first.doc_id)] == [False, True]
