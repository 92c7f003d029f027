"""POST /v1/ingest: streaming to the store, dedup, the run and its job on the queue."""

from __future__ import annotations

import hashlib

import orjson

from shared import objectstore
from tests.support.stack import wait_until


def upload(client, name: str, data: bytes, title: str | None = None):
    form = {"title": title} if title else None
    return client.post("/v1/ingest", files={"file": (name, data)}, data=form)


def receive_all(queues, expect: int, timeout: float = 15) -> list:
    got: list = []

    def more() -> bool:
        got.extend(queues.queue.receive(10, wait_s=1))
        return len(got) >= expect

    wait_until(more, timeout=timeout, message=f"{expect} message(s) on the queue")
    return got


def test_upload_creates_document_run_and_exact_job(gateway, tenants, conn, queues):
    # Given a user
    user = tenants.user(role="user")
    data = b"# Security policy\n\nAll laptops are encrypted.\n" * 50
    digest = "sha256:" + hashlib.sha256(data).hexdigest()

    # When they upload a Markdown file
    with gateway.client(user.token) as client:
        response = upload(client, "policy.md", data, title="IT Security Policy")

    # Then a run is queued for a new content-addressed document
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "queued" and set(body) == {"run_id", "doc_id", "status"}
    run = conn.execute("SELECT * FROM ingestion_runs WHERE run_id = %s", (body["run_id"],)).fetchone()
    assert run["status"] == "queued" and run["tenant_id"] == user.tenant_id
    assert run["run_type"] == "manual_upload" and run["initiated_by"] == user.user_id
    assert run["started_at"] is None and run["finished_at"] is None
    doc = conn.execute("SELECT * FROM documents WHERE doc_id = %s", (body["doc_id"],)).fetchone()
    assert doc["source_uri"] == f"upload://{digest}" and doc["title"] == "IT Security Policy"
    # and the stored bytes are exactly the upload
    config = run["config"]
    assert config["content_hash"] == digest and config["file_size_bytes"] == len(data)
    assert config["original_filename"] == "policy.md"
    assert objectstore.file_path(config["upload_uri"]).read_bytes() == data
    # and exactly this job payload sits on the queue
    [message] = receive_all(queues, 1)
    job = orjson.loads(message.body)
    assert job == {
        "schema_version": 1, "job_type": "upload_ingest", "run_id": body["run_id"],
        "doc_id": body["doc_id"], "tenant_id": str(user.tenant_id),
        "upload_uri": config["upload_uri"], "title": "IT Security Policy", "source_type": "md",
        "source_uri": f"upload://{digest}", "original_filename": "policy.md",
        "content_hash": digest, "embedding_model": "sentence-transformers/all-MiniLM-L6-v2",
        "embedding_dim": 384, "submitted_at": job["submitted_at"],
    }
    published = conn.execute("SELECT published_at FROM job_outbox WHERE run_id = %s",
                             (body["run_id"],)).fetchone()
    assert published["published_at"] is not None
