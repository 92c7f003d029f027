"""Benchmark judgments imports against a bare script, on the Postgres `make run` starts.

    python bench/records.py                          # 100,000 rows onto 1,500,000 existing
    python bench/records.py --rows 100000 1000000    # each size in turn
    python bench/records.py --quick                  # 20,000 rows onto 100,000 (a smoke run)
    python bench/records.py --statistics             # no, fresh and stale statistics
    python bench/records.py --errors-only            # the errors endpoint on 100,000 errors
    python bench/records.py --parse --rows 1000000   # parse alone: rows/s, no database
    python bench/records.py --options                # promotion options of ADR 0180, timed

The stack is durable as `make run`'s (fsync, full-page writes; ADR 0040), with Postgres's own
settings (printed first: both scripts write to that server). `judgments` is seeded with --seed
rows (default 1,500,000) of the product's tenant, and `bare_judgments` is `CREATE TABLE …
(LIKE judgments INCLUDING ALL)` holding the same rows: the same indexes (three trigram GINs
among them), checks and defaults. Both are ANALYZEd, and the stage already holds another batch,
before anything is timed; each timed script starts after a CHECKPOINT (common.settle).

Each file is a judgments export: 2 % of its rows invalid (a bad amount), 1 % repeating an
earlier case number of the file, 5 % amending a seeded judgment (a new amount), the rest new.

The bare script is what a competent engineer writes by hand, none of the product's code:
stream the CSV with the csv module, normalise with plain string operations, COPY into a temp
table, ANALYZE it, one INSERT … SELECT DISTINCT ON … ON CONFLICT … DO UPDATE … WHERE … IS
DISTINCT FROM into bare_judgments, commit. The product: `POST /v1/imports` on a real gateway,
the outbox, SQS (moto) and a real worker process, until the batch is final. Both print
seconds and rows/s; the ratio is product / bare. The worker's peak RSS growth (with any child
processes) is printed at the end.

--statistics imports the same size three times: with the statistics of the tables an import
reads cleared (pg_clear_relation_stats), right after ANALYZE, and with stale statistics (taken
while the stage held a large batch of another tenant, since deleted), and prints the spread.

--parse times the parse alone (no database): the bare script's reader and plain
normalisation, pyarrow's and polars' CSV readers alone, the per-row worker path of before issue
31 and the columnar one (ADR 0271), checking that both worker paths give the same row codes.

--options times the ways ADR 0180 weighs to write --rows new judgments onto the seeded table:
one transaction (the upsert the product used to run), slices of 10,000 rows each committed, COPY
straight into the table, the three trigram GINs dropped and rebuilt around the insert, and an
unlogged table built first; the total and the longest transaction of each.

Then `GET /intake/batches/{id}/errors` on a batch with 100,000 row errors (COPYed straight into
Postgres, no import): first pages, the middle and the deepest page, and an errorCode filter,
each from 4 concurrent clients on a real gateway; p50/p95 per query shape (target p95 < 50 ms).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import csv
import hashlib
import io
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import common  # first: sets the environment before boto3 loads
import httpx  # noqa: E402
import orjson  # noqa: E402

from shared import db  # noqa: E402
from shared.db import migrate  # noqa: E402
from tests.support import stack  # noqa: E402
from worker.records import error_pages  # noqa: E402

HEADER = "File #,Plaintiff,Defendant,Amount,Entry Date,Court,County\n"
# Tables an import reads or writes, whose statistics --statistics clears or makes stale.
IMPORT_TABLES = ("import_staged_rows", "import_staged_judgments", "import_row_errors",
                 "import_batches", "judgments")


def make_csv(rows: int, tag: str, seeded: int) -> bytes:
    """A judgments export of ``rows`` rows: 2 % invalid, 1 % repeats, 5 % amend seeded rows."""
    out = io.StringIO()
    out.write(HEADER)
    offset = sum(map(ord, tag)) * 104729  # each file amends other stored rows
    for i in range(rows):
        amount = "not-money" if i % 50 == 7 else f"\"${1000 + i % 90000:,}.00\""
        if i % 100 == 13 and i:
            case = f"{tag}-CV-{i - 13:07d}"  # an earlier row's case number again
        elif i % 20 == 3 and seeded:
            case = f"SEED-CV-{(offset + i * 7919) % seeded:08d}"  # amends a stored judgment
            amount = f"\"${2000 + i % 70000:,}.50\""
        else:
            case = f"{tag}-CV-{i:07d}"
        out.write(f"{case},Acme Collections LLC,Defendant {i % 997},{amount},"
                  f"01/{1 + i % 28:02d}/2024,Sup. Ct.,Kings Co.\n")
    return out.getvalue().encode()


# ── the tables, seeded alike ────────────────────────────────────────────────────────────────
SEED = """
INSERT INTO {table} (tenant_id, case_number, plaintiff_name, defendant_name, amount, filed_date,
                     court, county, source)
