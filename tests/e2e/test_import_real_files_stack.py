"""Real files through the whole stack (issue 20): the gateway takes Google's UTF-16 "Excel CSV"
as downloaded, real worker processes import it; and rows carrying a plaintiff's SSN, e-mail,
phone and address go through every error path while every log the stack wrote — the gateway's,
the workers', and Postgres' own — is searched for them afterwards."""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.test_records_worker import PLAINTIFFS_HEADER, batch, drain, submit
from tests.integration.test_real_ad_exports import DATA, google_totals, meta_totals, stored
from tests.support import logscan, records

SSN, EMAIL, PHONE, ADDRESS = "078-05-1120", "zebulon.q@plaintiff.example", "(212) 555-9876", \
    "4587 Quintessa Lane"
NAME = "Zebulon Quintessa"
PERSONAL = (SSN, EMAIL, PHONE, "2125559876", "+12125559876", ADDRESS, NAME)
# Phones as the scan finds them whatever their spelling (the redaction has its own patterns).
PHONES = re.compile(r"\(\d{3}\)\s?\d{3}-\d{4}|\+1\d{10}\b|\b\d{3}-\d{3}-\d{4}\b")


def test_google_utf16_and_meta_exports_import_through_the_gateway(gateway, tenants, conn,
                                                                 stack_env, out_dir):
    # Given Google's default download (UTF-16LE with a BOM, tab separated, NUL bytes) and a
    # Meta export, uploaded as they are
    google = DATA / "google" / "campaign-report-gbp-utf16.csv"
    meta = DATA / "meta" / "ads-daily-ad-ids-idr.csv"
    g_user, m_user = tenants.user("stack-google"), tenants.user("stack-meta")
    g_batch = submit(gateway, g_user, google.read_bytes(), name=google.name,
                     contract="ad_metrics", platform="google")
    m_batch = submit(gateway, m_user, meta.read_bytes(), name=meta.name, contract="ad_metrics",
                     platform="meta")

    # When real workers import them
    drain(conn, stack_env, out_dir, g_batch, m_batch)

    # Then both completed with the files' sums, and the API says how each file was read
    for batch_id, user, path, totals in ((g_batch, g_user, google, google_totals),
                                         (m_batch, m_user, meta, meta_totals)):
        row = batch(conn, batch_id)
        assert row["status"] == "completed", row["rejection_reason"]
        assert stored(conn, user.tenant_id).spend == totals(path).spend
    with gateway.client(g_user.token) as client:
        view = client.get(f"/intake/batches/{g_batch}").json()
    assert view["file"] == {"encoding": "UTF-16LE with BOM", "delimiter": "tab",
                            "decimalSeparator": ".", "decimalSeparatorOption": "auto",
                            "rowsSkipped": 2, "skippedReasons": {"total row": 2}}
    assert (view["adMetrics"]["entityKeys"], view["adMetrics"]["reportGrain"],
            view["adMetrics"]["reportPeriod"]) == (
        "names", "period", {"start": "2026-01-27", "end": "2026-02-23"})


BLOCK_PERSONAL_ROWS = """
CREATE FUNCTION block_zebulon() RETURNS trigger AS $$
BEGIN
    IF NEW.name LIKE '%%Zebulon%%' THEN
        RAISE EXCEPTION 'test trigger refused a plaintiff row' USING ERRCODE = 'check_violation',
            DETAIL = 'Failing row contains (' || NEW.name || ', ' || COALESCE(NEW.address_line1, '')
                     || ', ' || COALESCE(NEW.email, '') || ', ' || COALESCE(NEW.phone, '') || ').';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER block_zebulon BEFORE INSERT ON plaintiffs
    FOR EACH ROW EXECUTE FUNCTION block_zebulon();
"""


def _plaintiff(case: str, *, zip_code: str = "10001", status: str = "Active",
               email: str = EMAIL, note: str = "") -> str:
    return (f"{case},{NAME}{note},{ADDRESS},New York,NY,{zip_code},\"{PHONE}\",{email},"
            f"SSN {SSN},{status}\n")


