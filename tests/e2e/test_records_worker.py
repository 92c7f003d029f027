"""The worker's records pipeline end to end: files go in through the real gateway
(`POST /v1/imports`, its outbox relay and moto SQS), real `ingest worker` processes parse,
stage and promote them into real Postgres. Faults are held at the worker's test-only pause
point (WORKER_PAUSE_AT_STAGE = parse | promote) and hit with SIGKILL."""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

import orjson
import psutil
import pytest

from gateway.runs import failures
from tests.support import records, stack
from tests.support.stack import wait_until
from worker.records import rowlog

HEADER = records.CSV_HEADER
GOOD = "{case},Acme Collections LLC,John Q. Public,\"$1,{n:03d}.00\",01/15/2024,Sup. Ct.,Kings Co.\n"
BAD = "{case},Acme Collections LLC,John Q. Public,not-money,01/15/2024,,\n"
PLAINTIFFS_HEADER = "File #,Plaintiff,Address,City,State,ZIP,Phone,Email,Contact Person,Status\n"
PERSONAL = ("Zebulon Quintessa", "zebulon.q@plaintiff.example", "2125559876", "212-555-9876",
            "+12125559876")


def judgments(good: int, bad: int = 0, prefix: str = "CV") -> bytes:
    lines = [GOOD.format(case=f"2024-{prefix}-{i:06d}", n=i % 1000) for i in range(good)]
    lines += [BAD.format(case=f"2024-{prefix}-X{i:06d}") for i in range(bad)]
    return (HEADER + "".join(lines)).encode()


def submit(gateway, user, data: bytes, name: str = "export.csv", **fields: str) -> str:
    with gateway.client(user.token) as client:
        response = records.upload(client, name, data, **fields)
    assert response.status_code == 202, response.text
    return response.json()["batch_id"]


def published(conn, batch_id: str) -> bool:
    return conn.execute(
        "SELECT o.published_at IS NOT NULL AS p FROM job_outbox o JOIN ingestion_runs r "
        "USING (run_id) WHERE r.batch_id = %s", (batch_id,)).fetchone()["p"]


def drain(conn, stack_env, out_dir, *batch_ids: str, env: dict | None = None) -> stack.Process:
    """Once every batch's job is on the queue, run `ingest worker --once` until it is empty."""
    for batch_id in batch_ids:
        wait_until(lambda b=batch_id: published(conn, b), timeout=30, message="job published")
    worker = stack.start_worker({**stack_env, **(env or {})}, out_dir, once=True)
    assert worker.proc.wait(240) == 0, worker.logs()[-4000:]
    return worker


def batch(conn, batch_id: str) -> dict:
    return conn.execute("SELECT b.*, r.status AS run_status, r.error AS run_error, r.run_id "
                        "FROM import_batches b JOIN ingestion_runs r USING (batch_id) "
                        "WHERE b.batch_id = %s", (batch_id,)).fetchone()


def run_view(gateway, user, run_id) -> dict:
    with gateway.client(user.token) as client:
        response = client.get(f"/v1/ingestion-runs/{run_id}")
    assert response.status_code == 200, response.text
    return response.json()


def assert_fix_the_file(gateway, user, run_id, code: str) -> None:
    """The API says the failure is the file's: its code, not retryable, and the advice."""
    run = run_view(gateway, user, run_id)
    assert (run["status"], run["error_code"], run["retryable"]) == ("failed", code, False)
    assert run["advice"] == failures.TABLE[code][1]


def errors(conn, batch_id: str) -> list[dict]:
    return conn.execute("SELECT row_number, field, code, severity, message, raw "
                        "FROM import_row_errors WHERE batch_id = %s ORDER BY row_number, id",
                        (batch_id,)).fetchall()


def judgment_count(conn, tenant_id) -> int:
    return conn.execute("SELECT count(*) AS n FROM judgments WHERE tenant_id = %s",
                        (tenant_id,)).fetchone()["n"]


def visible_judgments(gateway, user) -> int:
    """What GET /v1/records/judgments counts: the judgments a reader sees."""
    with gateway.client(user.token) as client:
        response = client.get("/v1/records/judgments", params={"limit": 1})
    assert response.status_code == 200, response.text
    return response.json()["total"]