SELECT %(tenant_id)s, 'SEED-CV-' || lpad(i::text, 8, '0'), 'Plaintiff ' || (i %% 5003),
       'Defendant ' || (i %% 997), 1000 + i %% 90000, date '2020-01-01' + (i %% 1500),
       'Supreme Court', 'Kings County', 'simplicity'
FROM generate_series(0, %(rows)s - 1) i"""


def seed(conn, tenant_id: uuid.UUID, rows: int, *, bare: bool = True) -> None:  # type: ignore[no-untyped-def]
    """``rows`` judgments of the tenant in judgments and the same in bare_judgments (LIKE
    judgments INCLUDING ALL). Loaded with the plain indexes dropped and rebuilt after (set-up
    time, not measured; a rebuilt index is what both tables have)."""
    started = time.monotonic()
    conn.execute("CREATE TABLE bare_judgments (LIKE judgments INCLUDING ALL)")
    for table in ("judgments", "bare_judgments")[:2 if bare else 1]:
        seed_table(conn, table, tenant_id, rows)
    print(f"seeded {rows:,} judgments into judgments{' and bare_judgments' if bare else ''} "
          f"({time.monotonic() - started:.0f} s, not measured)")


def seed_table(conn, table: str, tenant_id: uuid.UUID, rows: int) -> None:  # type: ignore[no-untyped-def]
    """``rows`` seeded judgments in ``table``, its plain indexes dropped and rebuilt around the
    load, then VACUUM ANALYZE."""
    plain = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes i WHERE tablename = %s AND NOT EXISTS "
        "(SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)", (table,)).fetchall()
    conn.execute(f"DROP INDEX {', '.join(i['indexname'] for i in plain)}")
    conn.execute(SEED.format(table=table), {"tenant_id": tenant_id, "rows": rows})
    conn.execute("SET maintenance_work_mem = '512MB'")
    for index in plain:
        conn.execute(index["indexdef"])
    conn.execute("RESET maintenance_work_mem")
    conn.execute(f"VACUUM ANALYZE {table}")


# ── the bare script ─────────────────────────────────────────────────────────────────────────
BARE_STAGE = """CREATE TEMP TABLE bare_stage (row_number int, case_number text,
    plaintiff_name text, defendant_name text, amount numeric(12,2), filed_date date, court text,
    county text)"""
BARE_UPSERT = """
INSERT INTO bare_judgments AS j (tenant_id, case_number, plaintiff_name, defendant_name, amount,
                                 filed_date, court, county, source)
SELECT DISTINCT ON (regexp_replace(upper(trim(case_number)), '[^A-Z0-9]', '', 'g'))
       %(tenant_id)s, case_number, plaintiff_name, defendant_name, amount, filed_date, court,
       county, 'manual'
FROM bare_stage
ORDER BY regexp_replace(upper(trim(case_number)), '[^A-Z0-9]', '', 'g'), row_number
ON CONFLICT (tenant_id, case_number_normalized) DO UPDATE
SET case_number = EXCLUDED.case_number, plaintiff_name = EXCLUDED.plaintiff_name,
    defendant_name = EXCLUDED.defendant_name, amount = EXCLUDED.amount,
    filed_date = EXCLUDED.filed_date, court = EXCLUDED.court, county = EXCLUDED.county,
    updated_at = now()
WHERE (j.case_number, j.plaintiff_name, j.defendant_name, j.amount, j.filed_date, j.court,
       j.county)
      IS DISTINCT FROM
      (EXCLUDED.case_number, EXCLUDED.plaintiff_name, EXCLUDED.defendant_name, EXCLUDED.amount,
       EXCLUDED.filed_date, EXCLUDED.court, EXCLUDED.county)
