"""Benchmark ad-metrics imports against a bare script, on the Postgres `make run` starts.

    python bench/ad_metrics.py                   # 100,000 rows: 50 campaigns / 500 ad sets /
                                                 # 5,000 ads x 20 days, onto --seed stored facts
    python bench/ad_metrics.py --rows 20000 --seed 20000   # a quick run
    python bench/ad_metrics.py --statistics      # the import with no, fresh and stale statistics

The file is a Meta Ads Manager daily export (tests/support/ad_exports.py). Two tenants hold the
same stored rows in the same tables (--seed facts of another date range, their campaigns, ad
sets and ads), every table ANALYZEd, before anything is timed. The bare script writes for one,
the product for the other; each starts after a CHECKPOINT (common.settle).

The bare script is what a competent engineer writes by hand, none of the product's code: the
csv module and plain string operations (strip, drop `$` and `,`, ISO dates), COPY into a temp
table, ANALYZE it, then four set-based upserts (campaigns → ad sets → ads → daily metrics, each
de-duplicated, references joined on (tenant, platform, external id)), one transaction. The
product: `POST /v1/imports` on a real gateway, the outbox relay, SQS (moto), a real worker
process (staging, budget, promotion, the event), until the batch is final. Both print seconds,
rows/s and the ratio; the worker's memory is printed at the end.

--statistics imports three files of the same size (other days) with the statistics of the
tables an import reads cleared, right after ANALYZE, and stale (taken while the stage held a
large batch of another tenant, since deleted), and prints the spread.
"""

from __future__ import annotations

import argparse
import csv
import time
import uuid
from datetime import date
from pathlib import Path

import common  # first: sets the environment before boto3 loads
import httpx  # noqa: E402

from shared import db  # noqa: E402
from shared.db import migrate  # noqa: E402
from tests.support import ad_exports, stack  # noqa: E402

BARE_STAGE = """CREATE TEMP TABLE bare_stage (row_number int, campaign_external_id text,
    campaign_name text, ad_set_external_id text, ad_set_name text, ad_external_id text,
    ad_name text, metric_date date, spend numeric, impressions bigint, clicks bigint,
    conversions numeric, currency text)"""
# The product's statements (worker/records/ad_metrics.sql) on typed columns, whole file at once.
BARE_UPSERTS = (
    """INSERT INTO campaigns AS c (tenant_id, platform, external_id, name)
    SELECT DISTINCT ON (campaign_external_id) %(tenant_id)s::uuid, 'meta', campaign_external_id,
           campaign_name
    FROM bare_stage ORDER BY campaign_external_id, row_number DESC
    ON CONFLICT ON CONSTRAINT campaigns_lookup_key DO UPDATE SET name = EXCLUDED.name
    WHERE c.name IS DISTINCT FROM EXCLUDED.name""",
    """INSERT INTO ad_sets AS a (tenant_id, platform, external_id, name, campaign_id)
    SELECT s.t, s.p, s.x, s.n, c.id FROM (
        SELECT DISTINCT ON (ad_set_external_id) %(tenant_id)s::uuid, 'meta',
               ad_set_external_id, ad_set_name, campaign_external_id
        FROM bare_stage ORDER BY ad_set_external_id, row_number DESC) s (t, p, x, n, cx)
    JOIN campaigns c ON c.tenant_id = s.t AND c.platform = 'meta' AND c.external_id = s.cx
         AND c.client_id IS NULL
    ON CONFLICT ON CONSTRAINT ad_sets_lookup_key DO UPDATE SET name = EXCLUDED.name
    WHERE a.name IS DISTINCT FROM EXCLUDED.name""",
    """INSERT INTO ads AS a (tenant_id, platform, external_id, name, ad_set_id)
    SELECT s.t, s.p, s.x, s.n, st.id FROM (
        SELECT DISTINCT ON (ad_external_id) %(tenant_id)s::uuid, 'meta', ad_external_id,
               ad_name, ad_set_external_id
        FROM bare_stage ORDER BY ad_external_id, row_number DESC) s (t, p, x, n, sx)
    JOIN ad_sets st ON st.tenant_id = s.t AND st.platform = 'meta' AND st.external_id = s.sx
         AND st.client_id IS NULL
    ON CONFLICT ON CONSTRAINT ads_lookup_key DO UPDATE SET name = EXCLUDED.name
    WHERE a.name IS DISTINCT FROM EXCLUDED.name""",
    """INSERT INTO daily_metrics AS m (tenant_id, platform, metric_date, campaign_id, ad_set_id,
                                      ad_id, spend, impressions, clicks, conversions, currency)
    SELECT %(tenant_id)s::uuid, 'meta', b.metric_date, c.id, s.id, a.id, b.spend,
           b.impressions, b.clicks, b.conversions, b.currency
    FROM bare_stage b
    JOIN campaigns c ON c.tenant_id = %(tenant_id)s AND c.platform = 'meta'
         AND c.external_id = b.campaign_external_id AND c.client_id IS NULL
    JOIN ad_sets s ON s.tenant_id = %(tenant_id)s AND s.platform = 'meta'
         AND s.external_id = b.ad_set_external_id AND s.client_id IS NULL
    JOIN ads a ON a.tenant_id = %(tenant_id)s AND a.platform = 'meta'
         AND a.external_id = b.ad_external_id AND a.client_id IS NULL
    ON CONFLICT ON CONSTRAINT daily_metrics_natural_key DO UPDATE
    SET spend = EXCLUDED.spend, impressions = EXCLUDED.impressions, clicks = EXCLUDED.clicks,
        conversions = EXCLUDED.conversions, currency = EXCLUDED.currency
    WHERE (m.spend, m.impressions, m.clicks, m.conversions, m.currency)
          IS DISTINCT FROM (EXCLUDED.spend, EXCLUDED.impressions, EXCLUDED.clicks,
                            EXCLUDED.conversions, EXCLUDED.currency)"""
)