# ── the good path ───────────────────────────────────────────────────────────────────────────
def test_good_judgments_file_completes_with_its_rows(gateway, tenants, conn, stack_env, out_dir):
    # Given a judgments file with its columns in another order and a BOM
    user = tenants.user()
    data = ("\ufeffCounty,Amount,File #,Plaintiff,Defendant,Entry Date,Court\n"
            "Kings Co.,\"$12,500.00\",2024-CV-12345,Acme Collections LLC,John Q. Public,"
            "01/15/2024,Sup. Ct.\n"
            "New York,1000,cv 777,Smith & Associates,Jane Doe,2024-02-01,\n").encode()

    # When it is imported
    batch_id = submit(gateway, user, data)
    worker = drain(conn, stack_env, out_dir, batch_id)

    # Then the batch completed, its run succeeded, and the judgments hold the normalised rows
    row = batch(conn, batch_id)
    assert (row["status"], row["run_status"]) == ("completed", "succeeded")
    assert (row["rows_total"], row["rows_valid"], row["rows_invalid"], row["rows_inserted"]) == (2, 2, 0, 2)
    assert row["parse_duration_ms"] is not None and row["db_duration_ms"] is not None
    stored = conn.execute("SELECT case_number, case_number_normalized, amount, county, court "
                          "FROM judgments WHERE tenant_id = %s ORDER BY case_number",
                          (user.tenant_id,)).fetchall()
    assert [(r["case_number_normalized"], str(r["amount"])) for r in stored] == [
        ("2024CV12345", "12500.00"), ("CV777", "1000.00")]
    assert stored[0]["county"] == "Kings County" and stored[0]["court"] == "Supreme Court"
    assert errors(conn, batch_id) == []
    # and the completion line names batch, file hash, worker and counts
    line = next(ln for ln in worker.logs().splitlines() if "ingest_job_complete" in ln)
    for field in ('"batch_id":', '"file_hash":', '"worker_id":', '"rows_total":2', '"inserted":2'):
        assert field in line, line


# ── batch-level failures ────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize(("data", "code", "reason"), [
    (b"File #,Plaintiff,Defendant,Entry Date\nA1,P,D,01/15/2024\n", "BATCH_MISSING_COLUMN",
     "Required column 'Amount' was not found in the header."),
    (HEADER.encode() + b"\n\n", "BATCH_EMPTY_FILE", "The file contains no data rows."),
    (HEADER.encode() + b'A1,P,D,5,01/15/2024,,\nA2,"P,D,5,01/15/2024,,\n', "BATCH_MALFORMED_CSV",
     "The file is malformed at line 3"),
], ids=["missing-column", "empty", "malformed"])
def test_file_level_problem_fails_the_batch_with_its_code(gateway, tenants, conn, stack_env,
                                                          out_dir, data, code, reason):
    # Given a file that is wrong as a whole
    user = tenants.user()
    batch_id = submit(gateway, user, data)

    # When the worker takes it
    drain(conn, stack_env, out_dir, batch_id)

    # Then the batch and its run failed with the reason, the code is recorded, nothing promoted
    row = batch(conn, batch_id)
    assert (row["status"], row["run_status"]) == ("failed", "failed")
    assert row["rejection_reason"].startswith(reason), row["rejection_reason"]
    assert row["run_error"] == row["rejection_reason"]
    assert [(e["row_number"], e["code"]) for e in errors(conn, batch_id)][:1] == [(0, code)]
    assert judgment_count(conn, user.tenant_id) == 0
    # and the API says retrying cannot help: the file is at fault
    assert_fix_the_file(gateway, user, row["run_id"], code)


def test_non_utf8_file_is_decoded_with_a_warning(gateway, tenants, conn, stack_env, out_dir):
    # Given a cp1252 file (é) with an extra column
    user = tenants.user()
    data = (HEADER.rstrip("\n") + ",Notes\n" +
            "2024-CV-1,Caf\u00e9 Holdings LLC,John Roe,100,01/15/2024,,,n\n").encode("cp1252")
    batch_id = submit(gateway, user, data)
    drain(conn, stack_env, out_dir, batch_id)

    # Then it completed, the name decoded correctly, and both warnings are recorded
    assert batch(conn, batch_id)["status"] == "completed"
    name = conn.execute("SELECT plaintiff_name FROM judgments WHERE tenant_id = %s",
                        (user.tenant_id,)).fetchone()["plaintiff_name"]
    assert name == "Caf\u00e9 Holdings LLC"
    found = {(e["code"], e["severity"]) for e in errors(conn, batch_id)}
    assert found == {("BATCH_ENCODING_WARNING", "warning"), ("BATCH_EXTRA_COLUMN", "warning")}


