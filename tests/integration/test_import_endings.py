"""How a records import ends, as issue 20 found it wrong: the time it says it ended, a file
with no valid row, and the budget's sentence. Through the worker's own handler on the real
Postgres (tests/support/records_inproc.py)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from tests.support import records, stack
from tests.support.records_inproc import Importer

HEADER = records.CSV_HEADER
GOOD = "CV-{n:05d},Acme Collections LLC,John Q. Public,\"$1,000.00\",01/15/2024,,\n"
BAD = "CV-X{n:05d},Acme Collections LLC,John Q. Public,not-money,01/15/2024,,\n"


def judgments(good: int, bad: int) -> bytes:
    return (HEADER + "".join(GOOD.format(n=i) for i in range(good))
            + "".join(BAD.format(n=i) for i in range(bad))).encode()


def test_completed_at_finished_at_and_the_event_are_the_commit_time_not_the_start(
        database_url, conn, tenants, tmp_path):
    # Given a promotion held inside its transaction for a while (the worker's pause point)
    pause = tmp_path / "hold-promotion"
    pause.touch()
    importer = Importer(database_url, conn, tmp_path, pause_at="promote", pause_file=pause)
    tenant = tenants.user("endings-time").tenant_id
    finished: dict = {}
    worker = threading.Thread(target=lambda: finished.update(
        importer.run(tenant, judgments(3, 0), "judgments")))
    worker.start()
    deadline = time.monotonic() + 60
    # promoting from the promotion's first transaction on; the hold is inside its last
    # (staging_complete lasts only between the two, too briefly to be polled for)
    while conn.execute("SELECT count(*) AS n FROM import_batches WHERE tenant_id = %s AND "
                       "status = 'promoting'", (tenant,)).fetchone()["n"] == 0:
        assert time.monotonic() < deadline, "the import never reached its promotion"
        time.sleep(0.05)
    # and held inside the flip's transaction for over a second (now() would say its start)
    stack.wait_until(lambda: conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND "
        "state = 'idle in transaction' AND "
        "xact_start < clock_timestamp() - interval '1.5 seconds'").fetchone()["n"] > 0,
        timeout=60, interval=0.05, message="the promotion holds inside its flip")

    # When it is let go
    released = datetime.now(UTC)
    pause.unlink()
    worker.join(60)

    # Then the batch, its run and its completion event say it ended after that, not when
    # the transaction began (now() would be before the release)
    batch = finished
    assert batch["status"] == "completed"
    run = conn.execute("SELECT finished_at FROM ingestion_runs WHERE batch_id = %s",
                       (batch["batch_id"],)).fetchone()
    event = conn.execute("SELECT payload->>'timestamp' AS at FROM event_outbox WHERE batch_id = "
                         "%s", (batch["batch_id"],)).fetchone()
    at = datetime.fromisoformat(event["at"].replace("Z", "+00:00"))
    assert batch["completed_at"] >= released and run["finished_at"] >= released
    assert at >= released
    assert batch["completed_at"] == run["finished_at"]


def test_a_file_without_a_valid_row_fails_even_with_a_full_budget_or_force_partial(
        database_url, conn, tenants, tmp_path):
    importer = Importer(database_url, conn, tmp_path)
    tenant = tenants.user("endings-none-valid").tenant_id
    for options in ({"threshold": "100"}, {"force_partial": True}):
        batch = importer.run(tenant, judgments(0, 4), "judgments", **options)
        assert (batch["status"], batch["run_error_code"]) == ("failed", "BATCH_NO_VALID_ROWS")
        assert batch["rejection_reason"] == ("None of the file's 4 rows is valid, so nothing "
                                             "can be promoted; see the row errors.")
    assert conn.execute("SELECT count(*) AS n FROM judgments WHERE tenant_id = %s",
                        (tenant,)).fetchone()["n"] == 0


def test_the_budget_sentence_is_exact(database_url, conn, tenants, tmp_path):
    importer = Importer(database_url, conn, tmp_path)
    tenant = tenants.user("endings-budget").tenant_id
    batch = importer.run(tenant, judgments(8_999, 1_001), "judgments")
    assert (batch["status"], batch["run_error_code"]) == (
        "failed", "BATCH_ERROR_BUDGET_EXCEEDED")
    assert batch["rejection_reason"] == \
        "10.01 % (1,001 of 10,000 rows) exceeded the limit of 10 %"


def test_a_file_with_cr_only_line_ends_imports(database_url, conn, tenants, tmp_path):
    # Classic Mac Excel ends each line with a CR alone (issue 31: it failed with
    # BATCH_DELIMITER_UNKNOWN).
    importer = Importer(database_url, conn, tmp_path)
    tenant = tenants.user("endings-cr").tenant_id
    data = judgments(3, 0).replace(b"\r\n", b"\n").replace(b"\n", b"\r")
    assert b"\n" not in data
    batch = importer.run(tenant, data, "judgments")
    assert (batch["status"], batch["rows_total"], batch["file_delimiter"]) == (
        "completed", 3, "comma")