RETURNING (xmax = 0) AS inserted"""


def bare_rows(path: Path):  # type: ignore[no-untyped-def]
    """The file's valid rows, normalised with plain string operations."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader)]
        at = [header.index(h) for h in ("File #", "Plaintiff", "Defendant", "Amount",
                                        "Entry Date", "Court", "County")]
        for number, cells in enumerate(reader, start=1):
            case, plaintiff, defendant, amount, day, court, county = (cells[i].strip() for i in at)
            amount = amount.replace("$", "").replace(",", "")
            month, _, rest = day.partition("/")
            dom, _, year = rest.partition("/")
            if not case or not amount.replace(".", "", 1).isdigit() or not year.isdigit():
                continue
            yield (number, case, " ".join(plaintiff.split()), " ".join(defendant.split()),
                   amount, f"{year}-{month}-{dom}", " ".join(court.split()).title(),
                   " ".join(county.split()).title())


def bare(url: str, tenant_id: uuid.UUID, path: Path) -> tuple[float, int, int]:
    started = time.monotonic()
    with db.connect(url) as conn:
        conn.execute(BARE_STAGE)
        with conn.cursor().copy("COPY bare_stage FROM STDIN") as copy:
            for row in bare_rows(path):
                copy.write_row(row)
        conn.execute("ANALYZE bare_stage")
        written = conn.execute(BARE_UPSERT, {"tenant_id": tenant_id}).fetchall()
        conn.commit()
    inserted = sum(1 for r in written if r["inserted"])
    return time.monotonic() - started, inserted, len(written) - inserted


# ── the product ─────────────────────────────────────────────────────────────────────────────
def product(gateway: stack.Process, conn, token: str, data: bytes, name: str) -> tuple[float, dict]:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {token}"},
                      timeout=600) as client:
        response = client.post("/v1/imports", files={"file": (name, data)},
                               data={"contract": "judgments"})
    response.raise_for_status()
    batch_id = response.json()["batch_id"]
    while True:
        row = conn.execute("SELECT batch_id, status, rows_total, rows_invalid, rows_duplicate, "
                           "rows_inserted, rows_updated, parse_duration_ms, db_duration_ms, "
                           "rejection_reason FROM import_batches WHERE batch_id = %s",
                           (batch_id,)).fetchone()
        if row["status"] in ("completed", "partial", "failed"):
            return time.monotonic() - started, row
        time.sleep(0.05)