# ── the error budget ────────────────────────────────────────────────────────────────────────
def test_budget_exactly_at_threshold_completes(gateway, tenants, conn, stack_env, out_dir):
    user = tenants.user()
    batch_id = submit(gateway, user, judgments(90, 10), error_threshold_percent="10")
    drain(conn, stack_env, out_dir, batch_id)
    row = batch(conn, batch_id)
    assert (row["status"], row["rows_invalid"], row["rows_inserted"]) == ("completed", 10, 90)
    assert judgment_count(conn, user.tenant_id) == 90


def test_budget_just_over_threshold_fails_and_promotes_nothing(gateway, tenants, conn, stack_env,
                                                               out_dir):
    user = tenants.user()
    over = submit(gateway, user, judgments(89, 11), error_threshold_percent="10")
    everything = submit(gateway, user, judgments(0, 5, prefix="ALL"))
    drain(conn, stack_env, out_dir, over, everything)

    row = batch(conn, over)
    assert row["status"] == "failed"
    assert row["rejection_reason"] == "11 % (11 of 100 rows) exceeded the limit of 10 %"
    # the invalid rows are recorded with their raw row, and nothing reached judgments
    bad = [e for e in errors(conn, over) if e["severity"] == "critical"]
    assert len(bad) == 11 and {e["code"] for e in bad} == {"JUDGMENT_AMOUNT_INVALID"}
    assert bad[0]["raw"]["Amount"] == "not-money"
    all_bad = batch(conn, everything)
    assert all_bad["status"] == "failed"
    assert all_bad["rejection_reason"] == ("None of the file's 5 rows is valid, so nothing can "
                                           "be promoted; see the row errors.")
    assert judgment_count(conn, user.tenant_id) == 0
    # and the API says retrying cannot help: the rows must be fixed
    assert_fix_the_file(gateway, user, row["run_id"], "BATCH_ERROR_BUDGET_EXCEEDED")


def test_force_partial_promotes_valid_rows_and_ends_partial(gateway, tenants, conn, stack_env,
                                                            out_dir):
    user = tenants.user()
    batch_id = submit(gateway, user, judgments(15, 85), force_partial="true")
    drain(conn, stack_env, out_dir, batch_id)
    row = batch(conn, batch_id)
    assert (row["status"], row["rows_invalid"], row["rows_inserted"]) == ("partial", 85, 15)
    assert judgment_count(conn, user.tenant_id) == 15


# ── amendments and duplicates ───────────────────────────────────────────────────────────────
def test_amended_judgment_updates_only_what_changed(gateway, tenants, conn, stack_env, out_dir):
    # Given two judgments already imported
    user = tenants.user()
    first = submit(gateway, user, (HEADER + "CV-1,A Co,B Roe,100,01/15/2024,,\n"
                                   "CV-2,A Co,C Roe,200,01/15/2024,,\n").encode())
    drain(conn, stack_env, out_dir, first)
    before = conn.execute("SELECT case_number_normalized, updated_at FROM judgments "
                          "WHERE tenant_id = %s ORDER BY 1", (user.tenant_id,)).fetchall()

    # When a second file changes CV-1's amount, repeats CV-2 as it was, and adds CV-3
    second = submit(gateway, user, (HEADER + "cv 1,A Co,B Roe,150,01/15/2024,,\n"
                                    "CV-2,A Co,C Roe,200,01/15/2024,,\n"
                                    "CV-3,A Co,D Roe,300,01/15/2024,,\n").encode())
    drain(conn, stack_env, out_dir, second)

    # Then one was updated, one unchanged (not even touched), one inserted
    row = batch(conn, second)
    assert (row["rows_inserted"], row["rows_updated"], row["rows_unchanged"]) == (1, 1, 1)
    after = {r["case_number_normalized"]: r for r in conn.execute(
        "SELECT case_number_normalized, amount, updated_at FROM judgments WHERE tenant_id = %s",
        (user.tenant_id,)).fetchall()}
    assert str(after["CV1"]["amount"]) == "150.00" and len(after) == 3
    assert after["CV2"]["updated_at"] == before[1]["updated_at"]


