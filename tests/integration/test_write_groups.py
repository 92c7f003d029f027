"""Small documents written together (docs/decisions/0233): the documents ready at once share one
transaction, each in a savepoint of its own, so each still gets its own version and run outcome,
and one whose write fails (here: its run was taken over meanwhile) fails alone. Real Postgres,
the worker's own index stage."""

from __future__ import annotations

import threading
import time
import uuid

import numpy as np
import pytest
from pgvector.psycopg import register_vector

from shared import db
from tests.support import ops, submit
from worker import runs
from worker.pipeline import index, writes
from worker.pipeline.chunk import Chunk


def _content(text: str) -> index.VersionContent:
    chunks = [Chunk(0, text, 5, 0, len(text), None), Chunk(1, text + " again", 6, 0, 3, None)]
    vectors = np.random.default_rng(len(text)).standard_normal((2, 384)).astype(np.float32)
    return index.VersionContent(uuid.uuid4(), chunks, vectors, len(text), None, None,
                                "sentence-transformers/all-MiniLM-L6-v2", "onnx-int8")


@pytest.fixture
def pool(database_url):
    pool = db.sync_pool(database_url, max_size=2, configure=register_vector)
    pool.open(wait=True)
    yield pool
    pool.close()


def test_documents_ready_together_commit_together_and_fail_alone(conn, pool, tenants, tmp_path):
    # Given five running runs of five documents; the fourth was taken over by another worker
    user = tenants.user()
    jobs = [submit.submit(conn, None, tmp_path, user, f"# D{k}\n\nText {k}.\n".encode(),
                          copies=0) for k in range(5)]
    for job in jobs:
        ops.set_status(conn, job.run_id, "running")
    conn.execute("UPDATE ingestion_runs SET takeover_count = 1 WHERE run_id = %s",
                 (jobs[3].run_id,))
    # and the first document's lock held elsewhere, so the first write waits while the others
    # arrive (the writer takes whatever is waiting, so they form the second group)
    with db.connect(conn.info.dsn, autocommit=True) as blocker:
        blocker.execute("SELECT pg_advisory_lock(%s)", (runs.lock_key(jobs[0].doc_id),))
        writer = writes.GroupWriter(pool, fts_config="english")
        outcomes: dict[int, object] = {}

        def write(k: int) -> None:
            try:
                outcomes[k] = writer.write(jobs[k].job, _content(f"Text {k}."),
                                           {"stages": {"read_ms": 1}}, started=time.monotonic(),
                                           fence=0)
            except Exception as exc:  # noqa: BLE001 - the test reads it
                outcomes[k] = exc

        # When the five documents are written, the first alone, then the other four
        threads = [threading.Thread(target=write, args=(0,))]
        threads[0].start()
        ops_wait(lambda: writer._pending == [] and writer._thread is not None)
        threads += [threading.Thread(target=write, args=(k,)) for k in range(1, 5)]
        for t in threads[1:]:
            t.start()
        ops_wait(lambda: len(writer._pending) == 4)
        blocker.execute("SELECT pg_advisory_unlock_all()")
        for t in threads:
            t.join(30)

    # Then two transactions wrote them; the taken-over run got no version and stays running,
    # every other document has its own version 1, its chunks, and a succeeded run
    assert writer.groups == 2
    assert isinstance(outcomes[3], index.RunNoLongerRunning)
    for k in (0, 1, 2, 4):
        assert outcomes[k][0] == 1, outcomes[k]
        assert submit.status(conn, jobs[k].run_id) == "succeeded"
        (version,) = submit.versions(conn, jobs[k].doc_id)
        assert version["is_active"] and version["chunk_count"] == 2
    assert submit.status(conn, jobs[3].run_id) == "running"
    assert submit.versions(conn, jobs[3].doc_id) == []
    counts = conn.execute("SELECT (SELECT count(*) FROM chunks) AS chunks, "
                          "(SELECT count(*) FROM chunk_embeddings) AS vectors, "
                          "(SELECT count(*) FROM chunk_fts) AS fts").fetchone()
    assert counts == {"chunks": 8, "vectors": 8, "fts": 8}


def test_two_runs_of_one_document_in_one_group_number_their_versions(conn, pool, tenants,
                                                                      tmp_path):
    # Given two runs of the same document (same source), both running
    user = tenants.user()
    first = submit.submit(conn, None, tmp_path, user, b"# A\n\nOne.\n", source_uri="s3://b/k",
                          copies=0)
    second = submit.submit(conn, None, tmp_path, user, b"# A\n\nTwo.\n", source_uri="s3://b/k",
                           copies=0)
    for job in (first, second):
        ops.set_status(conn, job.run_id, "running")
    writer = writes.GroupWriter(pool, fts_config="english")
    items = [writes._Write(job.job, _content(text), {"stages": {}}, time.monotonic(), 0)
             for job, text in ((first, "One."), (second, "Two."))]

    # When both are written in one group
    writer._write_group(items)

    # Then each has its own version, the later one active
    assert [i.result[0] for i in items] == [1, 2]
    versions = submit.versions(conn, first.doc_id)
    assert [(v["version_number"], v["is_active"]) for v in versions] == [(1, False), (2, True)]


def ops_wait(predicate, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_submitted_document_whose_lease_is_lost_before_it_is_taken_is_not_written(
        conn, pool, tenants, tmp_path):
    # Given two running runs submitted to the writer while it waits on the first's lock, the
    # second's job stopping (its lease lost) before the writer takes it (ADR 0301)
    user = tenants.user()
    jobs = [submit.submit(conn, None, tmp_path, user, f"# L{k}\n\nText {k}.\n".encode(),
                          copies=0) for k in range(2)]
    for job in jobs:
        ops.set_status(conn, job.run_id, "running")

    def lost() -> None:
        raise runs.LeaseLost("the run was taken over")

    with db.connect(conn.info.dsn, autocommit=True) as blocker:
        blocker.execute("SELECT pg_advisory_lock(%s)", (runs.lock_key(jobs[0].doc_id),))
        writer = writes.GroupWriter(pool, fts_config="english")
        first = writer.submit(jobs[0].job, _content("Text 0."), {"stages": {}},
                              started=time.monotonic(), fence=0)
        ops_wait(lambda: writer._pending == [] and writer._thread is not None)
        second = writer.submit(jobs[1].job, _content("Text 1."), {"stages": {}},
                               started=time.monotonic(), fence=0, check=lost)
        blocker.execute("SELECT pg_advisory_unlock_all()")
        # When the writer comes to it: Then its future says why, and nothing of it is written
        with pytest.raises(runs.LeaseLost):
            second.result(30)
    assert first.result(30)[0] == 1
    assert submit.versions(conn, jobs[1].doc_id) == []
    assert submit.status(conn, jobs[1].run_id) == "running"