def stage_shares(worker: stack.Process, batch_id: Any) -> str:
    """Where the worker's time went for one batch: the read, validate, stage and promote
    milliseconds of its `ingest_job_complete` log line (worker/records/pipeline.py Times), as
    shares of their sum, and the slices promoted ahead, beside read, validate and stage
    (overlapping them, so not in the sum)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in worker.logs().splitlines():
            if str(batch_id) in line and "ingest_job_complete" in line:
                stats = orjson.loads(line)
                ms = {name: stats.get(f"{name}_ms") or 0
                      for name in ("read", "validate", "stage", "promote")}
                total = sum(ms.values()) or 1
                ahead = stats.get("promote_ahead_ms") or 0
                flip = stats.get("flip_upsert_ms")
                return "stages: " + ", ".join(f"{name} {value:,} ms ({value / total:.0%})"
                                              for name, value in ms.items()) + (
                    f"; promoted while staging went on: {ahead:,} ms (ADR 0273)" if ahead else ""
                ) + (f"; the flip's upsert of amends: {flip:,} ms" if flip is not None else ""
                     ) + _path(stats)
        time.sleep(0.1)
    return "stages: the worker logged no completion line for the batch"


def _path(stats: dict[str, Any]) -> str:
    """The job's steps in ms from its start (worker/records/pipeline.py Times.mark): the path its
    time took, which the overlapping stage sums cannot show (ADR 0550)."""
    at = dict(stats.get("timeline_ms") or {})
    if "promoted" in at and stats.get("flip_ms") is not None:
        at["flip begun"] = at["promoted"] - stats["flip_ms"]
    steps = sorted(at.items(), key=lambda step: step[1])
    return ("\n           path (ms from the job's start): "
            + ", ".join(f"{name.replace('_', ' ')} {ms:,}" for name, ms in steps)) if steps else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000],
                        help="file sizes to import, each in turn (default 100,000)")
    parser.add_argument("--seed", type=int, default=1_500_000,
                        help="judgments already stored in each table (default 1,500,000)")
    parser.add_argument("--quick", action="store_true", help="20,000 rows onto 100,000")
    parser.add_argument("--statistics", action="store_true",
                        help="the import with no, fresh and stale statistics")
    parser.add_argument("--errors-only", action="store_true",
                        help="only the errors endpoint on a batch of 100,000 row errors")
    parser.add_argument("--parse", action="store_true", help="parse alone, rows/s (no database)")
    parser.add_argument("--options", action="store_true",
                        help="the promotion options of ADR 0180, timed on the seeded table")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.seed = [20_000], 100_000
    if args.parse:
        for rows in args.rows:
            parse_alone(rows)
        return
    with common.stack("bench-records-", durable=True) as (root, pg, moto):
        url = pg.ensure_database("bench")
        migrate.apply(url)
        env = common.stack_env(root, url, moto)
        if args.options:
            promotion_options(url, args.rows[0], args.seed)
            return
        if not args.errors_only:
            run(root, url, env, args)
        errors_endpoint(root, url, env)


def run(root: Path, url: str, env: dict[str, str], args: argparse.Namespace) -> None:
    with db.connect(url, autocommit=True) as conn:
        user = common.BenchUser(conn, "product")
        seed(conn, user.tenant_id, args.seed)
        token = user.token()
        gateway = stack.start_gateway(env, root / "logs")
        worker = stack.spawn("worker", ["worker"], env, root / "logs")
        stack.wait_for_log(worker, "worker started", timeout=120)
        # The stage holds another batch, and every table has statistics, before anything
        # is timed: a plan that only works on empty tables shows up here.
        warm = root / "warm.csv"
        warm.write_bytes(make_csv(5_000, "WARM", 0))
        product(gateway, conn, token, warm.read_bytes(), warm.name)
        conn.execute("ANALYZE")
        rss = common.RssPeak(worker.proc.pid)
        try:
            if args.statistics:
                statistics(root, url, conn, gateway, token, args.rows[0], args.seed, worker)
            else:
                compare(root, url, conn, gateway, token, user.tenant_id, args, worker)
        finally:
            print(rss.stop())
            print(common.load_average())
            worker.stop()
            gateway.stop()


def compare(root: Path, url: str, conn, gateway: stack.Process, token: str,  # type: ignore[no-untyped-def]
            tenant_id: uuid.UUID, args: argparse.Namespace, worker: stack.Process) -> None:
    print(f"{'rows':>10} {'bare s':>8} {'bare r/s':>9} {'product s':>10} {'prod r/s':>9} "
          f"{'ratio':>6} {'parse ms':>9} {'db ms':>8} {'inserted':>9} {'updated':>8} "
          f"{'invalid':>8} status")
    for rows in args.rows:
        data = make_csv(rows, f"S{rows}", args.seed)
        path = root / f"j{rows}.csv"
        path.write_bytes(data)
        common.settle(conn)
        bare_s, inserted, updated = bare(url, tenant_id, path)
        common.settle(conn)
        product_s, row = product(gateway, conn, token, data, path.name)
        if row["status"] not in ("completed", "partial"):
            print(f"{rows:>10,} product import {row['status']}: {row['rejection_reason']}")
            continue
        print(f"{rows:>10,} {bare_s:>8.1f} {rows / bare_s:>9,.0f} {product_s:>10.1f} "
              f"{rows / product_s:>9,.0f} {product_s / bare_s:>6.2f} "
              f"{row['parse_duration_ms']:>9,} {row['db_duration_ms']:>8,} "
              f"{row['rows_inserted']:>9,} {row['rows_updated']:>8,} {row['rows_invalid']:>8,} "
              f"{row['status']}")
        print(f"{'':>10} {stage_shares(worker, row['batch_id'])}")
        assert (inserted, updated) == (row["rows_inserted"], row["rows_updated"]), (
            "the bare script and the product wrote different rows", inserted, updated, row)


def statistics(root: Path, url: str, conn, gateway: stack.Process, token: str,  # type: ignore[no-untyped-def]
               rows: int, seeded: int, worker: stack.Process) -> None:
    times: dict[str, float] = {}
    for mode in ("none", "fresh", "stale"):
        if mode == "none":
            clear_statistics(conn, IMPORT_TABLES)
        elif mode == "fresh":
            conn.execute("ANALYZE")
        else:
            stale_stage(conn, rows)
        data = make_csv(rows, f"T{mode}", seeded)
        common.settle(conn)
        seconds, row = product(gateway, conn, token, data, f"{mode}.csv")
        assert row["status"] == "completed", row
        times[mode] = seconds
        print(f"statistics {mode:>5}: {rows:,} rows in {seconds:.1f} s ({rows / seconds:,.0f} "
              f"rows/s; parse {row['parse_duration_ms']:,} ms, db {row['db_duration_ms']:,} ms)")
        print(f"  {stage_shares(worker, row['batch_id'])}")
    spread = max(times.values()) / min(times.values()) - 1
    print(f"spread between the three: {spread:.0%} (target: no import time changes by more than "
          f"20 %)")


def clear_statistics(conn, tables) -> None:  # type: ignore[no-untyped-def]
    """The tables' statistics gone, as on a stack whose autovacuum has not met them yet."""
    for table in tables:
        conn.execute("SELECT pg_clear_relation_stats('public', %s)", (table,))
        for column in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass "
                "AND attnum > 0 AND NOT attisdropped", (table,)).fetchall():
            conn.execute("SELECT pg_clear_attribute_stats('public', %s, %s, false)",
                         (table, column["attname"]))