def test_repeated_case_number_in_a_file_is_a_duplicate(gateway, tenants, conn, stack_env,
                                                       out_dir):
    user = tenants.user()
    batch_id = submit(gateway, user, (HEADER + "CV-1,A Co,B Roe,100,01/15/2024,,\n"
                                      "CV-2,A Co,C Roe,200,01/15/2024,,\n"
                                      "cv 1,A Co,B Roe,999,01/15/2024,,\n").encode())
    drain(conn, stack_env, out_dir, batch_id)
    row = batch(conn, batch_id)
    assert (row["status"], row["rows_duplicate"], row["rows_inserted"]) == ("completed", 1, 2)
    assert [(e["row_number"], e["code"], e["severity"]) for e in errors(conn, batch_id)] == [
        (3, "JUDGMENT_DUPLICATE", "warning")]
    # the first row won
    amount = conn.execute("SELECT amount FROM judgments WHERE tenant_id = %s AND "
                          "case_number_normalized = 'CV1'", (user.tenant_id,)).fetchone()["amount"]
    assert str(amount) == "100.00"


def test_plaintiffs_link_to_judgments_and_stay_out_of_logs(gateway, tenants, conn, stack_env,
                                                           out_dir):
    # Given judgments CV-1 and CV-2, then a plaintiffs file: one plaintiff on both cases and
    # one whose case number matches no judgment
    user = tenants.user()
    first = submit(gateway, user, (HEADER + "CV-1,A Co,B Roe,100,01/15/2024,,\n"
                                   "CV-2,A Co,C Roe,200,01/15/2024,,\n").encode())
    drain(conn, stack_env, out_dir, first)
    plaintiffs = (PLAINTIFFS_HEADER +
                  "CV-1,Zebulon Quintessa,1 Main St,New York,NY,10001,212-555-9876,"
                  "Zebulon.Q@plaintiff.example,,Active\n"
                  "cv 2,Zebulon Quintessa,1 Main St,New York,NY,10001,212-555-9876,"
                  "zebulon.q@plaintiff.example,,Active\n"
                  "CV-404,Other Plaintiff,2 Elm St,Boston,MA,02110,,,,Active\n").encode()
    second = submit(gateway, user, plaintiffs, name="plaintiffs.csv", contract="plaintiffs")
    worker = drain(conn, stack_env, out_dir, second)

    # Then two plaintiffs exist, the first linked to both judgments, the other to none
    row = batch(conn, second)
    assert (row["status"], row["rows_inserted"], row["rows_duplicate"]) == ("completed", 2, 1)
    links = conn.execute(
        "SELECT p.name, j.case_number_normalized FROM plaintiff_judgments pj "
        "JOIN plaintiffs p ON p.id = pj.plaintiff_id JOIN judgments j ON j.id = pj.judgment_id "
        "WHERE pj.tenant_id = %s ORDER BY 2", (user.tenant_id,)).fetchall()
    assert [(r["name"], r["case_number_normalized"]) for r in links] == [
        ("Zebulon Quintessa", "CV1"), ("Zebulon Quintessa", "CV2")]
    codes = [(e["row_number"], e["code"]) for e in errors(conn, second)]
    assert codes == [(2, "PLAINTIFF_DUPLICATE"), (3, "PLAINTIFF_CASE_NUMBER_NOT_FOUND")]
    # and no name, e-mail or phone reached the worker's log
    logs = worker.logs()
    assert "ingest_job_complete" in logs
    for value in PERSONAL:
        assert value.lower() not in logs.lower(), value