def bare_rows(path: Path):  # type: ignore[no-untyped-def]
    """The export's rows, normalised with plain string operations."""
    def number(text: str) -> str:
        return text.strip().replace("$", "").replace(",", "") or "0"

    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader)]
        at = {h: header.index(h) for h in header}
        for number_, cells in enumerate(reader, start=1):
            spend = number(cells[at["Amount spent (USD)"]])
            if not spend.replace(".", "", 1).isdigit():
                continue
            yield (number_, cells[at["Campaign ID"]].strip(), cells[at["Campaign name"]].strip(),
                   cells[at["Ad set ID"]].strip(), cells[at["Ad set name"]].strip(),
                   cells[at["Ad ID"]].strip(), cells[at["Ad name"]].strip() or None,
                   cells[at["Day"]].strip(), spend, number(cells[at["Impressions"]]),
                   number(cells[at["Clicks (all)"]]), number(cells[at["Results"]]), "USD")


def bare(url: str, tenant_id: uuid.UUID, path: Path) -> tuple[float, int]:
    started = time.monotonic()
    with db.connect(url) as conn:
        conn.execute(BARE_STAGE)
        with conn.cursor().copy("COPY bare_stage FROM STDIN") as copy:
            for row in bare_rows(path):
                copy.write_row(row)
        copied = time.monotonic()
        steps = []
        conn.execute("ANALYZE bare_stage")
        written = 0
        for statement in BARE_UPSERTS:
            at = time.monotonic()
            # The facts upsert comes last: its count is the facts this file wrote (counting the
            # tenant's rows since a date also counted the warm-up file's day).
            written = conn.execute(statement, {"tenant_id": tenant_id}).rowcount
            steps.append(f"{time.monotonic() - at:.2f}")
        conn.commit()
    print(f"bare: read+normalise+COPY {copied - started:.2f} s, upserts "
          f"(campaigns, ad sets, ads, facts) {', '.join(steps)} s")
    return time.monotonic() - started, written


