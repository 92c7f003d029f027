"""Benchmark records imports: a bare script against the product, on the same machine, same run.

    python bench/records.py                 # 10,000 and 100,000 judgment rows
    python bench/records.py --million       # and 1,000,000 rows
    python bench/records.py --errors-only   # only the errors endpoint on 100,000 errors

Each size is a generated judgments CSV with 2 % invalid rows (a bad amount). The bare script:
read the CSV, normalise each row with the contract, COPY the valid rows to a temp table,
one set-based upsert into judgments; nothing else. The product: `POST /v1/imports` on a real
gateway, the outbox relay, SQS (moto), a real worker process, until the batch is completed.
Also prints the worker's peak RSS growth over its idle size (sampled every 50 ms).

Then `GET /intake/batches/{id}/errors` on a batch with 100,000 row errors (COPYed straight into
Postgres, no import): first pages, the middle and the deepest page, and an errorCode filter,
each from 4 concurrent clients on a real gateway; p50/p95 per query shape (target p95 < 50 ms).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import hashlib
import io
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", HF_HUB_OFFLINE="1",
                  TRANSFORMERS_OFFLINE="1")

from cli.embedded import EmbeddedPostgres, MotoServer  # noqa: E402
from gateway import auth  # noqa: E402
from shared import aws, contracts, db, queue  # noqa: E402
from shared.db import migrate  # noqa: E402
from tests.support import stack  # noqa: E402

HEADER = "File #,Plaintiff,Defendant,Amount,Entry Date,Court,County\n"


def make_csv(rows: int, seed: str) -> bytes:
    out = io.StringIO()
    out.write(HEADER)
    for i in range(rows):
        amount = "not-money" if i % 50 == 7 else f"\"${1000 + i % 90000:,}.00\""
        out.write(f"{seed}-CV-{i:07d},Acme Collections LLC,Defendant {i % 997},{amount},"
                  f"01/{1 + i % 28:02d}/2024,Sup. Ct.,Kings Co.\n")
    return out.getvalue().encode()


# ── the bare script ─────────────────────────────────────────────────────────────────────────
BARE_STAGE = """CREATE TEMP TABLE bare_stage (row_number int, case_number text, plaintiff_name text,
    defendant_name text, amount numeric(12,2), filed_date date, court text, county text)"""
BARE_UPSERT = """
INSERT INTO judgments AS j (tenant_id, case_number, plaintiff_name, defendant_name, amount,
                            filed_date, court, county)
SELECT DISTINCT ON (regexp_replace(upper(trim(case_number)), '[^A-Z0-9]', '', 'g'))
       %(tenant_id)s, case_number, plaintiff_name, defendant_name, amount, filed_date, court, county
FROM bare_stage ORDER BY regexp_replace(upper(trim(case_number)), '[^A-Z0-9]', '', 'g'), row_number
ON CONFLICT (tenant_id, case_number_normalized) DO UPDATE
SET plaintiff_name = EXCLUDED.plaintiff_name, defendant_name = EXCLUDED.defendant_name,
    amount = EXCLUDED.amount, filed_date = EXCLUDED.filed_date, court = EXCLUDED.court,
    county = EXCLUDED.county, updated_at = now()