def test_row_issues_are_logged_without_values_and_bounded(gateway, tenants, conn, stack_env,
                                                          out_dir):
    # Given a plaintiffs file of 60 rows, each with a bad phone and a bad e-mail (2 warnings a
    # row: 120 issues, past the per-batch limit of individual lines)
    user = tenants.user()
    lines = [f"CV-{i},Zebulon Quintessa,{i} Main St,New York,NY,10001,555-98,"
             f"zebulon.q.plaintiff.example,,Active\n" for i in range(1, 61)]
    batch_id = submit(gateway, user, (PLAINTIFFS_HEADER + "".join(lines)).encode(),
                      name="plaintiffs.csv", contract="plaintiffs")

    # When a worker imports it
    worker = drain(conn, stack_env, out_dir, batch_id)
    assert batch(conn, batch_id)["status"] == "completed"
    events = [orjson.loads(ln) for ln in worker.logs().splitlines() if ln.startswith("{")]

    # Then the job's first line names batch, file hash and worker (§5.1 "Job started")
    started = next(e for e in events if e["event"] == "job started")
    assert started["batch_id"] == batch_id and started["worker_id"]
    assert started["file_hash"] == conn.execute(
        "SELECT file_hash FROM import_batches WHERE batch_id = %s", (batch_id,)
    ).fetchone()["file_hash"]
    # and the first 100 issues are one line each, with batch, row, column and code
    issues = [e for e in events if e["event"] == "row issue"]
    assert len(issues) == rowlog.ROW_LOG_LIMIT
    assert {(e["batch_id"], e["level"]) for e in issues} == {(batch_id, "warning")}
    assert {(e["field"], e["code"]) for e in issues} == {
        ("phone", "PLAINTIFF_PHONE_INVALID"), ("email", "PLAINTIFF_EMAIL_INVALID")}
    assert [e["row_number"] for e in issues[:4]] == [1, 1, 2, 2]
    # and the other 20 are counted by code on one line for the chunk
    summary = [e for e in events if e["event"].startswith("row issues past")]
    assert len(summary) == 1 and summary[0]["batch_id"] == batch_id
    assert summary[0]["counts"] == {"PLAINTIFF_PHONE_INVALID": 10, "PLAINTIFF_EMAIL_INVALID": 10}
    # and no value of a row reached the log
    logs = worker.logs().lower()
    for value in ("zebulon quintessa", "zebulon.q.plaintiff.example", "555-98", "main st"):
        assert value not in logs, value


# ── faults ──────────────────────────────────────────────────────────────────────────────────
def _held_worker(stack_env, out_dir, flag: Path, at: str, name: str) -> stack.Process:
    worker = stack.start_worker({**stack_env, "WORKER_PAUSE_AT_STAGE": at,
                                 "WORKER_PAUSE_FILE": str(flag)}, out_dir, name=name)
    stack.wait_for_log(worker, '"event":"worker started"', timeout=120)
    return worker


@pytest.mark.slow
def test_a_large_file_is_read_and_validated_column_wise_in_chunks(gateway, tenants, conn,
                                                                 stack_env, out_dir):
    # Given a file of 60,000 rows (6 chunks, 1,000 invalid)
    user = tenants.user()
    batch_id = submit(gateway, user, judgments(59_000, 1_000), name="large.csv")
    wait_until(lambda: published(conn, batch_id), timeout=30, message="job published")

    # When a worker imports it (pyarrow reads it, polars validates it, no process of its own)
    worker = stack.start_worker(stack_env, out_dir, once=True)
    children = 0
    while worker.proc.poll() is None:
        with contextlib.suppress(psutil.Error):
            children = max(children, len(psutil.Process(worker.proc.pid).children()))
        time.sleep(0.2)
    assert worker.proc.returncode == 0, worker.logs()[-4000:]

    # Then every row was staged, counted and promoted once, with no process beside the worker
    assert children == 0
    row = batch(conn, batch_id)
    assert (row["status"], row["rows_total"], row["rows_invalid"], row["rows_inserted"]) == (
        "completed", 60_000, 1_000, 59_000)
    assert len(errors(conn, batch_id)) == 1_000
    assert visible_judgments(gateway, user) == 59_000
    # and the run says where its time went, stage by stage
    stats = conn.execute("SELECT stats FROM ingestion_runs WHERE batch_id = %s",
                         (batch_id,)).fetchone()["stats"]
    assert all(stats[f"{name}_ms"] >= 0 for name in ("read", "validate", "stage", "promote"))
    # and its completion line, the path that time took: each step after the one before, the
    # flip (its last transaction) within the promotion, all within the job (ADR 0550)
    [done] = [orjson.loads(line) for line in worker.logs().splitlines()
              if "ingest_job_complete" in line and str(batch_id) in line]
    at = done["timeline_ms"]
    assert list(at) == ["chunks_staged", "slices_ahead_done", "staging_complete", "promoted"]
    assert 0 < at["chunks_staged"] <= at["slices_ahead_done"] <= at["staging_complete"] \
        <= at["promoted"] <= done["duration_ms"]
    assert 0 <= done["flip_upsert_ms"] <= done["flip_ms"] <= at["promoted"] - at["staging_complete"]