SEED_DIMENSIONS = (
    """INSERT INTO campaigns (tenant_id, platform, external_id, name)
    SELECT %(tenant_id)s, 'meta', '9' || lpad(i::text, 4, '0'), 'Campaign ' || i
    FROM generate_series(0, 49) i""",
    """INSERT INTO ad_sets (tenant_id, platform, external_id, name, campaign_id)
    SELECT %(tenant_id)s, 'meta', '8' || lpad(i::text, 5, '0'), 'Ad set ' || i, c.id
    FROM generate_series(0, 499) i JOIN campaigns c ON c.tenant_id = %(tenant_id)s
     AND c.platform = 'meta' AND c.external_id = '9' || lpad((i %% 50)::text, 4, '0')""",
    """INSERT INTO ads (tenant_id, platform, external_id, name, ad_set_id, campaign_id)
    SELECT %(tenant_id)s, 'meta', '7' || lpad(i::text, 6, '0'), 'Ad ' || i, s.id, s.campaign_id
    FROM generate_series(0, 4999) i JOIN ad_sets s ON s.tenant_id = %(tenant_id)s
     AND s.platform = 'meta' AND s.external_id = '8' || lpad((i %% 500)::text, 5, '0')""",
    """INSERT INTO daily_metrics (tenant_id, platform, metric_date, campaign_id, ad_set_id,
                               ad_id, spend, impressions, clicks, conversions, currency)
    SELECT %(tenant_id)s, 'meta', date '2025-01-01' + (i / 5000), a.campaign_id, a.ad_set_id,
           a.id, 10, 1000, 10, 1, 'USD'
    FROM generate_series(0, %(facts)s - 1) i JOIN ads a ON a.tenant_id = %(tenant_id)s
     AND a.platform = 'meta' AND a.external_id = '7' || lpad((i %% 5000)::text, 6, '0')""",
)


def seed(conn, tenants: list[uuid.UUID], facts: int) -> None:  # type: ignore[no-untyped-def]
    """The same stored dimensions and ``facts`` daily metrics (of 2025) for each tenant."""
    started = time.monotonic()
    for tenant_id in tenants:
        for statement in SEED_DIMENSIONS:
            conn.execute(statement, {"tenant_id": tenant_id, "facts": facts})
    conn.execute("VACUUM ANALYZE")
    print(f"seeded {facts:,} daily metrics and their 50 / 500 / 5,000 dimensions for each of "
          f"{len(tenants)} tenants ({time.monotonic() - started:.0f} s, not measured)")


