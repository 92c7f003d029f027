"""A records failure that cannot be written leaves its message in the queue (the ACK rule,
docs/decisions/0095): a real worker reaches Postgres through a TCP proxy that the test cuts
right before the failure is written (held there by the test-only pause point WORKER_PAUSE_AT_STAGE
= fail), then restores; the redelivery fails the batch properly."""

from __future__ import annotations

from tests.support import ops, records, stack
from tests.support.stack import wait_until
from tests.support.tcpproxy import TcpProxy

# Amount is required: the file fails as a whole with BATCH_MISSING_COLUMN.
MISSING_AMOUNT = b"File #,Plaintiff,Defendant,Entry Date\nCV-1,Acme Co,John Roe,01/15/2024\n"


def batch(conn, batch_id: str) -> dict:
    return conn.execute("SELECT b.status, b.rejection_reason, r.status AS run_status "
                        "FROM import_batches b JOIN ingestion_runs r USING (batch_id) "
                        "WHERE b.batch_id = %s", (batch_id,)).fetchone()


def test_database_down_at_fail_persist_keeps_the_message_until_it_is_back(
        gateway, tenants, conn, pg, database_url, stack_env, queues, out_dir, tmp_path):
    # Given a worker that reaches Postgres only through a proxy, held before writing a failure
    proxy = TcpProxy(pg.port).start()
    flag = tmp_path / "hold"
    flag.touch()
    worker = stack.start_worker({
        **stack_env, "DATABASE_URL": database_url.replace(f":{pg.port}/", f":{proxy.port}/"),
        "WORKER_PAUSE_AT_STAGE": "fail", "WORKER_PAUSE_FILE": str(flag)}, out_dir)
    try:
        # and a judgments file without its Amount column
        with gateway.client(tenants.user().token) as client:
            response = records.upload(client, "no-amount.csv", MISSING_AMOUNT)
        assert response.status_code == 202, response.text
        batch_id = response.json()["batch_id"]
        stack.wait_for_log(worker, '"stage":"fail"', timeout=120)

        # When Postgres becomes unreachable right then, and the worker goes on to write it
        proxy.stop()
        flag.unlink()
        stack.wait_for_log(worker, "could not persist the failure; leaving the message",
                           timeout=60)

        # Then the message was not deleted, and nothing says the batch failed
        assert ops.depth(queues) == 1
        assert ops.depth(queues, queues.dlq_url) == 0
        assert batch(conn, batch_id)["status"] == "processing"

        # When Postgres is back, the redelivery fails the batch with the file's reason
        restored = TcpProxy(pg.port, listen_port=proxy.port).start()
        try:
            wait_until(lambda: batch(conn, batch_id)["status"] == "failed", timeout=120,
                       message="batch failed after redelivery")
            row = batch(conn, batch_id)
            assert row["run_status"] == "failed"
            assert row["rejection_reason"].startswith(
                "Required column 'Amount' was not found in the header."), row["rejection_reason"]
            codes = conn.execute("SELECT row_number, code FROM import_row_errors "
                                 "WHERE batch_id = %s", (batch_id,)).fetchall()
            assert [(c["row_number"], c["code"]) for c in codes] == [(0, "BATCH_MISSING_COLUMN")]
            # and only then is the message deleted, never dead-lettered
            wait_until(lambda: ops.depth(queues) == 0, timeout=60, message="message deleted")
            assert ops.depth(queues, queues.dlq_url) == 0
        finally:
            restored.stop()
    finally:
        worker.stop()
        proxy.stop()
