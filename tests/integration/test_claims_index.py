"""docs/operations.md ("Postgres down"): the worker's one content transaction checks that the
run is still `running`, so a run the crash guard failed meanwhile gets no version, even if its
worker comes back and finishes; real Postgres, the worker's own index stage."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest
from pgvector.psycopg import register_vector

from tests.support import ops, submit
from worker.pipeline import index
from worker.pipeline.chunk import Chunk


def _content(text: str) -> index.VersionContent:
    chunks = [Chunk(0, text, 5, 0, len(text), None)]
    return index.VersionContent(uuid.uuid4(), chunks, np.ones((1, 384), dtype=np.float32),
                                len(text), None, None, "sentence-transformers/all-MiniLM-L6-v2")


def _stats() -> dict:
    return {"stages": {"read_ms": 1}}


def _write(conn, job, text: str):
    # fence 0: the run's takeover_count as the worker claimed it (nobody took it over since)
    return index.write(conn, job.job, _content(text), _stats(), started=time.monotonic(),
                       fts_config="english", fence=0)


def test_a_run_failed_meanwhile_gets_no_version(conn, tenants, tmp_path):
    # Given a document with an active version, and a new run for it that a worker was running
    # when the crash guard failed it (the worker's heartbeat had gone stale)
    user = tenants.user()
    register_vector(conn)  # as the worker's pool does for its connections
    first = submit.submit(conn, None, tmp_path, user, b"# V1\n\nFirst.\n", source_uri="s3://b/k",
                          copies=0)
    ops.set_status(conn, first.run_id, "running")
    assert _write(conn, first, "First.")[0] == 1
    second = submit.submit(conn, None, tmp_path, user, b"# V2\n\nSecond.\n", source_uri="s3://b/k",
                           copies=0)
    ops.set_status(conn, second.run_id, "running")
    conn.execute("UPDATE ingestion_runs SET status = 'failed', error = 'crash guard' "
                 "WHERE run_id = %s", (second.run_id,))

    # When its worker, back again, writes the content
    with pytest.raises(index.RunNoLongerRunning):
        _write(conn, second, "Second.")

    # Then nothing of it landed: version 1 is still the active one, no chunk of the second
    # exists, and the run stays failed with the crash guard's reason
    versions = submit.versions(conn, first.doc_id)
    assert [(v["version_number"], v["is_active"]) for v in versions] == [(1, True)]
    texts = [r["text"] for r in conn.execute("SELECT text FROM chunks")]
    assert texts == ["First."]
    row = submit.run_row(conn, second.run_id)
    assert row["status"] == "failed" and row["error"] == "crash guard"
