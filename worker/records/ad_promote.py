"""Promotion of an ad-metrics batch (staging-promotion-runtime.md §3.5, §8 step 3): campaigns →
ad sets → ads → daily metrics, in groups of GROUP_ROWS staged rows, every group inside ONE
transaction that also ends the batch and its run and writes the IngestionCompleteEvent.

Idempotent like the records promotion (docs/decisions/0095): the upserts change only rows whose
values differ and everything commits together, so a takeover in `promoting` runs it again and
finds either nothing done (rolled back) or the batch already final. docs/decisions/0149.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

from shared import contracts, db
from shared.contracts import ad_metrics
from worker import runs
from worker.records import completion
from worker.records.promote import Counts
from worker.records.stage import Target

Q = db.load_queries(Path(__file__).with_name("ad_metrics.sql"))
RQ = db.load_queries(Path(__file__).with_name("records.sql"))

# The spec's "batch size for promotion" (§5.3): bounds each statement's working set.
GROUP_ROWS = 1000

# Spec §6.1 "FK not found": the fact is kept with a NULL reference and the row warned; rules
# of the published contract, so GET /v1/contracts/ad_metrics lists them.
AD_SET_NOT_FOUND = ad_metrics.AD_SET_NOT_FOUND
AD_NOT_FOUND = ad_metrics.AD_NOT_FOUND


def promote(conn: db.Conn, target: Target, contract: contracts.Contract,
            batch: dict[str, Any], counts: Counts, *, stats: dict[str, Any], db_ms_before: int,
            hold: Callable[[], None], group_rows: int = GROUP_ROWS) -> dict[str, int]:
    """staging_complete → promoting → completed | partial. ``hold`` is the test-only pause
    point, inside the transaction after the writes."""
    started = time.monotonic()
    params: dict[str, Any] = {**target.keys, "client_id": batch["client_id"],
                              "platform": batch["platform"]}
    with conn.transaction():
        conn.execute(RQ["start_promoting"], target.keys)
        written = write_groups(conn, params, group_rows)
        hold()
        facts = written.pop("facts")
        result = {"inserted": facts["inserted"], "updated": facts["updated"],
                  "unchanged": facts["distinct_rows"] - facts["inserted"] - facts["updated"],
                  **written}
        status = "partial" if batch["force_partial"] and counts.invalid else "completed"
        dates = _one(conn.execute(Q["affected_dates"], target.keys).fetchone())["dates"]
        db_ms = db_ms_before + round((time.monotonic() - started) * 1000)
        conn.execute(Q["finish_batch"], {
            **target.keys, "status": status, "inserted": result["inserted"],
            "updated": result["updated"], "unchanged": result["unchanged"],
            "campaigns": written["campaigns_upserted"], "ad_sets": written["ad_sets_upserted"],
            "ads": written["ads_upserted"], "daily_metrics": written["daily_metrics_upserted"],
            "dates": dates, "db_ms": db_ms})
        promoted = facts["distinct_rows"]
        completion.emit_ingestion_complete(
            conn, tenant_id=target.tenant_id, batch_id=target.batch_id, contract=contract.name,
            status=status, client_id=batch["client_id"], platform=batch["platform"],
            metrics={"total_rows": counts.total, "promoted_rows": promoted,
                     "failed_rows": counts.invalid, **written},
            affected_dates=list(dates))
        done = conn.execute(RQ["succeed_run"], {
            "run_id": target.run_id, "tenant_id": target.tenant_id, "fence": target.fence,
            "stats": Jsonb({**stats, **result, "status": status, "rows_total": counts.total,
                            "rows_invalid": counts.invalid, "rows_duplicate": counts.duplicate,
                            "affected_dates": [d.isoformat() for d in dates]})}).fetchone()
        if done is None:
            raise runs.LeaseLost(f"run {target.run_id} is no longer ours to finish")
    return {**result, "partial": int(status == "partial")}


def write_groups(conn: db.Conn, params: dict[str, Any], group_rows: int) -> dict[str, Any]:
    """Every group in row order, in the caller's transaction: dimensions parent first, then
    the facts (with the warnings for parents still missing). Counts summed over the groups."""
    params = {**params, "key_prefix": key_prefix(params["tenant_id"], params["platform"],
                                                 params["client_id"])}
    upto = [r["upto"] for r in conn.execute(Q["groups"], {**params, "group_rows": group_rows})]
    totals = {"campaigns_upserted": 0, "ad_sets_upserted": 0, "ads_upserted": 0,
              "daily_metrics_upserted": 0}
    facts = {"distinct_rows": 0, "inserted": 0, "updated": 0}
    warnings = {"ad_set_code": AD_SET_NOT_FOUND.code, "ad_set_message": AD_SET_NOT_FOUND.message,
                "ad_code": AD_NOT_FOUND.code, "ad_message": AD_NOT_FOUND.message}
    after = 0
    for last in upto:
        group = {**params, "after": after, "upto": last}
        for query, counter in (("upsert_campaigns", "campaigns_upserted"),
                               ("upsert_ad_sets", "ad_sets_upserted"),
                               ("upsert_ads", "ads_upserted")):
            totals[counter] += _one(conn.execute(Q[query], group).fetchone())["n"]
        row = _one(conn.execute(Q["upsert_daily_metrics"], {**group, **warnings}).fetchone())
        for key in facts:
            facts[key] += row[key]
        after = last
    totals["daily_metrics_upserted"] = facts["inserted"] + facts["updated"]
    return {**totals, "facts": facts}


def key_prefix(tenant_id: Any, platform: str, client_id: Any) -> str:
    """The dimensions' lookup_key up to the external id (migrations/0021_ad_metrics.sql)."""
    return f"{tenant_id}|{platform}|{client_id or ''}|"


def _one(row: dict[str, Any] | None) -> dict[str, Any]:
    assert row is not None, "an aggregate query returns one row"
    return row
