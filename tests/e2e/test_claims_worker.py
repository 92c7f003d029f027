"""Claims that need a real `ingest worker` (one model load for the whole file's work):
docs/decisions/0004, a worker refuses a job for a model or dimension it does not serve;
docs/decisions/0032, uploading the same bytes again restores a deactivated document."""

from __future__ import annotations

import pytest

from tests.support import documents, stack, submit
from tests.support.stack import wait_until

pytestmark = pytest.mark.slow

SERVED = "sentence-transformers/all-MiniLM-L6-v2"


def _terminal(conn, run_id) -> str | None:
    status = submit.status(conn, run_id)
    return status if status in ("succeeded", "failed") else None


def test_a_worker_refuses_a_model_or_dimension_it_does_not_serve(conn, queues, store_root,
                                                                tenants, stack_env, out_dir):
    # Given jobs naming another model, the served model with another dimension, and the
    # served model as it is
    user = tenants.user()
    wrong = {}
    for name, model, dim in (("model", "BAAI/bge-base-en-v1.5", 768), ("dim", SERVED, 768)):
        job = submit.submit(conn, None, store_root, user,
                            documents.make_markdown(1) + name.encode(), copies=0)
        queues.queue.send(submit.jobs.encode(job.job.model_copy(
            update={"embedding_model": model, "embedding_dim": dim})))
        wrong[name] = (job, model, dim)
    fine = submit.submit(conn, queues.queue, store_root, user, documents.make_markdown(2))

    # When a worker processes them
    worker = stack.start_worker(stack_env, out_dir, once=True)
    assert worker.proc.wait(240) == 0, worker.logs()[-3000:]

    # Then the two are failed with a reason naming both models and dimensions, and no vector
    # of theirs was written; the third is processed
    for job, model, dim in wrong.values():
        row = submit.run_row(conn, job.run_id)
        assert row["status"] == "failed", row
        assert f"the job asks for {model} ({dim} dims)" in row["error"]
        assert f"this worker serves {SERVED} (384 dims)" in row["error"]
        assert submit.versions(conn, job.doc_id) == []
    assert submit.status(conn, fine.run_id) == "succeeded"


def test_uploading_the_same_bytes_again_restores_a_deactivated_document(
        gateway, conn, tenants, stack_env, out_dir):
    # Given a processed upload that an admin then deactivated
    admin = tenants.user(role="admin")
    data = b"# Handbook\n\nHow we work, in one paragraph long enough to chunk.\n"
    worker = stack.start_worker(stack_env, out_dir)
    try:
        with gateway.client(admin.token) as api:
            first = api.post("/v1/ingest", files={"file": ("handbook.md", data)}).json()
            wait_until(lambda: _terminal(conn, first["run_id"]), timeout=180,
                       message="the first run ends")
            assert submit.status(conn, first["run_id"]) == "succeeded"
            done = api.post(f"/v1/documents/{first['doc_id']}/deactivate")
            assert done.status_code == 200, done.text
            assert api.get("/v1/documents").json()["total"] == 0

            # When the same bytes are uploaded again
            again = api.post("/v1/ingest", files={"file": ("handbook.md", data)})

            # Then it is accepted as new work on the same document (not skipped) ...
            assert again.status_code == 202, again.text
            assert again.json()["doc_id"] == first["doc_id"]
            wait_until(lambda: _terminal(conn, again.json()["run_id"]), timeout=120,
                       message="the second run ends")
            assert submit.status(conn, again.json()["run_id"]) == "succeeded"

            # ... and the document is served again, from a new active version
            listed = api.get("/v1/documents").json()
            assert [d["doc_id"] for d in listed["items"]] == [first["doc_id"]]
        versions = submit.versions(conn, first["doc_id"])
        assert [(v["version_number"], v["is_active"]) for v in versions] == [(1, False), (2, True)]
    finally:
        worker.stop()