def stale_stage(conn, rows: int) -> None:  # type: ignore[no-untyped-def]
    """Statistics of the stage taken while it held a large batch of another tenant, since
    removed: they describe rows that are gone and none of the next batch."""
    other = common.BenchUser(conn, f"stale-{uuid.uuid4().hex[:6]}")
    batch_id = conn.execute(
        "INSERT INTO import_batches (tenant_id, contract, contract_version, file_name, file_hash,"
        " byte_size, upload_uri, source, status) VALUES (%s, 'judgments', '1', 'stale.csv', %s,"
        " 1, 'file:///nowhere', 'manual', 'processing') RETURNING batch_id",
        (other.tenant_id, hashlib.sha256(uuid.uuid4().bytes).hexdigest())).fetchone()["batch_id"]
    conn.execute(
        "INSERT INTO import_staged_judgments (batch_id, tenant_id, row_number, natural_key, "
        "case_number, plaintiff_name, defendant_name, amount, filed_date) "
        "SELECT %s, %s, i, 'STALE' || i, 'STALE-' || i, 'P', 'D', 1, date '2024-01-01' "
        "FROM generate_series(1, %s) i", (batch_id, other.tenant_id, rows * 2))
    conn.execute("ANALYZE")
    conn.execute("DELETE FROM import_staged_rows WHERE batch_id = %s", (batch_id,))


# ── the promotion options of ADR 0180 ───────────────────────────────────────────────────────
OPTION_COLUMNS = ("tenant_id", "case_number", "plaintiff_name", "defendant_name", "amount",
                  "filed_date", "court", "county", "source")
OPTION_ROWS = """SELECT %(tenant_id)s::uuid AS tenant_id, %(tag)s || '-CV-' || lpad(i::text, 8, '0')
       AS case_number, 'Acme Collections LLC' AS plaintiff_name, 'Defendant ' || (i %% 997)
       AS defendant_name, (1000 + i %% 90000)::numeric(12, 2) AS amount,
       date '2024-01-01' + (i %% 300) AS filed_date, 'Supreme Court' AS court,
       'Kings County' AS county, 'manual' AS source
FROM generate_series(%(first)s::int, %(last)s::int) i"""
UPSERT_TAIL = """ON CONFLICT (tenant_id, case_number_normalized) DO UPDATE
SET amount = EXCLUDED.amount WHERE j.amount IS DISTINCT FROM EXCLUDED.amount"""
TRIGRAM = ("idx_judgments_case_number_trgm", "idx_judgments_plaintiff_name_trgm",
           "idx_judgments_defendant_name_trgm")