def product(gateway: stack.Process, conn, token: str, data: bytes) -> tuple[float, dict]:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {token}"},
                      timeout=600) as client:
        response = client.post("/v1/imports", files={"file": ("meta-export.csv", data)},
                               data={"contract": "ad_metrics", "platform": "meta"})
    response.raise_for_status()
    batch_id = response.json()["batch_id"]
    while True:
        row = conn.execute("SELECT batch_id, status, rows_total, rows_invalid, daily_metrics_upserted, "
                           "campaigns_upserted, ad_sets_upserted, ads_upserted, "
                           "parse_duration_ms, db_duration_ms, rejection_reason "
                           "FROM import_batches WHERE batch_id = %s", (batch_id,)).fetchone()
        if row["status"] in ("completed", "partial", "failed"):
            return time.monotonic() - started, row
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000,
                        help="daily-metric rows: 5,000 ads x rows/5,000 days")
    parser.add_argument("--seed", type=int, default=500_000,
                        help="daily metrics each tenant holds already (default 500,000)")
    parser.add_argument("--statistics", action="store_true",
                        help="the import with no, fresh and stale statistics")
    args = parser.parse_args()
    days = max(1, args.rows // 5000)
    with common.stack("bench-ad-metrics-", durable=True) as (root, pg, moto):
        url = pg.ensure_database("bench")
        migrate.apply(url)
        env = common.stack_env(root, url, moto)
        with db.connect(url, autocommit=True) as conn:
            bare_tenant = common.BenchUser(conn, "bare").tenant_id
            user = common.BenchUser(conn, "product")
            seed(conn, [bare_tenant, user.tenant_id], args.seed)
            gateway = stack.start_gateway(env, root / "logs")
            worker = stack.spawn("worker", ["worker"], env, root / "logs")
            try:
                stack.wait_for_log(worker, "worker started", timeout=120)
                # Another batch in the stage (and its rows in both tenants), and statistics,
                # before anything is timed.
                warm = root / "warm.csv"
                warm.write_bytes(ad_exports.meta(
                    ad_exports.grid(50, 500, 5000, 1, start=date(2025, 12, 1))))
                product(gateway, conn, user.token(), warm.read_bytes())
                bare(url, bare_tenant, warm)
                conn.execute("ANALYZE")
                rss = common.RssPeak(worker.proc.pid)
                if args.statistics:
                    statistics(conn, gateway, user.token(), days, worker)
                else:
                    compare(root, url, conn, gateway, user.token(), bare_tenant, days, worker)
                print(rss.stop())
                print(common.load_average())
            finally:
                worker.stop()
                gateway.stop()


def compare(root: Path, url: str, conn, gateway: stack.Process, token: str,  # type: ignore[no-untyped-def]
            bare_tenant: uuid.UUID, days: int, worker: stack.Process) -> None:
    from records import stage_shares

    facts = ad_exports.grid(50, 500, 5000, days)
    data = ad_exports.meta(facts)
    path = root / "meta-export.csv"
    path.write_bytes(data)
    common.settle(conn)
    bare_s, bare_facts = bare(url, bare_tenant, path)
    common.settle(conn)
    product_s, row = product(gateway, conn, token, data)
    if row["status"] != "completed":
        print(f"product import {row['status']}: {row['rejection_reason']}")
        return
    rows = len(facts)
    print(f"{rows:,} daily-metric rows (50 campaigns / 500 ad sets / 5,000 ads x {days} days), "
          f"{len(data) / 2**20:.1f} MiB Meta export")
    print(f"{'bare s':>8} {'bare r/s':>9} {'product s':>10} {'prod r/s':>9} {'ratio':>6} "
          f"{'parse ms':>9} {'db ms':>7} {'facts':>8} {'campaigns':>9} {'ad sets':>8} {'ads':>6}")
    print(f"{bare_s:>8.2f} {rows / bare_s:>9,.0f} {product_s:>10.2f} {rows / product_s:>9,.0f} "
          f"{product_s / bare_s:>6.2f} {row['parse_duration_ms']:>9} {row['db_duration_ms']:>7} "
          f"{row['daily_metrics_upserted']:>8,} {row['campaigns_upserted']:>9} "
          f"{row['ad_sets_upserted']:>8} {row['ads_upserted']:>6}")
    print(stage_shares(worker, row["batch_id"]))
    assert bare_facts == row["daily_metrics_upserted"] == rows, (bare_facts, row)


def statistics(conn, gateway: stack.Process, token: str, days: int,  # type: ignore[no-untyped-def]
               worker: stack.Process) -> None:
    from records import IMPORT_TABLES, clear_statistics, stage_shares, stale_stage

    tables = (*IMPORT_TABLES, "import_staged_ad_metrics", "campaigns", "ad_sets", "ads", "daily_metrics")
    times: dict[str, float] = {}
    for number, mode in enumerate(("none", "fresh", "stale")):
        if mode == "none":
            clear_statistics(conn, tables)
        elif mode == "fresh":
            conn.execute("ANALYZE")
        else:
            stale_stage(conn, 5000 * days)
        facts = ad_exports.grid(50, 500, 5000, days, start=date(2026, 2, 1 + 8 * number))
        common.settle(conn)
        seconds, row = product(gateway, conn, token, ad_exports.meta(facts))
        assert row["status"] == "completed", row
        times[mode] = seconds
        print(f"statistics {mode:>5}: {len(facts):,} rows in {seconds:.1f} s "
              f"({len(facts) / seconds:,.0f} rows/s; parse {row['parse_duration_ms']:,} ms, "
              f"db {row['db_duration_ms']:,} ms)")
        print(f"  {stage_shares(worker, row['batch_id'])}")
    spread = max(times.values()) / min(times.values()) - 1
    print(f"spread between the three: {spread:.0%} (target: no import time changes by more than "
          f"20 %)")


if __name__ == "__main__":
    main()
