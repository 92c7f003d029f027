"""POST /v1/ingestion-runs/{id}/retry: a failed run runs again, on the record, or says why not."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest

from gateway.operations import crash_guard
from shared import db, objectstore
from tests.support import ops, submit
from tests.support.stack import wait_until


def _upload(client, data: bytes | None = None) -> dict:
    data = data or f"Plain notes {uuid.uuid4()}.\n".encode() * 20
    response = client.post("/v1/ingest", files={"file": ("notes.txt", data)})
    assert response.status_code == 202, response.text
    return response.json()


def _failed_upload(conn, queues, client) -> dict:
    """An upload whose run then failed, with its first job already taken off the queue."""
    accepted = _upload(client)
    wait_until(lambda: conn.execute("SELECT published_at FROM job_outbox WHERE run_id = %s",
                                    (accepted["run_id"],)).fetchone()["published_at"],
               timeout=15, message="first publish")
    ops.drain(queues, queues.url)
    ops.set_status(conn, accepted["run_id"], "failed", error="read: S3 unreachable.")
    return accepted


def _error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code and body["detail"] and "\n" not in body["detail"]
    return body


def test_retry_of_a_failed_run_requeues_it_on_the_record(gateway, conn, queues, tenants):
    # Given a user's upload whose run failed
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        accepted = _failed_upload(conn, queues, client)
        run_id = accepted["run_id"]

        # When the user who started it retries it
        response = client.post(f"/v1/ingestion-runs/{run_id}/retry",
                               json={"reason": "S3 is back"})

    # Then the run is queued again with the same upload, and the retry is on the record
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "queued"
    run = submit.run_row(conn, run_id)
    assert run["status"] == "queued" and run["error"] is None and run["queued_at"] is not None
    [action] = ops.actions(conn, run_id)
    assert action["action"] == "retry" and action["reason"] == "S3 is back"
    assert action["actor"] == f"user:{user.user_id}"
    assert action["details"]["previous_error"] == "read: S3 unreachable."
    # and its job is published again: the same job, same upload
    messages = wait_until(lambda: queues.queue.receive(10, 1), timeout=15, message="republished")
    job = submit.jobs.decode(messages[0].body)
    assert str(job.run_id) == run_id and job.upload_uri == run["config"]["upload_uri"]


def test_retry_without_a_body_uses_a_default_reason(gateway, conn, queues, tenants):
    admin = tenants.user()
    with gateway.client(admin.token) as client:
        run_id = _failed_upload(conn, queues, client)["run_id"]
        assert client.post(f"/v1/ingestion-runs/{run_id}/retry").status_code == 202
    # The record says who retried it, why (the default reason) and what the run failed with
    [action] = ops.actions(conn, run_id)
    assert action["action"] == "retry" and action["reason"] == "retried by its user"
    assert action["actor"] == f"user:{admin.user_id}"
    assert action["details"]["previous_error"] == "read: S3 unreachable."


def test_retry_when_the_upload_is_gone_answers_upload_expired(gateway, conn, queues, tenants,
                                                              stack_env):
    # Given a failed run whose raw file the cleanup already removed
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        run_id = _failed_upload(conn, queues, client)["run_id"]
        uri = submit.run_row(conn, run_id)["config"]["upload_uri"]
        objectstore.delete(uri, None)

        # When it is retried
        response = client.post(f"/v1/ingestion-runs/{run_id}/retry")

    # Then the answer tells the user to upload again, and nothing changed
    body = _error(response, 409, "upload_expired")
    assert "upload it again" in body["detail"]
    assert submit.run_row(conn, run_id)["status"] == "failed"
    assert ops.actions(conn, run_id) == []


@pytest.mark.parametrize("status", ["queued", "running", "succeeded"])
def test_retry_of_a_run_that_has_not_failed_is_refused(gateway, conn, tenants, status):
    admin = tenants.user()
    with gateway.client(admin.token) as client:
        run_id = _upload(client)["run_id"]
        ops.set_status(conn, run_id, status)
        response = client.post(f"/v1/ingestion-runs/{run_id}/retry")
    body = _error(response, 409, "run_not_failed")
    assert status in body["detail"]
    assert submit.run_row(conn, run_id)["status"] == status


def test_only_an_admin_or_the_user_who_started_it_may_retry(gateway, conn, queues, tenants):
    starter, colleague = tenants.user(role="user"), tenants.user(role="user")
    outsider = tenants.user("globex")
    with gateway.client(starter.token) as client:
        run_id = _failed_upload(conn, queues, client)["run_id"]
    with gateway.client(colleague.token) as client:
        _error(client.post(f"/v1/ingestion-runs/{run_id}/retry"), 403, "forbidden")
    with gateway.client(outsider.token) as client:
        _error(client.post(f"/v1/ingestion-runs/{run_id}/retry"), 404, "not_found")
    assert submit.run_row(conn, run_id)["status"] == "failed"
    admin = tenants.user(role="admin")
    with gateway.client(admin.token) as client:
        assert client.post(f"/v1/ingestion-runs/{run_id}/retry").status_code == 202


def test_retry_of_content_that_is_already_active_is_refused(gateway, conn, queues, tenants):
    # Given a failed run whose bytes were since ingested by another run
    admin = tenants.user()
    with gateway.client(admin.token) as client:
        run_id = _failed_upload(conn, queues, client)["run_id"]
        run = submit.run_row(conn, run_id)
        other = ops.make_run(conn, objectstore.file_path(run["config"]["upload_uri"]).parent,
                             admin, status="succeeded")
        conn.execute(
            "INSERT INTO document_versions (tenant_id, doc_id, run_id, version_number, "
            "content_hash, is_active, embedding_model, embedding_dim) "
            "VALUES (%s, %s, %s, 1, %s, true, 'm', 384)",
            (admin.tenant_id, run["doc_id"], other.run_id, run["config"]["content_hash"]))
        response = client.post(f"/v1/ingestion-runs/{run_id}/retry")
    _error(response, 409, "already_ingested")


def test_a_retried_old_run_gets_a_fresh_never_picked_up_window(database_url, conn, tenants,
                                                                gateway, queues):
    # Given a run created two hours ago that failed, then was retried just now
    admin = tenants.user()
    with gateway.client(admin.token) as client:
        run_id = _failed_upload(conn, queues, client)["run_id"]
        conn.execute("UPDATE ingestion_runs SET created_at = now() - %s WHERE run_id = %s",
                     (timedelta(hours=2), run_id))
        assert client.post(f"/v1/ingestion-runs/{run_id}/retry").status_code == 202

    # When the crash guard runs with its one-hour never-picked-up TTL
    async def sweep() -> crash_guard.GuardResult:
        pool = db.async_pool(database_url, min_size=1, max_size=2)
        await pool.open()
        try:
            return await crash_guard.sweep(pool, queued_ttl_s=3600, running_stale_s=900)
        finally:
            await pool.close()

    asyncio.run(sweep())

    # Then the retried run is left queued: its TTL counts from the retry
    assert submit.run_row(conn, run_id)["status"] == "queued"