WHERE (j.plaintiff_name, j.defendant_name, j.amount, j.filed_date, j.court, j.county)
      IS DISTINCT FROM (EXCLUDED.plaintiff_name, EXCLUDED.defendant_name, EXCLUDED.amount,
                        EXCLUDED.filed_date, EXCLUDED.court, EXCLUDED.county)"""
FIELDS = ("case_number", "plaintiff_name", "defendant_name", "amount", "filed_date", "court",
          "county")


def bare(url: str, tenant_id: uuid.UUID, path: Path) -> tuple[float, int]:
    started = time.monotonic()
    contract = contracts.get("judgments")
    valid = 0
    with db.connect(url) as conn, open(path, encoding="utf-8-sig", newline="") as fh:
        conn.execute(BARE_STAGE)
        reader = csv.reader(fh)
        match = contracts.match_header(contract, next(reader))
        with conn.cursor().copy("COPY bare_stage FROM STDIN") as copy:
            for number, row in enumerate(reader, start=1):
                result = contracts.validate_row(contract, row, match, number)
                if result.valid:
                    valid += 1
                    copy.write_row((number, *(result.values[f] for f in FIELDS)))
        conn.execute(BARE_UPSERT, {"tenant_id": tenant_id})
        conn.commit()
    return time.monotonic() - started, valid


# ── the product ─────────────────────────────────────────────────────────────────────────────
class RssPeak:
    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.base = self.proc.memory_info().rss
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.Error:
                return

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return (self.peak - self.base) / 2**20


def product(gateway: stack.Process, conn, token: str, data: bytes, name: str) -> tuple[float, dict]:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {token}"},
                      timeout=600) as client:
        response = client.post("/v1/imports", files={"file": (name, data)},
                               data={"contract": "judgments"})
    response.raise_for_status()
    batch_id = response.json()["batch_id"]
    while True:
        row = conn.execute("SELECT status, rows_total, rows_invalid, rows_inserted, "
                           "parse_duration_ms, db_duration_ms, rejection_reason "
                           "FROM import_batches WHERE batch_id = %s", (batch_id,)).fetchone()
        if row["status"] in ("completed", "partial", "failed"):
            return time.monotonic() - started, row
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--million", action="store_true", help="also 1,000,000 rows")
    parser.add_argument("--errors-only", action="store_true",
                        help="only the errors endpoint on a batch of 100,000 row errors")
    args = parser.parse_args()
    sizes = [10_000, 100_000] + ([1_000_000] if args.million else [])
    with tempfile.TemporaryDirectory(prefix="bench-records-") as tmp:
        root = Path(tmp)
        pg, moto = EmbeddedPostgres(root / "pg", disposable=True), MotoServer()
        pg.start()
        moto.start()
        try:
            url = pg.ensure_database("bench")
            migrate.apply(url)
            env = bench_env(root, url, moto)
            if not args.errors_only:
                run(root, url, env, sizes)
            errors_endpoint(root, url, env)
        finally:
            moto.stop()
            pg.stop("immediate")


def bench_env(root: Path, url: str, moto: MotoServer) -> dict[str, str]:
    sqs = aws.client("sqs", endpoint_url=moto.url, region="us-east-1")
    q_url, dlq_url = queue.ensure_queues(sqs, f"bench-{uuid.uuid4().hex[:6]}")
    return {"DATABASE_URL": url, "AWS_ENDPOINT_URL": moto.url, "SQS_QUEUE_URL": q_url,
           "SQS_DLQ_URL": dlq_url, "UPLOAD_STORE_URI": (root / "uploads").as_uri(),
           "ARTIFACT_STORE_URI": (root / "artifacts").as_uri(), "JWT_SECRET": stack.TEST_JWT_SECRET,
           "METRICS_TOKEN": "bench-metrics-token-" + "m" * 20, "DEV_MODE": "false",
           "OUTBOX_POLL_S": "0.2", "SQS_WAIT_TIME_S": "1", "UPLOAD_MAX_SIZE_MB": "1024",
           "LOG_LEVEL": "INFO", **stack.MOTO_ENV, **stack.OFFLINE_ENV}


def run(root: Path, url: str, env: dict[str, str], sizes: list[int]) -> None:
    with db.connect(url, autocommit=True) as conn:
        bare_tenant, product_tenant = (
            conn.execute("INSERT INTO tenants (name) VALUES (%s) RETURNING tenant_id",
                         (name,)).fetchone()["tenant_id"] for name in ("bare", "product"))
        user_id = conn.execute("INSERT INTO users (tenant_id, email, password_hash, role) "
                               "VALUES (%s, 'bench@bench.test', 'x', 'admin') RETURNING user_id",
                               (product_tenant,)).fetchone()["user_id"]
        token = auth.issue_token(auth.Principal(user_id, product_tenant, "admin"),
                                 stack.TEST_JWT_SECRET, 1)
        gateway = stack.start_gateway(env, root / "logs")
        worker = stack.spawn("worker", ["worker"], env, root / "logs")
        stack.wait_for_log(worker, "worker started", timeout=120)
        rss = RssPeak(worker.proc.pid)
        try:
            print(f"{'rows':>10} {'bare s':>8} {'product s':>10} {'ratio':>6} {'parse ms':>9} "
                  f"{'db ms':>7} {'inserted':>9} {'invalid':>8} status")
            for rows in sizes:
                data = make_csv(rows, seed=f"S{rows}")
                path = root / f"j{rows}.csv"
                path.write_bytes(data)
                bare_s, valid = bare(url, bare_tenant, path)
                product_s, row = product(gateway, conn, token, data, path.name)
                if row["status"] != "completed":
                    print(f"{rows:>10,} product import {row['status']}: {row['rejection_reason']}")
                    print(worker.logs()[-3000:])
                    continue
                print(f"{rows:>10,} {bare_s:>8.2f} {product_s:>10.2f} {product_s / bare_s:>6.2f} "
                      f"{row['parse_duration_ms']:>9} {row['db_duration_ms']:>7} "
                      f"{row['rows_inserted']:>9,} {row['rows_invalid']:>8,} {row['status']}"
                      + (f" ({row['rejection_reason']})" if row["rejection_reason"] else ""))
                assert valid == row["rows_inserted"], (valid, row)
        finally:
            print(f"worker peak RSS growth over idle: {rss.stop():.1f} MiB")
            worker.stop()
            gateway.stop()


# ── GET /intake/batches/{id}/errors on 100,000 errors ───────────────────────────────────────
ERRORS = 100_000
CLIENTS = 4
REQUESTS = 50  # per client and query shape
# Codes in the proportions of a typical bad export; the filter asks for the 10 % one.
CODES = (("JUDGMENT_AMOUNT_INVALID", "amount", 7), ("JUDGMENT_DATE_INVALID", "filed_date", 2),
         ("JUDGMENT_CASE_NUMBER_MISSING", "case_number", 1))


def error_batch(conn, tenant_id: uuid.UUID) -> uuid.UUID:  # type: ignore[no-untyped-def]
    batch_id = conn.execute(
        "INSERT INTO import_batches (tenant_id, contract, contract_version, file_name, file_hash,"
        " byte_size, upload_uri, source, status) VALUES (%s, 'judgments', '1',"
        " 'errors.csv', %s, 1, 'file:///nowhere', 'manual', 'processing') RETURNING batch_id",
        (tenant_id, hashlib.sha256(uuid.uuid4().bytes).hexdigest())).fetchone()["batch_id"]
    weighted = [c for c in CODES for _ in range(c[2])]
    with conn.cursor() as cur, cur.copy(
            "COPY import_row_errors (tenant_id, batch_id, row_number, field, code, severity,"
            " message, raw) FROM STDIN") as copy:
        for n in range(1, ERRORS + 1):
            code, field, _ = weighted[n % len(weighted)]
            raw = {"File #": f"2024-CV-{n:07d}", "Plaintiff": "Acme Collections LLC",
                   "Defendant": f"Defendant {n % 997}", "Amount": "not-money",
                   "Entry Date": "01/15/2024", "Court": "Sup. Ct.", "County": "Kings Co."}
            copy.write_row((tenant_id, batch_id, n, field, code, "critical",
                            f"{field} is invalid.", orjson.dumps(raw).decode()))
    # Finished as the worker finishes one, after its errors: the totals are taken then
    # (migrations/0027).
    conn.execute("UPDATE import_batches SET status = 'failed', completed_at = now() "
                 "WHERE batch_id = %s", (batch_id,))
    conn.execute("ANALYZE import_row_errors")
    return batch_id


def errors_endpoint(root: Path, url: str, env: dict[str, str]) -> None:
    with db.connect(url, autocommit=True) as conn:
        tenant = conn.execute("INSERT INTO tenants (name) VALUES ('errors') "
                              "RETURNING tenant_id").fetchone()
        assert tenant is not None
        tenant_id = tenant["tenant_id"]
        user = conn.execute("INSERT INTO users (tenant_id, email, password_hash, role) VALUES "
                            "(%s, 'errors@bench.test', 'x', 'admin') RETURNING user_id",
                            (tenant_id,)).fetchone()
        assert user is not None
        user_id = user["user_id"]
        batch_id = error_batch(conn, tenant_id)
    token = auth.issue_token(auth.Principal(user_id, tenant_id, "admin"), stack.TEST_JWT_SECRET, 1)
    path = f"/intake/batches/{batch_id}/errors"
    shapes: dict[str, dict[str, Any]] = {"first page (20)": {}, "page 2 (100)": {"page": 2, "limit": 100},
              # pages in a finished batch's back half are read from its end (ADR 0165):
              # the middle is the deepest walk
              "middle page 500 (100)": {"page": 500, "limit": 100},
              "deepest page 1000 (100)": {"page": 1000, "limit": 100},
              "errorCode, page 1 (100)": {"errorCode": CODES[2][0], "limit": 100},
              "errorCode, page 100 (100)": {"errorCode": CODES[2][0], "page": 100, "limit": 100}}
    gateway = stack.start_gateway(env, root / "logs-errors")
    try:
        with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {token}"},
                          timeout=30) as warm:
            for params in shapes.values():  # warm caches and check the answers
                body = warm.get(path, params=params).raise_for_status().json()
                assert body["errors"] and body["totalErrors"] in (ERRORS, ERRORS // 10), body
        print(f"\nGET /intake/batches/{{id}}/errors on {ERRORS:,} errors, {CLIENTS} concurrent "
              f"clients x {REQUESTS} requests per shape (target p95 < 50 ms)")
        print(f"{'query':<28} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7}")
        for name, params in shapes.items():
            times = sorted(_hammer(gateway.url, token, path, params))
            p50, p95 = times[len(times) // 2], times[int(len(times) * 0.95) - 1]
            print(f"{name:<28} {p50:>7.1f} {p95:>7.1f} {times[-1]:>7.1f}")
    finally:
        gateway.stop()


def _hammer(base: str, token: str, path: str, params: dict[str, Any]) -> list[float]:
    def client(_: int) -> list[float]:
        out = []
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"},
                          timeout=30) as http:
            for _ in range(REQUESTS):
                started = time.perf_counter()
                http.get(path, params=params).raise_for_status()
                out.append((time.perf_counter() - started) * 1000)
        return out

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        return [t for ts in pool.map(client, range(CLIENTS)) for t in ts]


if __name__ == "__main__":
    main()
