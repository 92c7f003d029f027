"""POST /v1/imports and the batch API, through a real gateway, Postgres and SQS/S3 (moto).

The worker's records pipeline does not exist yet: where a test needs a batch that was
processed, tests/support/records.py writes the rows the pipeline will write, in states the
pipeline reaches (walked through the status machine, so its trigger accepts them).
"""

from __future__ import annotations

import csv
import hashlib
import io
import uuid
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import httpx
import orjson
import pytest

from shared import contracts, jobs, objectstore
from tests.integration.test_upload import (
    assert_error,
    receive_all,
    stored_files,
    upload_root,
)
from tests.support import records, stack
from tests.support.records import upload
from tests.support.stack import wait_until

COUNTED = ("import_batches", "ingestion_runs", "job_outbox")


def counts(conn) -> dict[str, int]:
    return {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"] for t in COUNTED}


def batch_row(conn, batch_id):
    return conn.execute("SELECT * FROM import_batches WHERE batch_id = %s", (batch_id,)).fetchone()


# ── intake ──────────────────────────────────────────────────────────────────────────────────
def test_import_writes_batch_run_and_job_together(gateway, tenants, conn, queues):
    # Given a user and a judgments file
    user = tenants.user(role="user")
    data = records.judgments_csv(3)

    # When they upload it with every option
    with gateway.client(user.token) as client:
        response = upload(client, "export.csv", data, error_threshold_percent="12.5",
                          source="simplicity", source_reference="vendor-batch-7",
                          force_partial="true")

    # Then a pending batch is answered
    assert response.status_code == 202, response.text
    body = response.json()
    assert set(body) == {"batch_id", "upload_id", "run_id", "status"}
    assert body["status"] == "pending" and body["upload_id"] == body["batch_id"]
    # and the batch holds the file's facts and the options
    batch = batch_row(conn, body["batch_id"])
    assert batch["tenant_id"] == user.tenant_id and batch["created_by"] == user.user_id
    assert batch["status"] == "pending" and batch["contract"] == "judgments"
    assert batch["file_hash"] == hashlib.sha256(data).hexdigest()
    assert batch["byte_size"] == len(data) and batch["file_name"] == "export.csv"
    assert float(batch["error_threshold_percent"]) == 12.5 and batch["force_partial"] is True
    assert batch["source"] == "simplicity" and batch["source_reference"] == "vendor-batch-7"
    assert objectstore.file_path(batch["upload_uri"]).read_bytes() == data
    # and its run belongs to the batch, not to a document
    run = conn.execute("SELECT * FROM ingestion_runs WHERE run_id = %s",
                       (body["run_id"],)).fetchone()
    assert run["run_type"] == "records_import" and run["batch_id"] == uuid.UUID(body["batch_id"])
    assert run["doc_id"] is None and run["status"] == "queued"
    assert run["initiated_by"] == user.user_id
    # and the outbox row carries the records job, which reaches the queue
    [message] = receive_all(queues, 1)
    job = jobs.parse(message.body)
    assert isinstance(job, jobs.RecordsJob)
    assert job.model_dump(mode="json") == {
        "schema_version": 1, "job_type": "records_import", "run_id": body["run_id"],
        "batch_id": body["batch_id"], "tenant_id": str(user.tenant_id),
        "contract": "judgments", "contract_version": contracts.get("judgments").version, "upload_uri": batch["upload_uri"],
        "original_filename": "export.csv", "file_format": "csv",
        "file_hash": batch["file_hash"], "error_threshold_percent": 12.5,
        "force_partial": True, "submitted_at": job.model_dump(mode="json")["submitted_at"]}
    wait_until(lambda: conn.execute("SELECT published_at FROM job_outbox WHERE run_id = %s",
                                    (body["run_id"],)).fetchone()["published_at"],
               timeout=10, message="outbox row marked published")


def test_json_lines_are_accepted_with_the_defaults(gateway, tenants, conn):
    user = tenants.user()
    data = b'{"File #": "2024-CV-1", "Plaintiff": "Acme"}\n'
    with gateway.client(user.token) as client:
        response = upload(client, "rows.ndjson", data, contract="plaintiffs")
    assert response.status_code == 202, response.text
    batch = batch_row(conn, response.json()["batch_id"])
    assert float(batch["error_threshold_percent"]) == 10 and batch["force_partial"] is False
    assert batch["source"] == "manual" and batch["contract"] == "plaintiffs"


def test_same_file_and_contract_again_is_the_same_batch(gateway, tenants, conn, stack_env):
    # Given a file that was imported
    user = tenants.user()
    data = records.judgments_csv(2)
    root = upload_root(stack_env)
    with gateway.client(user.token) as client:
        first = upload(client, "a.csv", data).json()
        first_file = objectstore.file_path(batch_row(conn, first["batch_id"])["upload_uri"])
        before = counts(conn)

        # When the same bytes are uploaded again, under another name, with the same options
        second = upload(client, "b.csv", data, error_threshold_percent="10")

        # Then the answer is the existing batch, and no new work exists
        assert second.status_code == 200, second.text
        assert second.json() == {"batch_id": first["batch_id"], "upload_id": first["batch_id"],
                                 "status": "pending", "duplicate": True}
        assert counts(conn) == before
        assert stored_files(root) == [first_file]

        # and the answer follows the batch's status
        records.finish_batch(conn, first["batch_id"], "failed", rows_total=1, rows_invalid=1)
        assert upload(client, "c.csv", data).json()["status"] == "failed"

        # but the failed file again with other options is a new batch that says so: the
        # options are never ignored (issue 20)
        for options in ({"error_threshold_percent": "50"}, {"force_partial": "true"},
                        {"decimal_separator": ","}):
            again = upload(client, "d.csv", data, **options)
            assert again.status_code == 202, again.text
            assert again.json()["batch_id"] != first["batch_id"]
            assert again.json()["options_differ_from"] is not None
            stored = batch_row(conn, again.json()["batch_id"])
            assert (stored["error_threshold_percent"], stored["force_partial"],
                    stored["decimal_separator"]) == (
                Decimal(options.get("error_threshold_percent", "10")),
                options.get("force_partial") == "true", options.get("decimal_separator"))

        # but the same bytes under the other contract are another batch
        other = upload(client, "a.csv", data, contract="plaintiffs")
        assert other.status_code == 202, other.text


def test_twenty_concurrent_identical_uploads_make_one_batch(gateway, tenants, conn, stack_env):
    # Given twenty clients with the same file
    user = tenants.user()
    data = records.judgments_csv(50, seed="C")

    def send(_: int) -> httpx.Response:
        with gateway.client(user.token) as client:
            return upload(client, "same.csv", data)

    # When they upload it at once
    with ThreadPoolExecutor(20) as pool:
        responses = list(pool.map(send, range(20)))

    # Then exactly one batch was created and every answer names it
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 19 + [202], [r.text for r in responses]
    assert len({r.json()["batch_id"] for r in responses}) == 1
    assert counts(conn) == {"import_batches": 1, "ingestion_runs": 1, "job_outbox": 1}
    # and only the winner's copy of the file is kept
    assert len(stored_files(upload_root(stack_env))) == 1


def test_unknown_contract_is_refused_and_leaves_nothing(gateway, tenants, conn, stack_env):
    user = tenants.user()
    with gateway.client(user.token) as client:
        unknown = upload(client, "x.csv", records.judgments_csv(), contract="invoices")
        missing = client.post("/v1/imports", files={"file": ("x.csv", records.judgments_csv())})
    assert_error(unknown, 400, "unknown_contract")
    assert_error(missing, 400, "unknown_contract")
    assert counts(conn) == dict.fromkeys(COUNTED, 0)
    assert stored_files(upload_root(stack_env)) == []


@pytest.mark.parametrize("value", ["101", "-1", "abc", "NaN", "Infinity", "12.345", ""])
def test_bad_error_threshold_is_refused(gateway, tenants, conn, stack_env, value):
    user = tenants.user()
    with gateway.client(user.token) as client:
        response = upload(client, "x.csv", records.judgments_csv(), error_threshold_percent=value)
    if value == "":
        # An empty field is a field not sent: the default applies.
        assert response.status_code == 202, response.text
        return
    assert_error(response, 400, "invalid_error_threshold")
    assert counts(conn) == dict.fromkeys(COUNTED, 0)
    assert stored_files(upload_root(stack_env)) == []


@pytest.mark.parametrize(("field", "value", "code"), [
    ("source", "excel", "invalid_source"),
    ("force_partial", "maybe", "invalid_force_partial"),
    ("decimal_separator", "semicolon", "invalid_decimal_separator"),
    ("source_reference", "r" * 201, "field_too_large"),
    ("title", "a document field", "unknown_field"),
])
def test_bad_form_fields_are_refused(gateway, tenants, conn, field, value, code):
    user = tenants.user()
    with gateway.client(user.token) as client:
        response = upload(client, "x.csv", records.judgments_csv(), **{field: value})
    assert_error(response, 400, code)
    assert counts(conn) == dict.fromkeys(COUNTED, 0)


@pytest.mark.parametrize(("name", "data"), [
    ("export.xlsx", b"PK\x03\x04 a spreadsheet"),
    ("report.pdf", b"%PDF-1.7 a document"),
    ("export.csv", b"%PDF-1.7 renamed\x00\x01binary"),
])
def test_a_file_that_is_not_csv_or_json_lines_is_415(gateway, tenants, conn, stack_env, name,
                                                      data):
    user = tenants.user()
    with gateway.client(user.token) as client:
        response = upload(client, name, data)
    assert_error(response, 415, "unsupported_type")
    assert counts(conn) == dict.fromkeys(COUNTED, 0)
    assert stored_files(upload_root(stack_env)) == []


# ── the batch API ───────────────────────────────────────────────────────────────────────────
RAW = {"File #": "2024-CV-12345", "Plaintiff": "Acme LLC", "Defendant": "John Doe",
       "Amount": "NOT_A_NUMBER", "Entry Date": "01/15/2024", "Court": "NY Supreme Court",
       "County": "New York"}
ERRORS = [
    {"row_number": 85, "field": "defendant_name", "code": "JUDGMENT_DEFENDANT_MISSING",
     "message": "Defendant name is required but was empty", "raw": {**RAW, "Defendant": ""}},
    {"row_number": 42, "field": "amount", "code": "JUDGMENT_AMOUNT_INVALID",
     "message": "Amount 'NOT_A_NUMBER' cannot be parsed as numeric", "raw": RAW},
    {"row_number": 90, "field": "filed_date", "code": "JUDGMENT_FILED_DATE_TOO_OLD",
     "severity": "warning", "message": "Date 1850-01-01 is before 1900", "raw": RAW},
]


@pytest.fixture
def finished(gateway, tenants, conn):
    """A completed batch of 100 rows uploaded by a user: what the pipeline will leave."""
    uploader = tenants.user(role="user")
    data = records.judgments_csv(100, seed="F")
    with gateway.client(uploader.token) as client:
        body = upload(client, "simplicity_export.csv", data, source="simplicity",
                      source_reference="batch-001").json()
    # Row errors are written while the batch runs, before it finishes (the totals of a finished
    # batch are taken then: migrations/0027)
    records.add_errors(conn, body["batch_id"], ERRORS)
    records.finish_batch(conn, body["batch_id"], rows_total=100, rows_valid=98, rows_invalid=2,
                         rows_duplicate=1, rows_inserted=90, rows_updated=5, rows_unchanged=2,
                         parse_duration_ms=250, db_duration_ms=750)
    return uploader, body, hashlib.sha256(data).hexdigest()


def test_batch_status_is_the_spec_result(gateway, conn, finished):
    uploader, body, file_hash = finished
    with gateway.client(uploader.token) as client:
        response = client.get(f"/intake/batches/{body['batch_id']}")
    assert response.status_code == 200, response.text
    result = response.json()
    row = batch_row(conn, body["batch_id"])
    assert result == {
        "id": body["batch_id"], "filename": "simplicity_export.csv", "fileHash": file_hash,
        "status": "completed", "rowCountTotal": 100,
        # inserted + updated + unchanged: every valid row promotion accepted (ADR 0090)
        "rowCountInserted": 97, "rowCountInvalid": 2, "rowCountDuplicate": 1,
        "errorThresholdPercent": 10.0, "errorRate": 2.0, "rejectionReason": None,
        "parseDurationMs": 250, "dbDurationMs": 750, "throughputRowsPerSec": 100.0,
        "createdAt": row["created_at"].isoformat().replace("+00:00", "Z"),
        "completedAt": row["completed_at"].isoformat().replace("+00:00", "Z"),
        "source": "simplicity", "sourceReference": "batch-001",
        # How the worker read the file (issue 20): nothing yet for a batch it never read.
        "file": {"encoding": None, "delimiter": None, "decimalSeparator": None,
                 "decimalSeparatorOption": "auto", "rowsSkipped": 0, "skippedReasons": {}}}


def test_a_failed_batch_shows_its_rejection(gateway, tenants, conn):
    user = tenants.user()
    with gateway.client(user.token) as client:
        body = upload(client, "bad.csv", records.judgments_csv(4, seed="B")).json()
        reason = "Error rate 85.0% exceeded limit 10.0% (85/100 rows invalid)"
        records.finish_batch(conn, body["batch_id"], "failed", rows_total=100, rows_invalid=85,
                             rejection_reason=reason, parse_duration_ms=450)
        result = client.get(f"/intake/batches/{body['batch_id']}").json()
    assert result["status"] == "failed" and result["rejectionReason"] == reason
    assert result["errorRate"] == 85.0 and result["rowCountInserted"] == 0
    assert result["dbDurationMs"] is None and result["parseDurationMs"] == 450
    assert result["throughputRowsPerSec"] == pytest.approx(100 / 0.45)


def test_a_pending_batch_has_no_rates_yet(gateway, tenants):
    user = tenants.user()
    with gateway.client(user.token) as client:
        body = upload(client, "new.csv", records.judgments_csv(2, seed="P")).json()
        result = client.get(f"/intake/batches/{body['batch_id']}").json()
    assert result["status"] == "pending" and result["rowCountTotal"] == 0
    assert result["errorRate"] == 0.0 and result["throughputRowsPerSec"] == 0.0
    assert result["completedAt"] is None and result["parseDurationMs"] is None


def test_batch_errors_are_the_spec_result_in_row_order(gateway, finished):
    uploader, body, _ = finished
    with gateway.client(uploader.token) as client:
        page = client.get(f"/intake/batches/{body['batch_id']}/errors").json()
        filtered = client.get(f"/intake/batches/{body['batch_id']}/errors",
                              params={"errorCode": "JUDGMENT_AMOUNT_INVALID"}).json()
        second = client.get(f"/intake/batches/{body['batch_id']}/errors",
                            params={"limit": 2, "page": 2}).json()
    # totalErrors counts errors, totalWarnings the warnings; each item says which it is.
    assert page == {"batchId": body["batch_id"], "totalErrors": 2, "totalWarnings": 1,
                    "errors": [
        {"rowNumber": 42, "errorCode": "JUDGMENT_AMOUNT_INVALID", "field": "amount",
         "severity": "critical",
         "errorMessage": "Amount 'NOT_A_NUMBER' cannot be parsed as numeric", "rawData": RAW},
        {"rowNumber": 85, "errorCode": "JUDGMENT_DEFENDANT_MISSING", "field": "defendant_name",
         "severity": "critical", "errorMessage": "Defendant name is required but was empty",
         "rawData": {**RAW, "Defendant": ""}},
        {"rowNumber": 90, "errorCode": "JUDGMENT_FILED_DATE_TOO_OLD", "field": "filed_date",
         "severity": "warning", "errorMessage": "Date 1850-01-01 is before 1900",
         "rawData": RAW}]}
    assert (filtered["totalErrors"], filtered["totalWarnings"]) == (1, 0)
    assert [e["rowNumber"] for e in filtered["errors"]] == [42]
    assert (second["totalErrors"], second["totalWarnings"]) == (2, 1)
    assert [e["rowNumber"] for e in second["errors"]] == [90]


def test_raw_rows_only_for_admins_and_the_uploader(gateway, tenants, finished):
    uploader, body, _ = finished
    colleague = tenants.user(role="user")
    admin = tenants.user(role="admin")
    url = f"/intake/batches/{body['batch_id']}/errors"
    seen = {}
    for who, user in (("uploader", uploader), ("colleague", colleague), ("admin", admin)):
        with gateway.client(user.token) as client:
            seen[who] = client.get(url).json()["errors"]
            export = client.get(f"/v1/imports/{body['batch_id']}/errors.csv").text
        header = next(csv.reader(io.StringIO(export)))
        seen[who + "_csv"] = "raw" in header
    assert all("rawData" in e for e in seen["uploader"] + seen["admin"])
    assert seen["colleague"] and not any("rawData" in e for e in seen["colleague"])
    assert [e["rowNumber"] for e in seen["colleague"]] == [42, 85, 90]
    assert seen["uploader_csv"] and seen["admin_csv"] and not seen["colleague_csv"]


def test_csv_export_escapes_formulas(gateway, tenants, conn):
    # Given errors whose text a spreadsheet would run as formulas
    user = tenants.user()
    with gateway.client(user.token) as client:
        body = upload(client, "evil.csv", records.judgments_csv(2, seed="E")).json()
        records.finish_batch(conn, body["batch_id"], rows_total=6, rows_invalid=6)
        hostile = ["=HYPERLINK(\"http://evil\")", "+1+1", "-2+3", "@SUM(A1)", "\tcmd",
                   "\r=1", "plain, with \"quotes\""]
        records.add_errors(conn, body["batch_id"], [
            {"row_number": i + 1, "field": "amount", "code": "JUDGMENT_AMOUNT_INVALID",
             "message": text, "raw": {"Amount": text}} for i, text in enumerate(hostile)])

        # When the errors are exported
        response = client.get(f"/v1/imports/{body['batch_id']}/errors.csv")

    # Then every formula-like cell starts with a quote, and the rest is as stored
    assert response.status_code == 200, response.text
    # The charset named once (issue 20: it came twice, `text/csv; charset=utf-8; charset=utf-8`)
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert "attachment" in response.headers["content-disposition"]
    rows = list(csv.reader(io.StringIO(response.text, newline="")))
    assert rows[0] == ["row_number", "field", "code", "severity", "message", "raw"]
    messages = [r[4] for r in rows[1:]]
    assert messages == ["'" + t for t in hostile[:-1]] + [hostile[-1]]
    assert [r[0] for r in rows[1:]] == [str(i + 1) for i in range(len(hostile))]
    assert orjson.loads(rows[1][5]) == {"Amount": hostile[0]}


def test_csv_export_streams_every_error_in_chunks(gateway, tenants, conn):
    user = tenants.user()
    with gateway.client(user.token) as client:
        body = upload(client, "many.csv", records.judgments_csv(2, seed="M")).json()
        # More than one export chunk (5,000), rows given out of order and one row twice.
        errors = [{"row_number": n, "code": "JUDGMENT_AMOUNT_INVALID", "message": f"m{n}"}
                  for n in range(12_000, 0, -1)]
        records.add_errors(conn, body["batch_id"], [*errors, {"row_number": 5000, "code": "X",
                                                                "message": "second"}])
        rows = list(csv.reader(io.StringIO(
            client.get(f"/v1/imports/{body['batch_id']}/errors.csv").text, newline="")))[1:]
    assert len(rows) == 12_001
    numbers = [int(r[0]) for r in rows]
    assert numbers == sorted(numbers) and numbers.count(5000) == 2


def test_list_filters_by_status_and_contract(gateway, tenants, conn):
    user = tenants.user()
    with gateway.client(user.token) as client:
        done = upload(client, "j1.csv", records.judgments_csv(1, seed="L1")).json()
        pending = upload(client, "j2.csv", records.judgments_csv(1, seed="L2")).json()
        plaintiffs = upload(client, "p.csv", records.judgments_csv(1, seed="L3"),
                            contract="plaintiffs").json()
        records.finish_batch(conn, done["batch_id"], rows_total=1, rows_valid=1, rows_inserted=1)
        everything = client.get("/v1/imports").json()
        completed = client.get("/v1/imports", params={"status": "completed"}).json()
        judgments = client.get("/v1/imports", params={"contract": "judgments",
                                                      "status": "pending"}).json()
        first = client.get("/v1/imports", params={"limit": 2}).json()
        rest = client.get("/v1/imports", params={"limit": 2,
                                                 "cursor": first["next_cursor"]}).json()
        bad_status = client.get("/v1/imports", params={"status": "done"})
        bad_contract = client.get("/v1/imports", params={"contract": "invoices"})
    assert everything["total"] == 3
    assert [i["id"] for i in everything["items"]] == [
        plaintiffs["batch_id"], pending["batch_id"], done["batch_id"]]
    assert everything["items"][0]["contract"] == "plaintiffs"
    assert everything["items"][0]["runId"] == plaintiffs["run_id"]
    assert [i["id"] for i in completed["items"]] == [done["batch_id"]]
    assert [i["id"] for i in judgments["items"]] == [pending["batch_id"]]
    assert [i["id"] for i in first["items"] + rest["items"]] == [
        i["id"] for i in everything["items"]]
    assert_error(bad_status, 400, "invalid_request")
    assert_error(bad_contract, 400, "unknown_contract")


def test_another_tenant_sees_none_of_a_batch(gateway, tenants, finished):
    _, body, _ = finished
    stranger = tenants.user(tenant="globex", role="admin")
    batch_id = body["batch_id"]
    with gateway.client(stranger.token) as client:
        for path in (f"/intake/batches/{batch_id}", f"/intake/batches/{batch_id}/errors",
                     f"/v1/imports/{batch_id}/errors.csv"):
            assert_error(client.get(path), 404, "not_found")
        assert client.get("/v1/imports").json()["total"] == 0
        # and an unknown id answers the same as another tenant's
        assert_error(client.get(f"/intake/batches/{uuid.uuid4()}"), 404, "not_found")


def test_the_size_cap_is_the_import_setting_and_a_csv_document_is_no_import(
        stack_env, tenants, conn, out_dir):
    # Given a gateway whose records files may be at most 1 KiB
    gateway = stack.start_gateway({**stack_env, "IMPORT_MAX_SIZE_MB": str(1 / 1024)}, out_dir)
    try:
        user = tenants.user()
        with gateway.client(user.token) as client:
            # When a larger file is imported, Then it is 413 and leaves nothing
            too_big = upload(client, "big.csv", records.judgments_csv(40, seed="S"))
            fits = upload(client, "small.csv", records.judgments_csv(1, seed="S"))
            # and a CSV sent as a document (a table to search, ADR 0210) is no import
            as_document = client.post("/v1/ingest", files={"file": ("x.csv", b"a,b\n1,2\n")})
    finally:
        gateway.stop()
    assert_error(too_big, 413, "file_too_large")
    assert fits.status_code == 202, fits.text
    assert as_document.status_code == 202, as_document.text
    assert "batch_id" not in as_document.json() and "doc_id" in as_document.json()
    assert counts(conn)["import_batches"] == 1
