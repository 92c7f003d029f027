"""A records run and its batch end and reopen together (docs/decisions/0128): the crash guard
fails both in one transaction, an explicit retry and a DLQ redrive reopen both."""

from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta

from psycopg.types.json import Jsonb

from gateway.operations import reopen
from tests.integration.test_crash_guard import republished_long_ago, run, sweep
from tests.support import records
from tests.support.records import upload
from tests.support.stack import wait_until


def insert_batch(conn, tenant_id, *, run_status: str, batch_status: str,
                 created_ago: timedelta, updated_ago: timedelta) -> tuple[uuid.UUID, uuid.UUID]:
    """A batch and its run backdated as if its worker went silent ``updated_ago`` ago."""
    digest = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
    batch_id = conn.execute(
        "INSERT INTO import_batches (tenant_id, contract, contract_version, file_name, "
        "file_hash, byte_size, upload_uri, source) VALUES (%s, 'judgments', '1', "
        "'vendor-2026-01.csv', %s, 10, 'file:///nowhere', 'manual') RETURNING batch_id",
        (tenant_id, digest)).fetchone()["batch_id"]
    if batch_status != "pending":
        records.walk(conn, batch_id, "processing")
    run_id = uuid.uuid4()
    conn.execute(
        "INSERT INTO ingestion_runs (run_id, tenant_id, batch_id, status, run_type, created_at, "
        "updated_at) VALUES (%s, %s, %s, 'queued', 'records_import', now() - %s, now() - %s)",
        (run_id, tenant_id, batch_id, created_ago, updated_ago))
    if run_status == "running":
        conn.execute("UPDATE ingestion_runs SET status = 'running', started_at = created_at "
                     "WHERE run_id = %s", (run_id,))
    return batch_id, run_id


def batch(conn, batch_id) -> dict:
    return conn.execute("SELECT * FROM import_batches WHERE batch_id = %s",
                        (batch_id,)).fetchone()


# ── the crash guard ─────────────────────────────────────────────────────────────────────────
def test_crash_guard_fails_an_abandoned_records_run_and_its_batch_together(
        database_url, conn, tenants):
    # Given a records import whose worker died mid-parse half an hour ago, republished in vain
    tenant_id = tenants.user().tenant_id
    batch_id, run_id = insert_batch(conn, tenant_id, run_status="running",
                                    batch_status="processing", created_ago=timedelta(hours=1),
                                    updated_ago=timedelta(minutes=30))
    conn.execute("UPDATE ingestion_runs SET republish_count = 3 WHERE run_id = %s", (run_id,))
    republished_long_ago(conn, run_id)

    # When the crash guard passes
    result = sweep(database_url)

    # Then run and batch are failed, the batch with the run's one-sentence reason
    assert result.failed_running == 1 and result.failed_batches == 1
    assert run(conn, run_id)["status"] == "failed"
    row = batch(conn, batch_id)
    assert row["status"] == "failed" and row["completed_at"] is not None
    assert row["rejection_reason"] == run(conn, run_id)["error"]
    assert "no worker could finish" in row["rejection_reason"]
    assert row["rejection_reason"].count(". ") == 0  # one sentence


def test_crash_guard_fails_a_never_picked_up_records_run_and_its_pending_batch(
        database_url, conn, tenants):
    tenant_id = tenants.user().tenant_id
    batch_id, run_id = insert_batch(conn, tenant_id, run_status="queued",
                                    batch_status="pending", created_ago=timedelta(hours=2),
                                    updated_ago=timedelta(hours=2))

    result = sweep(database_url)

    assert result.failed_queued == 1 and result.failed_batches == 1
    row = batch(conn, batch_id)
    assert row["status"] == "failed" and "never picked up" in row["rejection_reason"]


def test_crash_guard_leaves_a_batch_the_worker_already_finished(database_url, conn, tenants):
    # Given a worker that completed the batch and died before it could end the run
    tenant_id = tenants.user().tenant_id
    batch_id, run_id = insert_batch(conn, tenant_id, run_status="running",
                                    batch_status="processing", created_ago=timedelta(hours=1),
                                    updated_ago=timedelta(minutes=30))
    records.walk(conn, batch_id, "staging_complete", "promoting", "completed")

    result = sweep(database_url)

    # Then the run is failed as before, and the completed batch (final) is left as it is
    assert result.failed_running == 1 and result.failed_batches == 0
    assert batch(conn, batch_id)["status"] == "completed"