def promotion_options(url: str, rows: int, seeded: int) -> None:
    with db.connect(url, autocommit=True) as conn:
        tenant_id = common.BenchUser(conn, "options").tenant_id
        seed(conn, tenant_id, seeded, bare=False)
        conn.execute("DROP TABLE bare_judgments")
        print(f"{rows:,} new judgments onto {seeded:,} stored (same machine, one after another)")
        print(f"{'option':<44} {'total s':>8} {'longest tx s':>13} {'rows/s':>8}")
        for name, option in (("one transaction (INSERT … ON CONFLICT)", _one_transaction),
                             ("slices of 10,000 rows, each committed", _slices),
                             ("COPY straight into judgments", _copy),
                             ("trigram GINs dropped, insert, rebuilt", _gin_rebuild),
                             ("unlogged table first, then one insert", _unlogged_first)):
            params = {"tenant_id": tenant_id, "tag": name[:3].upper(), "first": 0,
                      "last": rows - 1}
            total, longest = option(conn, params)
            print(f"{name:<44} {total:>8.1f} {longest:>13.1f} {rows / total:>8,.0f}")
        print(common.load_average())


def _timed_tx(conn, statements: list[tuple[str, dict]]) -> float:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    with conn.transaction():
        for text, params in statements:
            conn.execute(text, params)
    return time.monotonic() - started


def _insert(params: dict) -> tuple[str, dict]:  # type: ignore[type-arg]
    return (f"INSERT INTO judgments AS j ({', '.join(OPTION_COLUMNS)}) {OPTION_ROWS} "
            f"{UPSERT_TAIL}", params)


def _one_transaction(conn, params: dict) -> tuple[float, float]:  # type: ignore[no-untyped-def, type-arg]
    took = _timed_tx(conn, [_insert(params)])
    return took, took


def _slices(conn, params: dict) -> tuple[float, float]:  # type: ignore[no-untyped-def, type-arg]
    times = []
    for first in range(params["first"], params["last"] + 1, 10_000):
        part = {**params, "first": first, "last": min(first + 9_999, params["last"])}
        times.append(_timed_tx(conn, [_insert(part)]))
    return sum(times), max(times)


