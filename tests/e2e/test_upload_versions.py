"""Uploads followed through a real worker: a new version by doc_id, and concurrent identical
uploads to the S3 upload store (issue 9 §2, issue 16)."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.integration.test_upload import upload
from tests.integration.test_upload_versions import new_version
from tests.support import stack
from tests.support.stack import wait_until

pytestmark = pytest.mark.slow

V1 = b"# Notes\n\nThe harbour ferry leaves at seven every morning.\n"
V2 = b"# Notes\n\nThe harbour ferry now leaves at eight, after the winter timetable.\n"


def process_queued(conn, stack_env, out_dir, name: str) -> None:
    """Once every run's job is on the queue, run a worker until the queue is empty."""
    wait_until(lambda: conn.execute("SELECT count(*) AS n FROM job_outbox WHERE published_at "
                                    "IS NULL").fetchone()["n"] == 0,
               timeout=30, message="every job published")
    worker = stack.start_worker(stack_env, out_dir, name=name, once=True)
    assert worker.proc.wait(300) == 0, worker.logs()[-3000:]


def versions(conn, doc_id) -> list[dict]:
    return conn.execute("SELECT version_number, is_active, deactivated_at, content_hash, run_id "
                        "FROM document_versions WHERE doc_id = %s ORDER BY version_number",
                        (doc_id,)).fetchall()


def test_an_edited_upload_becomes_version_2_and_supersedes_version_1(gateway, stack_env, tenants,
                                                                     conn, out_dir):
    # Given notes.md uploaded and processed into version 1
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        first = upload(client, "notes.md", V1).json()
        process_queued(conn, stack_env, out_dir, "worker-v1")

        # When the edited notes.md is uploaded naming that document, and processed
        second = new_version(client, first["doc_id"], V2)
        assert second.status_code == 202, second.text
        process_queued(conn, stack_env, out_dir, "worker-v2")

        # Then its run succeeded, and the document has version 2 active, version 1 superseded
        run = client.get(f"/v1/ingestion-runs/{second.json()['run_id']}").json()
        assert run["status"] == "succeeded", run["error"]
        v1, v2 = versions(conn, first["doc_id"])
        assert (v1["version_number"], v1["is_active"]) == (1, False) and v1["deactivated_at"]
        assert (v2["version_number"], v2["is_active"]) == (2, True)
        assert str(v2["run_id"]) == second.json()["run_id"]
        # and the tenant sees one notes.md, whose text is the edited one
        listed = client.get("/v1/documents").json()
        assert listed["total"] == 1 and listed["items"][0]["doc_id"] == first["doc_id"]
        texts = [r["text"] for r in conn.execute(
            "SELECT c.text FROM chunks c JOIN document_versions v USING (doc_version_id) "
            "WHERE v.doc_id = %s AND v.is_active", (first["doc_id"],)).fetchall()]
        assert any("eight" in t for t in texts) and not any("seven" in t for t in texts)

        # When the same edited bytes are sent again for that document
        again = new_version(client, first["doc_id"], V2)

    # Then the existing dedup answers: nothing to do, no new run, no new version
    assert again.status_code == 200, again.text
    assert again.json() == {"doc_id": first["doc_id"], "status": "skipped",
                            "reason": "already ingested, no changes"}
    assert len(versions(conn, first["doc_id"])) == 2
    assert conn.execute("SELECT count(*) AS n FROM ingestion_runs").fetchone()["n"] == 2


@pytest.fixture
def bucket(s3):
    name = f"uploads-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=name)
    yield name
    for obj in s3.list_objects_v2(Bucket=name).get("Contents", []):
        s3.delete_object(Bucket=name, Key=obj["Key"])
    s3.delete_bucket(Bucket=name)


def test_concurrent_identical_uploads_to_s3_make_one_document_and_one_processed_run(
        stack_env, out_dir, bucket, s3, tenants, conn):
    # Given a gateway and a worker that keep uploads in S3, and twenty clients with one file
    env = {**stack_env, "UPLOAD_STORE_URI": f"s3://{bucket}/uploads"}
    gateway = stack.start_gateway(env, out_dir, "gateway-s3")
    user = tenants.user(role="user")
    data = b"Incident runbook: page the on-call engineer, then open a ticket.\n" * 200

    def send(_: int) -> httpx.Response:
        with gateway.client(user.token) as client:
            return upload(client, "runbook.md", data)

    try:
        # When they all upload it at once
        with ThreadPoolExecutor(max_workers=20) as pool:
            responses = list(pool.map(send, range(20)))
    finally:
        gateway.stop()

    # Then one upload queued a run and nineteen were skipped, pointing at it
    assert sorted(r.status_code for r in responses) == [200] * 19 + [202], \
        [r.text for r in responses]
    [accepted] = [r.json() for r in responses if r.status_code == 202]
    assert all(r.json()["run_id"] == accepted["run_id"] for r in responses)
    # and the bucket holds one object: the accepted run's (no loser left an orphan)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys == [f"uploads/{user.tenant_id}/{accepted['run_id']}/runbook.md"]
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

    # When a worker processes what is queued
    process_queued(conn, env, out_dir, "worker-s3")

    # Then one document with one version came of it, its one run succeeded
    rows = conn.execute("SELECT run_id, status FROM ingestion_runs").fetchall()
    assert [(str(r["run_id"]), r["status"]) for r in rows] == [(accepted["run_id"], "succeeded")]
    assert conn.execute("SELECT count(*) AS n FROM documents").fetchone()["n"] == 1
    assert len(versions(conn, accepted["doc_id"])) == 1
    # and the processed upload was removed: no object is left in the bucket
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
