"""A run's attempts, whether its failure is retryable, and the runs listing's filters, through
GET /v1/ingestion-runs… against a real gateway, worker, Postgres and queue (ADR 0100–0102)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.operations import crash_guard
from shared import db
from tests.support import ops, stack
from tests.support.stack import wait_until


def _upload(client, name: str, data: bytes, **form) -> dict:
    response = client.post("/v1/ingest", files={"file": (name, data)}, data=form)
    assert response.status_code == 202, response.text
    return response.json()


def _run(client, run_id) -> dict:
    response = client.get(f"/v1/ingestion-runs/{run_id}")
    assert response.status_code == 200, response.text
    return response.json()


def _worker_once(stack_env, out_dir, name: str, **settings: str) -> None:
    worker = stack.start_worker({**stack_env, "WORKER_ID": name, **settings}, out_dir,
                                name=name, once=True)
    try:
        assert worker.proc.wait(300) == 0, worker.logs()[-3000:]
    finally:
        worker.stop()


@pytest.mark.slow
def test_a_worker_failure_then_a_retry_are_two_attempts_each_with_its_own_queue_wait(
        gateway, stack_env, out_dir, tenants):
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        # Given a corrupt PDF that a worker failed
        pdf = _upload(client, "broken.pdf", b"%PDF-1.7\n" + b"\x00garbage" * 200)
        _worker_once(stack_env, out_dir, "worker-a")
        failed = _run(client, pdf["run_id"])
        # Then it is the file's fault: retrying cannot help, and the advice says so
        assert failed["status"] == "failed" and failed["error_code"] == "extraction_error"
        assert failed["retryable"] is False and "fix" in failed["advice"].lower()

        # When its user retries it anyway, the retry waits as an attempt of its own
        assert client.post(f"/v1/ingestion-runs/{pdf['run_id']}/retry").status_code == 202
        queued = _run(client, pdf["run_id"])
        assert [a["kind"] for a in queued["attempts"]] == ["delivery", "retry"]
        assert queued["attempts"][1]["started_at"] is None  # waiting for a worker
        assert queued["retryable"] is None and queued["error_code"] is None
        _worker_once(stack_env, out_dir, "worker-b")
        run = _run(client, pdf["run_id"])

    # Then the run shows both attempts, by their workers, each failed the same way
    first, second = run["attempts"]
    assert (first["attempt_no"], first["kind"], first["worker"], first["outcome"]) == (
        1, "delivery", "worker-a", "failed")
    assert (second["attempt_no"], second["kind"], second["worker"], second["outcome"]) == (
        2, "retry", "worker-b", "failed")
    assert second["actor"] == f"user:{user.user_id}" and first["actor"] is None
    for attempt in (first, second):
        assert attempt["error_code"] == "extraction_error" and attempt["retryable"] is False
        assert attempt["error"] == failed["error"]
        assert "read_ms" in attempt["stages"]  # the stages it finished before failing
    # and the retry's queue wait counts from the retry, not from the upload
    assert _ts(second["queued_at"]) >= _ts(first["ended_at"])
    assert second["queue_wait_s"] < _ts(second["started_at"]) - _ts(run["created_at"])
    assert abs(second["queue_wait_s"]
               - (_ts(second["started_at"]) - _ts(second["queued_at"]))) < 0.01


def _ts(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value).timestamp()


def test_a_run_no_worker_picked_up_during_a_queue_outage_is_retryable(
        gateway, conn, queues, database_url, tenants):
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        # Given an upload whose job the queue lost (an outage) and that the crash guard failed
        accepted = _upload(client, "notes.txt", f"notes {uuid.uuid4()}\n".encode() * 20)
        wait_until(lambda: conn.execute("SELECT published_at FROM job_outbox WHERE run_id = %s",
                                        (accepted["run_id"],)).fetchone()["published_at"],
                   timeout=15, message="published")
        ops.drain(queues, queues.url)
        conn.execute("UPDATE ingestion_runs SET created_at = now() - interval '2 hours', "
                     "republish_count = 100, republished_at = now() - interval '1 hour' "
                     "WHERE run_id = %s", (accepted["run_id"],))
        assert _sweep(database_url).failed_queued == 1
        # When its user reads it
        run = _run(client, accepted["run_id"])
    # Then the failure is passing: retry is the advice
    assert run["status"] == "failed" and run["error_code"] == "never_picked_up"
    assert run["retryable"] is True and "retry" in run["advice"].lower()
    assert run["attempts"] == []  # no worker ever started it


def _sweep(database_url: str) -> crash_guard.GuardResult:
    async def go() -> crash_guard.GuardResult:
        pool = db.async_pool(database_url, min_size=1, max_size=2)
        await pool.open()
        try:
            return await crash_guard.sweep(pool, queued_ttl_s=3600, running_stale_s=900)
        finally:
            await pool.close()

    return asyncio.run(go())


def test_runs_filter_by_file_name_and_source_within_the_tenant(gateway, conn, tenants):
    user = tenants.user(role="user")
    other = tenants.user(tenant="globex", role="user")
    source_id = conn.execute(
        "INSERT INTO ingestion_sources (tenant_id, name, bucket) VALUES (%s, 'docs', 'b') "
        "RETURNING source_id", (user.tenant_id,)).fetchone()["source_id"]
    with gateway.client(user.token) as client, gateway.client(other.token) as stranger:
        ids = {name: _upload(client, name, f"{name} {uuid.uuid4()}\n".encode() * 5)["run_id"]
               for name in ("Notes_2024.txt", "notes-old.txt", "report.md", "100%.txt")}
        _upload(stranger, "notes-globex.txt", b"their notes\n" * 5)
        conn.execute("UPDATE ingestion_runs SET source_id = %s WHERE run_id = %s",
                     (source_id, ids["report.md"]))

        def names(**params) -> list[str]:
            response = client.get("/v1/ingestion-runs", params=params)
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["total"] == len(body["items"])
            return sorted(r["config"]["original_filename"] for r in body["items"])

        # A part of the name, any case; LIKE's wildcards are plain characters
        assert names(filename="NOTES") == ["Notes_2024.txt", "notes-old.txt"]
        assert names(filename="s_2") == ["Notes_2024.txt"]
        assert names(filename="%") == ["100%.txt"]
        assert names(source_id=str(source_id)) == ["report.md"]
        assert names(source_id=str(source_id), filename="notes") == []
        # Another tenant's source or runs are never found
        assert stranger.get("/v1/ingestion-runs", params={"source_id": str(source_id)}
                            ).json()["items"] == []
        # A cursor keeps the filter
        first = client.get("/v1/ingestion-runs", params={"filename": "notes", "limit": 1}).json()
        rest = client.get("/v1/ingestion-runs", params={
            "filename": "notes", "limit": 1, "cursor": first["next_cursor"]}).json()
        assert {first["items"][0]["run_id"], rest["items"][0]["run_id"]} == {
            ids["Notes_2024.txt"], ids["notes-old.txt"]}
        # A cursor is a position (ADR 0200): under another filter it pages that filter's
        # runs from there, and a string of another shape is refused
        other_filter = client.get("/v1/ingestion-runs", params={
            "filename": "report", "cursor": first["next_cursor"]})
        assert other_filter.status_code == 200, other_filter.text
        bad = client.get("/v1/ingestion-runs", params={
            "filename": "report", "cursor": "not-a-cursor"})
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_cursor", bad.text
        # Bounded and checked: JSON errors
        for params in ({"filename": "x" * 256}, {"source_id": "not-a-uuid"}):
            response = client.get("/v1/ingestion-runs", params=params)
            assert response.status_code == 400, response.text
            assert set(response.json()) >= {"code", "detail"}


def test_documents_by_exact_file_name_are_the_tenants_uploads(gateway, conn, tenants):
    user = tenants.user(role="user")
    other = tenants.user(tenant="globex", role="user")
    with gateway.client(user.token) as client, gateway.client(other.token) as stranger:
        mine = _upload(client, "notes.md", b"# Notes\n\nmine\n")
        _upload(client, "notes.md.bak.md", b"# Notes\n\nbackup\n")
        _upload(stranger, "notes.md", b"# Notes\n\ntheirs\n")
        found = client.get("/v1/documents", params={"filename": "notes.md"})
        assert found.status_code == 200, found.text
        assert [d["doc_id"] for d in found.json()["items"]] == [mine["doc_id"]]
        assert client.get("/v1/documents", params={"filename": "NOTES.md"}).json()["items"] == []
        assert client.get("/v1/documents", params={"filename": "x" * 256}).status_code == 400


def test_schema_declares_the_filters(gateway):
    with gateway.client() as client:
        schema = client.get("/schema/openapi.json").json()
    runs = {p["name"] for p in schema["paths"]["/v1/ingestion-runs"]["get"]["parameters"]}
    assert {"filename", "source_id", "status", "cursor"} <= runs
    docs = {p["name"] for p in schema["paths"]["/v1/documents"]["get"]["parameters"]}
    assert "filename" in docs