def test_personal_data_reaches_no_log_on_any_error_path(gateway, tenants, conn, stack_env,
                                                        out_dir, pg):
    server_log = Path(pg.data_dir) / "server.log"
    start = server_log.stat().st_size if server_log.exists() else 0
    user = tenants.user("personal")
    judgments = submit(gateway, user, (records.CSV_HEADER + "CV-1,A Co,B Roe,100,01/15/2024,,\n"
                                       ).encode())
    drain(conn, stack_env, out_dir, judgments)

    # Every way a row can go wrong, each row carrying an SSN, an e-mail, a phone, an address:
    bad_rows = (_plaintiff("CV-1", zip_code="1000A")           # critical: ZIP
                + _plaintiff("CV-1", status="Maybe")            # critical: status
                + _plaintiff("CV-1", email="two@@" + EMAIL)     # warning: e-mail
                + _plaintiff("CV-404")                          # warning: no such judgment
                + _plaintiff("CV-1") + _plaintiff("CV-1")       # duplicate
                + _plaintiff("CV-1", note="\x00")               # NUL: unstorable
                + _plaintiff("CV-12С"))                         # mixed script
    files = {
        # over the budget: the batch fails with the row errors beside it
        "budget": (PLAINTIFFS_HEADER + bad_rows).encode(),
        # the same rows promoted as the budget allows
        "partial": (PLAINTIFFS_HEADER + bad_rows).encode() + b"\n",
        # a file that is no CSV at all past its header (an unclosed quote)
        "malformed": (PLAINTIFFS_HEADER + f'CV-1,"{NAME},{ADDRESS},{EMAIL}\n').encode(),
        # a line of JSON lines that is no object
        "jsonl": ('{"File #": "CV-1", "Plaintiff": "' + NAME + '"}\n"' + EMAIL + " " + SSN
                  + '"\n').encode(),
    }
    ids = {
        "budget": submit(gateway, user, files["budget"], name="p1.csv", contract="plaintiffs"),
        "partial": submit(gateway, user, files["partial"], name="p2.csv", contract="plaintiffs",
                          force_partial="true"),
        "malformed": submit(gateway, user, files["malformed"], name="p3.csv",
                            contract="plaintiffs"),
        "jsonl": submit(gateway, user, files["jsonl"], name="p4.jsonl", contract="plaintiffs",
                        force_partial="true"),
    }
    drain(conn, stack_env, out_dir, *ids.values())
    # and a constraint that fires in promotion with the row in its DETAIL (a test trigger)
    conn.execute(BLOCK_PERSONAL_ROWS)
    ids["promotion"] = submit(gateway, user, (PLAINTIFFS_HEADER + _plaintiff("CV-1")).encode(),
                              name="p5.csv", contract="plaintiffs")
    drain(conn, stack_env, out_dir, ids["promotion"])

    # The paths were taken
    ends = {k: (batch(conn, v)["status"], batch(conn, v)["run_status"]) for k, v in ids.items()}
    assert ends == {"budget": ("failed", "failed"), "partial": ("partial", "succeeded"),
                    "malformed": ("failed", "failed"), "jsonl": ("partial", "succeeded"),
                    "promotion": ("failed", "failed")}, ends
    codes = {r["code"] for r in conn.execute(
        "SELECT DISTINCT code FROM import_row_errors WHERE tenant_id = %s", (user.tenant_id,))}
    assert {"PLAINTIFF_ZIP_INVALID", "PLAINTIFF_STATUS_INVALID", "PLAINTIFF_EMAIL_INVALID",
            "PLAINTIFF_CASE_NUMBER_NOT_FOUND", "PLAINTIFF_DUPLICATE", "PLAINTIFF_TEXT_UNSTORABLE",
            "PLAINTIFF_CASE_NUMBER_MIXED_SCRIPT", "BATCH_MALFORMED_CSV",
            "PLAINTIFF_ROW_UNREADABLE"} <= codes
    run_codes = {r["batch_id"]: r["error_code"] for r in conn.execute(
        "SELECT batch_id::text, error_code FROM ingestion_runs WHERE tenant_id = %s",
        (user.tenant_id,))}
    assert (run_codes[ids["budget"]], run_codes[ids["promotion"]]) == (
        "BATCH_ERROR_BUDGET_EXCEEDED", "unexpected_error")
    # (Postgres did log the promotion's error: the test reads the log it means to search)
    pg_log = server_log.read_bytes()[start:].decode("utf-8", errors="replace")
    assert "test trigger refused a plaintiff row" in pg_log

    # Then no log of the stack holds any of it
    logs = {p.name: p.read_text(errors="replace") for p in out_dir.rglob("*.log")}
    logs["postgres server.log"] = pg_log
    assert any("job failed unexpectedly" in text for text in logs.values())
    for name, text in logs.items():
        for value in PERSONAL:
            assert value.lower() not in text.lower(), (name, value)
        assert not logscan.scan_text(text), (name, logscan.scan_text(text)[:3])
        assert not PHONES.search(text), (name, PHONES.search(text))
        assert "Failing row contains (" not in text and "DETAIL:" not in text.replace(
            "DETAIL: [REDACTED]", ""), name