# ── explicit retry and redrive ──────────────────────────────────────────────────────────────
def fail_uploaded_batch(conn, batch_id, run_id) -> None:
    """What the worker leaves after a failure past staging: errors, counts, failed states."""
    records.walk(conn, batch_id, "processing", "staging_complete")
    records.add_errors(conn, batch_id, [{"row_number": 2, "code": "JUDGMENT_AMOUNT_INVALID",
                                         "message": "Amount is not a number."}])
    conn.execute("UPDATE import_batches SET status = 'failed', rows_total = 3, rows_invalid = 1,"
                 " last_staged_row = 3, rejection_reason = 'Error rate 33.3%% exceeded limit' "
                 "WHERE batch_id = %s", (batch_id,))
    conn.execute("UPDATE ingestion_runs SET status = 'running' WHERE run_id = %s", (run_id,))
    conn.execute("UPDATE ingestion_runs SET status = 'failed', error = 'over budget' "
                 "WHERE run_id = %s", (run_id,))


def assert_reopened(conn, batch_id, run_id) -> None:
    assert run(conn, run_id)["status"] == "queued"
    row = batch(conn, batch_id)
    assert row["status"] == "pending" and row["rejection_reason"] is None
    # started over from row 1: no counts or row errors of the failed attempt to count twice
    assert (row["last_staged_row"], row["rows_total"], row["rows_invalid"]) == (0, 0, 0)
    assert conn.execute("SELECT count(*) AS n FROM import_row_errors WHERE batch_id = %s",
                        (batch_id,)).fetchone()["n"] == 0


def test_retry_of_a_records_run_reopens_its_batch(gateway, conn, tenants):
    # Given a judgments import that failed (its upload still stored)
    user = tenants.user(role="admin")
    with gateway.client(user.token) as client:
        body = upload(client, "retry.csv", records.judgments_csv(3, seed="R")).json()
        batch_id, run_id = body["batch_id"], body["run_id"]
        wait_until(lambda: conn.execute("SELECT published_at FROM job_outbox WHERE run_id = %s",
                                        (run_id,)).fetchone()["published_at"] is not None,
                   timeout=30, message="the job published")
        fail_uploaded_batch(conn, batch_id, run_id)

        # When the admin retries the run
        response = client.post(f"/v1/ingestion-runs/{run_id}/retry", json={"reason": "fixed"})

    # Then run and batch are reopened together, and the job goes out again
    assert response.status_code == 202, response.text
    assert_reopened(conn, batch_id, run_id)
    assert conn.execute("SELECT count(*) AS n FROM run_actions WHERE run_id = %s AND "
                        "action = 'retry'", (run_id,)).fetchone()["n"] == 1


def test_redrive_of_a_records_run_reopens_its_batch(conn, tenants):
    # Given a failed records run whose message was dead-lettered
    tenant_id = tenants.user().tenant_id
    batch_id, run_id = insert_batch(conn, tenant_id, run_status="queued", batch_status="pending",
                                    created_ago=timedelta(minutes=5),
                                    updated_ago=timedelta(minutes=5))
    conn.execute("INSERT INTO job_outbox (run_id, tenant_id, payload) VALUES (%s, %s, %s)",
                 (run_id, tenant_id, Jsonb({"run_id": str(run_id)})))
    fail_uploaded_batch(conn, batch_id, run_id)

    # When an operator redrives it
    claim = reopen.for_redrive(conn, run_id=run_id, tenant_id=tenant_id,
                               actor=reopen.Actor("cli:ops"), reason="queue fixed",
                               message_id="m-1")

    # Then run and batch are reopened together
    assert claim is not None and claim.reopened
    assert_reopened(conn, batch_id, run_id)


def test_redrive_dry_run_leaves_the_batch_failed(conn, tenants):
    tenant_id = tenants.user().tenant_id
    batch_id, run_id = insert_batch(conn, tenant_id, run_status="queued", batch_status="pending",
                                    created_ago=timedelta(minutes=5),
                                    updated_ago=timedelta(minutes=5))
    fail_uploaded_batch(conn, batch_id, run_id)

    claim = reopen.for_redrive(conn, run_id=run_id, tenant_id=tenant_id,
                               actor=reopen.Actor("cli:ops"), reason="check",
                               message_id="m-2", dry_run=True)

    assert claim is not None and claim.reopened
    assert batch(conn, batch_id)["status"] == "failed"
