"""Benchmark ad-metrics imports: a bare staged-upsert script against the product, same machine,
same run (issue 13; target: the product within 2x of the bare script).

    python bench/ad_metrics.py              # 100,000 rows: 50 campaigns / 500 ad sets / 5,000 ads
    python bench/ad_metrics.py --rows 20000

The file is a Meta Ads Manager daily export (tests/support/ad_exports.py): 5,000 ads x 20 days.
The bare script: read the CSV, normalise each row with the meta contract, COPY the rows into a
temp table, then the same set-based upserts (campaigns → ad sets → ads → daily metrics, each
de-duplicated, references joined on external ids), one transaction; nothing else. The product:
`POST /v1/imports` on a real gateway, the outbox relay, SQS (moto), a real worker process
(staging, budget, promotion in 1,000-row groups, the event), until the batch is completed.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
import uuid
from pathlib import Path

import common  # first: sets the environment before boto3 loads
import httpx  # noqa: E402

from gateway import auth  # noqa: E402
from shared import contracts, db  # noqa: E402
from shared.contracts import ad_metrics  # noqa: E402
from shared.db import migrate  # noqa: E402
from tests.support import ad_exports, stack  # noqa: E402

FIELDS = ("campaign_external_id", "campaign_name", "ad_set_external_id", "ad_set_name",
          "ad_external_id", "ad_name", "metric_date", "spend", "impressions", "clicks",
          "conversions", "currency")
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
    ON CONFLICT ON CONSTRAINT campaigns_natural_key DO UPDATE SET name = EXCLUDED.name
    WHERE c.name IS DISTINCT FROM EXCLUDED.name""",
    """INSERT INTO ad_sets AS a (tenant_id, platform, external_id, name, campaign_id)
    SELECT s.t, s.p, s.x, s.n, c.id FROM (
        SELECT DISTINCT ON (ad_set_external_id) %(tenant_id)s::uuid, 'meta',
               ad_set_external_id, ad_set_name, campaign_external_id
        FROM bare_stage ORDER BY ad_set_external_id, row_number DESC) s (t, p, x, n, cx)
    JOIN campaigns c ON c.tenant_id = s.t AND c.platform = 'meta' AND c.external_id = s.cx
         AND c.client_id IS NULL
    ON CONFLICT ON CONSTRAINT ad_sets_natural_key DO UPDATE SET name = EXCLUDED.name
    WHERE a.name IS DISTINCT FROM EXCLUDED.name""",
    """INSERT INTO ads AS a (tenant_id, platform, external_id, name, ad_set_id)
    SELECT s.t, s.p, s.x, s.n, st.id FROM (
        SELECT DISTINCT ON (ad_external_id) %(tenant_id)s::uuid, 'meta', ad_external_id,
               ad_name, ad_set_external_id
        FROM bare_stage ORDER BY ad_external_id, row_number DESC) s (t, p, x, n, sx)
    JOIN ad_sets st ON st.tenant_id = s.t AND st.platform = 'meta' AND st.external_id = s.sx
         AND st.client_id IS NULL
    ON CONFLICT ON CONSTRAINT ads_natural_key DO UPDATE SET name = EXCLUDED.name
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


def bare(url: str, tenant_id: uuid.UUID, path: Path) -> tuple[float, int]:
    started = time.monotonic()
    contract = ad_metrics.for_platform("meta")
    with db.connect(url) as conn, open(path, encoding="utf-8-sig", newline="") as fh:
        conn.execute(BARE_STAGE)
        reader = csv.reader(fh)
        match = contracts.match_header(contract, next(reader))
        with conn.cursor().copy("COPY bare_stage FROM STDIN") as copy:
            for number, row in enumerate(reader, start=1):
                result = contracts.validate_row(contract, row, match, number)
                if result.valid:
                    copy.write_row((number, *(result.values.get(f) for f in FIELDS)))
        copied = time.monotonic()
        steps = []
        # Fresh tables have no statistics: without them the planner nests loops over the
        # dimensions (the product looks references up per row instead, ad_metrics.sql).
        conn.execute("ANALYZE bare_stage")
        for table, statement in zip(("campaigns", "ad_sets", "ads", None), BARE_UPSERTS,
                                    strict=True):
            at = time.monotonic()
            conn.execute(statement, {"tenant_id": tenant_id})
            if table:
                conn.execute(f"ANALYZE {table}")
            steps.append(f"{time.monotonic() - at:.2f}")
        print(f"bare: read+validate+COPY {copied - started:.2f} s, upserts "
              f"(campaigns, ad sets, ads, facts) {', '.join(steps)} s")
        facts = conn.execute("SELECT count(*) AS n FROM daily_metrics WHERE tenant_id = %s",
                             (tenant_id,)).fetchone()["n"]
        conn.commit()
    return time.monotonic() - started, facts


def product(gateway: stack.Process, conn, token: str, data: bytes) -> tuple[float, dict]:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {token}"},
                      timeout=600) as client:
        response = client.post("/v1/imports", files={"file": ("meta-export.csv", data)},
                               data={"contract": "ad_metrics", "platform": "meta"})
    response.raise_for_status()
    batch_id = response.json()["batch_id"]
    while True:
        row = conn.execute("SELECT status, rows_total, rows_invalid, daily_metrics_upserted, "
                           "campaigns_upserted, ad_sets_upserted, ads_upserted, "
                           "parse_duration_ms, db_duration_ms, rejection_reason "
                           "FROM import_batches WHERE batch_id = %s", (batch_id,)).fetchone()
        if row["status"] in ("completed", "partial", "failed"):
            return time.monotonic() - started, row
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000,
                        help="daily-metric rows: 5,000 ads x rows/5,000 days")
    args = parser.parse_args()
    days = max(1, args.rows // 5000)
    facts = ad_exports.grid(50, 500, 5000, days)
    data = ad_exports.meta(facts)
    with common.stack("bench-ad-metrics-") as (root, pg, moto):
        url = pg.ensure_database("bench")
        migrate.apply(url)
        env = common.stack_env(root, url, moto)
        path = root / "meta-export.csv"
        path.write_bytes(data)
        with db.connect(url, autocommit=True) as conn:
            bare_tenant, product_tenant = (
                conn.execute("INSERT INTO tenants (name) VALUES (%s) RETURNING tenant_id",
                             (name,)).fetchone()["tenant_id"] for name in ("bare", "product"))
            user_id = conn.execute(
                "INSERT INTO users (tenant_id, email, password_hash, role) VALUES "
                "(%s, 'bench@bench.test', 'x', 'admin') RETURNING user_id",
                (product_tenant,)).fetchone()["user_id"]
            token = auth.issue_token(auth.Principal(user_id, product_tenant, "admin"),
                                     stack.TEST_JWT_SECRET, 1)
            gateway = stack.start_gateway(env, root / "logs")
            worker = stack.spawn("worker", ["worker"], env, root / "logs")
            try:
                stack.wait_for_log(worker, "worker started", timeout=120)
                bare_s, bare_facts = bare(url, bare_tenant, path)
                product_s, row = product(gateway, conn, token, data)
                if row["status"] != "completed":
                    print(f"product import {row['status']}: {row['rejection_reason']}")
                    print(worker.logs()[-3000:])
                    return
                print(f"{len(facts):,} daily-metric rows (50 campaigns / 500 ad sets / 5,000 "
                      f"ads x {days} days), {len(data) / 2**20:.1f} MiB Meta export")
                print(f"{'bare s':>8} {'product s':>10} {'ratio':>6} {'parse ms':>9} "
                      f"{'db ms':>7} {'facts':>8} {'campaigns':>9} {'ad sets':>8} {'ads':>6}")
                print(f"{bare_s:>8.2f} {product_s:>10.2f} {product_s / bare_s:>6.2f} "
                      f"{row['parse_duration_ms']:>9} {row['db_duration_ms']:>7} "
                      f"{row['daily_metrics_upserted']:>8,} {row['campaigns_upserted']:>9} "
                      f"{row['ad_sets_upserted']:>8} {row['ads_upserted']:>6}")
                print("load average (1, 5, 15 min): "
                      + ", ".join(f"{v:.2f}" for v in os.getloadavg()))
                assert bare_facts == row["daily_metrics_upserted"] == len(facts), (bare_facts, row)
            finally:
                worker.stop()
                gateway.stop()


if __name__ == "__main__":
    main()
