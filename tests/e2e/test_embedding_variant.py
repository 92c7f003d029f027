"""A worker running EMBEDDING_VARIANT=onnx-int8 (docs/decisions/0110-0112): it serves jobs for the
same model as a torch worker, records its variant on each version, and its vectors sit where the
torch variant's would (same space)."""

from __future__ import annotations

import numpy as np
import pytest
from pgvector.psycopg import register_vector

from shared.embedding import model as embed
from tests.support import documents, stack, submit

pytestmark = pytest.mark.slow


def test_an_int8_worker_records_its_variant_and_writes_vectors_in_the_same_space(
        conn, queues, store_root, tenants, stack_env, out_dir, tmp_path):
    # Given a document ingested by a torch worker, and one queued next; jobs name only the model
    user = tenants.user()
    cache = tmp_path / "models"
    old = submit.submit(conn, queues.queue, store_root, user, documents.make_markdown(3))
    torch_worker = stack.start_worker({**stack_env, "EMBEDDING_VARIANT": "torch"}, out_dir,
                                      once=True)
    assert torch_worker.proc.wait(300) == 0, torch_worker.logs()[-3000:]
    job = submit.submit(conn, queues.queue, store_root, user, documents.make_markdown(6))

    # When an onnx-int8 worker, with its own model cache, processes it
    env = {**stack_env, "EMBEDDING_VARIANT": "onnx-int8", "EMBEDDING_CACHE_DIR": str(cache)}
    worker = stack.start_worker(env, out_dir, once=True)
    assert worker.proc.wait(400) == 0, worker.logs()[-3000:]

    # Then the run succeeded, the version says which variant made its vectors, the export was
    # cached where configured, and the vectors agree with the torch variant's for those chunks
    assert submit.status(conn, job.run_id) == "succeeded", submit.run_row(conn, job.run_id)
    version = conn.execute("SELECT * FROM document_versions WHERE run_id = %s",
                           (job.run_id,)).fetchone()
    assert (version["embedding_model"], version["embedding_variant"]) == (
        "sentence-transformers/all-MiniLM-L6-v2", "onnx-int8")
    assert submit.status(conn, old.run_id) == "succeeded"
    assert conn.execute("SELECT embedding_variant FROM document_versions WHERE run_id = %s",
                        (old.run_id,)).fetchone()["embedding_variant"] == "torch"
    assert len(list(cache.glob("*.onnx"))) == 1
    assert '"variant":"onnx-int8"' in worker.logs().replace(" ", "")
    register_vector(conn)
    rows = conn.execute(
        # What the model read: the chunk's contextual header, then its text (ADR 0221).
        "SELECT CASE WHEN c.context = '' THEN c.text ELSE c.context || E'\n\n' || c.text END "
        "AS text, e.embedding FROM chunks c JOIN chunk_embeddings e USING (chunk_id) "
        "WHERE c.doc_version_id = %s ORDER BY c.ordinal", (version["doc_version_id"],)).fetchall()
    stored = np.array([row["embedding"].to_numpy() for row in rows], dtype=np.float32)
    torch_vectors = embed.load_embedder(variant="torch").encode([row["text"] for row in rows])
    cosines = np.sum(stored * torch_vectors, axis=1)
    assert len(rows) == version["chunk_count"] > 3
    assert cosines.mean() >= 0.99, cosines


def test_versions_written_before_the_variant_column_read_as_torch(conn, tenants, tmp_path):
    # A row inserted without the column, as every version before migration 0012 was
    user = tenants.user()
    job = submit.submit(conn, None, tmp_path, user, b"# Old\n\nWritten before.\n", copies=0)
    conn.execute(
        "INSERT INTO document_versions (tenant_id, doc_id, run_id, version_number, content_hash,"
        " is_active, embedding_model, embedding_dim) VALUES (%s, %s, %s, 1, 'h', true, 'm', 384)",
        (user.tenant_id, job.job.doc_id, job.run_id))

    row = conn.execute("SELECT embedding_variant FROM document_versions WHERE run_id = %s",
                       (job.run_id,)).fetchone()
    assert row["embedding_variant"] == "torch"
    with pytest.raises(Exception, match="document_versions_embedding_variant_known"):
        conn.execute("UPDATE document_versions SET embedding_variant = 'fp8' WHERE run_id = %s",
                     (job.run_id,))


def test_a_cuda_worker_without_cuda_refuses_to_start(stack_env, out_dir):
    # CI's torch is the CPU build: asking for the GPU must stop the worker with the reason,
    # not fail every job later.
    worker = stack.start_worker({**stack_env, "EMBEDDING_VARIANT": "torch", "EMBEDDING_DEVICE": "cuda"},
                                out_dir, once=True)

    assert worker.proc.wait(120) != 0
    assert "EMBEDDING_DEVICE=cuda but this torch" in worker.logs()