def _copy(conn, params: dict) -> tuple[float, float]:  # type: ignore[no-untyped-def, type-arg]
    rows = conn.execute(OPTION_ROWS, params).fetchall()
    started = time.monotonic()
    with conn.transaction(), conn.cursor().copy(
            f"COPY judgments ({', '.join(OPTION_COLUMNS)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([row[c] for c in OPTION_COLUMNS])
    took = time.monotonic() - started
    return took, took


def _gin_rebuild(conn, params: dict) -> tuple[float, float]:  # type: ignore[no-untyped-def, type-arg]
    definitions = [r["indexdef"] for r in conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE indexname = ANY(%s)", (list(TRIGRAM),))]
    took = _timed_tx(conn, [(f"DROP INDEX {', '.join(TRIGRAM)}", {}), _insert(params),
                            ("SET LOCAL maintenance_work_mem = '256MB'", {}),
                            *[(d, {}) for d in definitions]])
    return took, took  # ACCESS EXCLUSIVE on judgments, every tenant's reads wait, throughout


def _unlogged_first(conn, params: dict) -> tuple[float, float]:  # type: ignore[no-untyped-def, type-arg]
    started = time.monotonic()
    conn.execute(f"CREATE UNLOGGED TABLE prepared AS {OPTION_ROWS}", params)
    conn.execute("CREATE INDEX ON prepared (tenant_id, case_number)")
    took = _timed_tx(conn, [(f"INSERT INTO judgments AS j ({', '.join(OPTION_COLUMNS)}) "
                             f"SELECT {', '.join(OPTION_COLUMNS)} FROM prepared {UPSERT_TAIL}",
                             {})])
    conn.execute("DROP TABLE prepared")
    return time.monotonic() - started, took


# ── parse alone ─────────────────────────────────────────────────────────────────────────────
def parse_alone(rows: int) -> None:
    """Read and validate alone (no database): the bare script's csv module and plain string
    operations; the per-row path the worker had before issue 31 (parse.Reader and
    contracts.validate_row, one row at a time); the columnar path (worker/records/table.py and
    columns.py); and the file read into string columns by pyarrow and by polars, each alone
    (the choice of ADR 0271). The two worker paths must agree on every row's codes."""
    from shared import contracts
    from worker.records import parse, table

    with tempfile.TemporaryDirectory(prefix="bench-parse-") as tmp:
        path = Path(tmp) / "j.csv"
        path.write_bytes(make_csv(rows, "P", 1_500_000))
        contract = contracts.get("judgments")
        timings: dict[str, tuple[float, float]] = {}

        def timed(name: str, job: Any) -> Any:
            started, cpu = time.monotonic(), _cpu()
            out = job()
            timings[name] = (time.monotonic() - started, _cpu() - cpu)
            return out

        def per_row() -> list[tuple[int, str]]:
            codes = []
            with parse.Reader(path, contract, "csv") as reader:
                for number, cells, _raw in reader.rows():
                    assert reader.parsed is not None
                    result = contracts.validate_row(contract, cells, reader.parsed.match, number)
                    codes += [(number, i.code) for i in result.errors + result.warnings]
            return codes

        def columnar() -> list[tuple[int, str]]:
            codes = []
            with table.Table(path, contract) as source:
                parsed = source.open()
                for chunk in source.chunks(50_000):
                    validated, _raw = chunk.validated(contract, parsed.match)
                    codes += list(zip(validated.issues["row"].to_list(),
                                      validated.issues["code"].to_list(), strict=True))
            return codes

        bare_valid = timed("bare script (csv + plain string operations)",
                           lambda: sum(1 for _ in bare_rows(path)))
        timed("pyarrow read alone (string columns)", lambda: _pyarrow_read(path))
        timed("polars read alone (string columns)", lambda: _polars_read(path))
        old = timed("per-row worker path (before issue 31)", per_row)
        new = timed("columnar worker path (read + validate)", columnar)
        print(f"parse alone, {rows:,} judgment rows ({path.stat().st_size / 2**20:.1f} MiB, "
              f"{bare_valid:,} valid by the bare script); CPU s = this process's CPU:")
        for name, (seconds, cpu) in timings.items():
            print(f"  {name:<46} {rows / seconds:>9,.0f} rows/s {seconds:>6.2f} s "
                  f"{cpu:>6.1f} CPU s")
        assert sorted(old) == sorted(new), "the columnar path gave other row codes"
        print(f"  both worker paths gave the same row codes ({len(new):,} issues)")
        print(f"  {common.load_average()}")


def _pyarrow_read(path: Path) -> int:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    names = [f"c{i}" for i in range(HEADER.count(",") + 1)]
    reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(
        use_threads=False, block_size=table_block(), skip_rows=1, column_names=names),
        convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string())))
    return sum(batch.num_rows for batch in reader)


def _polars_read(path: Path) -> int:
    import polars as pl

    # polars 2 reads a CSV in batches only through its streaming engine.
    frame = pl.scan_csv(path, infer_schema=False).collect(engine="streaming")
    return frame.height


def table_block() -> int:
    from worker.records import table

    return table.BLOCK_BYTES


def _cpu() -> float:
    """CPU seconds of this process and its live children (the validation processes)."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:2])
    return total


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
    # …and then the worker's upkeep of a final batch with errors (ADR 0335).
    error_pages.make_visible(conn, {"tenant_id": tenant_id, "batch_id": batch_id})
    conn.execute("ANALYZE import_row_errors")
    return batch_id


def errors_endpoint(root: Path, url: str, env: dict[str, str]) -> None:
    with db.connect(url, autocommit=True) as conn:
        user = common.BenchUser(conn, "errors")
        batch_id = error_batch(conn, user.tenant_id)
    token = user.token()
    path = f"/intake/batches/{batch_id}/errors"
    shapes: dict[str, dict[str, Any]] = {
        "first page (20)": {}, "page 2 (100)": {"page": 2, "limit": 100},
        # pages in a finished batch's back half are read from its end (ADR 0165): the middle
        # is the deepest walk
        "middle page 500 (100)": {"page": 500, "limit": 100},
        "deepest page 1000 (100)": {"page": 1000, "limit": 100},
        "errorCode, page 1 (100)": {"errorCode": CODES[2][0], "limit": 100},
        "errorCode, page 100 (100)": {"errorCode": CODES[2][0], "page": 100, "limit": 100}}
    # The 4 clients share one address: at ~10 ms a page they outran the per-address guard.
    gateway = stack.start_gateway({**env, **stack.UNGUARDED_ENV}, root / "logs-errors")
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
