"""`ingest verify`: the golden path of import-runs-state-machine.md §4 against a deployment.

Checks, each printed PASS / FAIL / SKIP:
  gateway          the API answers and the token is accepted (GET /v1/contracts/judgments)
  unique keys      the unique indexes idempotency relies on exist (SQL)
  no stale imports ops.v_stale_imports is empty (SQL)
  fresh import     a one-row judgments file with a unique case number → completed, one record
  duplicate skip   the same file again → answered as a duplicate, still one record
  cleanup          the tool's own rows (batch, run, job, judgment) are removed again (SQL)

API calls go over HTTP with a bearer token; the SQL checks need DATABASE_URL. Without it the
SQL checks are SKIPped and, since the tool could not remove what it wrote, so is the import:
the exit status is then 2 ("not verified"), never 0. --dry-run writes nothing: the import and
cleanup are SKIPped. Exit 0 = every check that ran passed and none was skipped for want of a
setting; 1 = a check failed. See docs/decisions/0131 and docs/operations.md#ingest-verify.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from shared import db

Q = db.load_queries(Path(__file__).with_name("verify.sql"))
HEADER = "File #,Plaintiff,Defendant,Amount,Entry Date,Court,County\n"
FINAL = ("completed", "partial", "failed")
# The unique keys of §3.1 in this schema (DESIGN.md "Records imports": every key has tenant_id).
UNIQUE_KEYS = {
    ("judgments", ("tenant_id", "case_number_normalized")),
    ("plaintiffs", ("tenant_id", "dedupe_key")),
    # An ad-metrics export is one batch per platform and client (migration 0022, ADR 0146),
    # and per import options (options_key, migration 0030).
    ("import_batches", ("tenant_id", "contract", "file_hash", "platform", "client_id",
                        "options_key")),
    ("ingestion_runs", ("batch_id",)),
}


def add_command(sub: Any) -> None:
    cmd = sub.add_parser("verify", help="run the import golden path against a deployment")
    cmd.add_argument("--url", default=None,
                     help="gateway URL (default $INGEST_URL, else the `make run` stack)")
    cmd.add_argument("--token", default=None, help="bearer token (default $INGEST_TOKEN, else "
                     "one signed for --email with JWT_SECRET, as `ingest token`)")
    cmd.add_argument("--email", default=None, help="user to sign a token for (default: the dev "
                     "stack's admin)")
    cmd.add_argument("--dry-run", action="store_true", help="read-only checks; write nothing")
    cmd.add_argument("--timeout", type=float, default=120.0,
                     help="seconds the import may take to finish (default 120)")
    cmd.set_defaults(run=run)


# ── the report ──────────────────────────────────────────────────────────────────────────────
@dataclass
class Report:
    results: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, name: str, outcome: str, detail: str = "") -> bool:
        self.results.append((name, outcome, detail))
        print(f"  {name + ':':<18} {outcome}{f'  ({detail})' if detail else ''}", flush=True)
        return outcome == "PASS"

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        return self.add(name, "PASS" if ok else "FAIL", detail)

    def exit_code(self, dry_run: bool) -> int:
        outcomes = [r[1] for r in self.results]
        if "FAIL" in outcomes:
            return 1
        unplanned = [r for r in self.results if r[1] == "SKIP" and not
                     (dry_run and r[2] == "dry run")]
        return 2 if unplanned else 0


# ── the command ─────────────────────────────────────────────────────────────────────────────
def run(args: argparse.Namespace) -> int:
    url = (args.url or os.environ.get("INGEST_URL")
           or f"http://127.0.0.1:{os.environ.get('PORT', '8000')}").rstrip("/")
    database_url = os.environ.get("DATABASE_URL") or None
    report = Report()
    print(f"ingest verify against {url}{' (dry run)' if args.dry_run else ''}")
    token = _token(args, database_url)
    if token is None:
        report.check("gateway", False, "no token: pass --token, set INGEST_TOKEN, or set "
                                       "DATABASE_URL and JWT_SECRET to sign one for --email")
        return _finish(report, args.dry_run)
    with httpx.Client(base_url=url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as api:
        if not _gateway(api, report):
            return _finish(report, args.dry_run)
        conn = _connect(database_url, report)
        try:
            _schema_checks(conn, report)
            if args.dry_run:
                report.add("fresh import", "SKIP", "dry run")
                report.add("duplicate skip", "SKIP", "dry run")
                report.add("cleanup", "SKIP", "dry run")
            elif conn is None:
                for name in ("fresh import", "duplicate skip", "cleanup"):
                    report.add(name, "SKIP", "needs DATABASE_URL to remove its own rows")
            else:
                _golden_path(api, conn, report, args.timeout)
        finally:
            if conn is not None:
                conn.close()
    return _finish(report, args.dry_run)


def _finish(report: Report, dry_run: bool) -> int:
    code = report.exit_code(dry_run)
    print({0: "[SUCCESS] Golden path verified", 1: "[FAILURE] Golden path not verified",
           2: "[INCOMPLETE] Some checks could not run; not verified"}[code])
    return code


def _token(args: argparse.Namespace, database_url: str | None) -> str | None:
    token = args.token or os.environ.get("INGEST_TOKEN")
    if token:
        return str(token)
    secret = os.environ.get("JWT_SECRET")
    if not (database_url and secret):
        return None
    from cli.dev import DEV_ADMIN
    from gateway import auth
    from gateway.auth import users

    with db.connect(database_url, connect_timeout=5) as conn:
        principal = users.token_principal(conn, args.email or DEV_ADMIN)
    return auth.issue_token(principal, secret, 1)


def _connect(database_url: str | None, report: Report) -> db.Conn | None:
    if not database_url:
        return None
    try:
        return db.connect(database_url, autocommit=True, connect_timeout=5)
    except Exception as exc:  # noqa: BLE001 - any failure is the check's answer
        report.check("database", False, type(exc).__name__)
        return None


# ── the checks ──────────────────────────────────────────────────────────────────────────────
def _gateway(api: httpx.Client, report: Report) -> bool:
    try:
        response = api.get("/v1/contracts/judgments")
    except httpx.HTTPError as exc:
        return report.check("gateway", False, f"unreachable: {type(exc).__name__}")
    return report.check("gateway", response.status_code == 200, f"HTTP {response.status_code}")


def _schema_checks(conn: db.Conn | None, report: Report) -> None:
    if conn is None:
        report.add("unique keys", "SKIP", "needs DATABASE_URL")
        report.add("no stale imports", "SKIP", "needs DATABASE_URL")
        return
    found = {(r["table_name"], tuple(r["columns"])) for r in conn.execute(Q["unique_keys"])}
    missing = sorted(f"{t}({', '.join(c)})" for t, c in UNIQUE_KEYS - found)
    report.check("unique keys", not missing, f"missing {', '.join(missing)}" if missing else
                 f"{len(UNIQUE_KEYS)} present")
    stale = _one(conn, "stale_imports", {})["n"]
    report.check("no stale imports", stale == 0, f"{stale} stale")


def _golden_path(api: httpx.Client, conn: db.Conn, report: Report, timeout: float) -> None:
    case = f"VERIFY-{uuid.uuid4().hex[:12].upper()}"
    key = case.replace("-", "")
    data = (HEADER + f"{case},Golden Path Verifier,Verification Defendant,1.00,"
                     "01/15/2024,Verification Court,Verification County\n").encode()
    batch_id = None
    try:
        batch_id = _fresh_import(api, conn, report, data, key, timeout)
        if batch_id is not None:
            _duplicate(api, conn, report, data, key, batch_id)
    finally:
        _cleanup(conn, report, batch_id, key)


def _fresh_import(api: httpx.Client, conn: db.Conn, report: Report, data: bytes, key: str,
                  timeout: float) -> str | None:
    response = _upload(api, data)
    if response.status_code != 202:
        report.check("fresh import", False, f"upload answered HTTP {response.status_code}")
        return None
    batch_id = str(response.json()["batch_id"])
    status = _wait(lambda: api.get(f"/intake/batches/{batch_id}").json(), timeout)
    tenant = _one(conn, "batch_tenant", {"batch_id": batch_id})["tenant_id"]
    records = _one(conn, "judgments_with_case", {"tenant_id": tenant, "key": key})["n"]
    ok = status is not None and status["status"] == "completed" and records == 1
    state = status["status"] if status else f"not finished within {timeout:.0f} s"
    report.check("fresh import", ok, f"batch {batch_id} {state}, {records} record(s)")
    return batch_id


def _duplicate(api: httpx.Client, conn: db.Conn, report: Report, data: bytes, key: str,
               batch_id: str) -> None:
    response = _upload(api, data)
    body = response.json() if response.status_code in (200, 202) else {}
    tenant = _one(conn, "batch_tenant", {"batch_id": batch_id})["tenant_id"]
    records = _one(conn, "judgments_with_case", {"tenant_id": tenant, "key": key})["n"]
    ok = (response.status_code == 200 and body.get("duplicate") is True
          and str(body.get("batch_id")) == batch_id and records == 1)
    report.check("duplicate skip", ok, f"HTTP {response.status_code}, {records} record(s)")


def _cleanup(conn: db.Conn, report: Report, batch_id: str | None, key: str) -> None:
    if batch_id is None:
        report.add("cleanup", "SKIP", "nothing was written")
        return
    row = conn.execute(Q["batch_tenant"], {"batch_id": batch_id}).fetchone()
    if row is None:
        report.check("cleanup", False, f"batch {batch_id} not found")
        return
    keys = {"batch_id": batch_id, "tenant_id": row["tenant_id"], "key": key}
    try:
        with conn.transaction():
            conn.execute(Q["remove_own_rows"], keys)
            conn.execute(Q["remove_run"], keys)
            conn.execute(Q["remove_batch"], keys)
    except Exception as exc:  # noqa: BLE001 - reported as the check's failure
        report.check("cleanup", False, f"{type(exc).__name__}: {str(exc)[:200]}")
        return
    left = _one(conn, "own_rows_left", keys)["n"]
    report.check("cleanup", left == 0, f"{left} row(s) left")


def _upload(api: httpx.Client, data: bytes) -> httpx.Response:
    return api.post("/v1/imports", files={"file": ("ingest-verify.csv", data, "text/csv")},
                    data={"contract": "judgments", "source": "manual",
                          "source_reference": "ingest verify"})


def _wait(fetch: Callable[[], dict[str, Any]], timeout: float) -> dict[str, Any] | None:
    """The batch once final, or None when it is not within the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = fetch()
        if body.get("status") in FINAL:
            return body
        time.sleep(0.5)
    return None


def _one(conn: db.Conn, name: str, params: dict[str, Any]) -> dict[str, Any]:
    row = conn.execute(Q[name], params).fetchone()
    assert row is not None
    return row


if __name__ == "__main__":
    sys.exit("run it as `ingest verify`")