def test_sigkill_mid_parse_resumes_after_the_last_staged_row(gateway, tenants, conn, stack_env,
                                                             out_dir, tmp_path):
    # Given a 35,000-row file (4 chunks, 2 % invalid) whose worker holds after its first chunk
    user = tenants.user()
    batch_id = submit(gateway, user, judgments(34_300, 700), name="big.csv")
    wait_until(lambda: published(conn, batch_id), timeout=30, message="job published")
    flag = tmp_path / "hold"
    flag.touch()
    first = _held_worker(stack_env, out_dir, flag, "parse", "worker-1")
    wait_until(lambda: batch(conn, batch_id)["last_staged_row"] == 10_000, timeout=120,
               message="first chunk staged")
    # and whose first chunk was promoted ahead of staging's end (docs/decisions/0273), unseen
    wait_until(lambda: conn.execute("SELECT promoted_upto FROM import_batches WHERE batch_id "
                                    "= %s", (batch_id,)).fetchone()["promoted_upto"] == 10_000,
               timeout=60, message="first chunk promoted ahead")
    assert batch(conn, batch_id)["status"] == "processing"
    assert judgment_count(conn, user.tenant_id) > 9_000
    assert visible_judgments(gateway, user) == 0

    # When that worker is killed outright and another takes the job over
    first.signal(signal.SIGKILL)
    first.proc.wait(30)
    second = stack.start_worker(stack_env, out_dir, name="worker-2")
    try:
        wait_until(lambda: batch(conn, batch_id)["status"] == "completed", timeout=240,
                   message="batch completed after takeover")
    finally:
        second.stop()

    # Then it resumed after row 10,000, staged each row once and recorded each error once
    assert '"resume_after_row":10000' in second.logs()
    row = batch(conn, batch_id)
    assert (row["rows_total"], row["rows_invalid"], row["rows_inserted"]) == (35_000, 700, 34_300)
    repeated = conn.execute("SELECT count(*) AS n FROM (SELECT row_number, code FROM "
                            "import_row_errors WHERE batch_id = %s GROUP BY 1, 2 "
                            "HAVING count(*) > 1) d", (batch_id,)).fetchone()["n"]
    assert repeated == 0 and len(errors(conn, batch_id)) == 700
    assert judgment_count(conn, user.tenant_id) == 34_300


def test_sigkill_mid_promotion_shows_nothing_and_the_rerun_completes(gateway, tenants, conn,
                                                                     stack_env, out_dir,
                                                                     tmp_path):
    # Given a batch held inside its promotion's last transaction: its slices committed (the
    # rows are in the table), the flip's writes done, not committed (docs/decisions/0180)
    user = tenants.user()
    batch_id = submit(gateway, user, judgments(500))
    wait_until(lambda: published(conn, batch_id), timeout=30, message="job published")
    flag = tmp_path / "hold"
    flag.touch()
    first = _held_worker(stack_env, out_dir, flag, "promote", "worker-1")
    wait_until(lambda: conn.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE query "
                                    "LIKE '%%INSERT INTO judgments%%' AND state = "
                                    "'idle in transaction'").fetchone()["n"] >= 1
               and batch(conn, batch_id)["status"] == "promoting", timeout=120,
               message="promotion held uncommitted")
    assert judgment_count(conn, user.tenant_id) == 500

    # When the worker is killed there
    first.signal(signal.SIGKILL)
    first.proc.wait(30)

    # Then a reader sees none of them: the batch is not completed
    assert visible_judgments(gateway, user) == 0
    assert batch(conn, batch_id)["status"] == "promoting"

    # and a takeover runs the promotion again to completion
    second = stack.start_worker(stack_env, out_dir, name="worker-2")
    try:
        wait_until(lambda: batch(conn, batch_id)["status"] == "completed", timeout=240,
                   message="batch completed after takeover")
    finally:
        second.stop()
    row = batch(conn, batch_id)
    assert (row["rows_inserted"], row["run_status"]) == (500, "succeeded")
    assert judgment_count(conn, user.tenant_id) == 500
    assert visible_judgments(gateway, user) == 500
