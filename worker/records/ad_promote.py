"""Promotion of an ad-metrics batch (staging-promotion-runtime.md §3.5, §8 step 3): campaigns →
ad sets → ads once for the whole batch, then daily or period metrics in groups of GROUP_ROWS
staged rows, all inside ONE transaction that also ends the batch and its run and writes the
IngestionCompleteEvent.

Before the budget, ``prepare`` reads the staged file as a whole: rows that repeat a fact and its
breakdown are errors (all of them: never the first one's spend for all), slices of one fact are
summed into one row (docs/decisions/0175). Entities are keyed by id, else by name path, and an
id seen later attaches to the entity its names made (0173).

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
from shared.contracts.model import Rule
from worker import runs
from worker.records import completion
from worker.records.promote import Counts
from worker.records.stage import Target

Q = db.load_queries(Path(__file__).with_name("ad_metrics.sql"))
RQ = db.load_queries(Path(__file__).with_name("records.sql"))

# A fact's figures that its slices add up to (ad_metrics.sql slice_sums).
SUMMED = ("spend", "impressions", "clicks", "conversions", "results")
# The spec's "batch size for promotion" (§5.3): bounds the facts statements' working set (a
# group of staged rows, each with its references looked up). The dimensions are written once
# for the whole batch, before the facts: each of their statements reads the batch's distinct
# entities (a Meta export repeats every ad once a day: per group, 5,000 ads were upserted
# again for each group of 10,000 rows). The whole promotion is one transaction either way
# (docs/decisions/0273, 0274). Each group resolves its references once (`refs`: 45–87 ms for
# a daily export's 5,550 entities, whatever the group's size), so a 20,000-row daily export
# is one group, not two (docs/decisions/0510).
GROUP_ROWS = 20_000
# A group's rows with their references (every staged column: a warned row's evidence) are
# sorted and read three times; at the default 4 MB they spilled to disk (5 MB per 10,000
# rows). Bounded by GROUP_ROWS, and SET LOCAL: it ends with the promotion's transaction.
WORK_MEM = "32MB"

# Spec §6.1 "FK not found": the fact is kept with a NULL reference and the row warned; rules
# of the published contract, so GET /v1/contracts/ad_metrics lists them.
AD_SET_NOT_FOUND = ad_metrics.AD_SET_NOT_FOUND
AD_NOT_FOUND = ad_metrics.AD_NOT_FOUND
# Each group's statements, in order: each level's ids adopted by name-only entities, then its
# upsert by id, then its name-only entities; then the facts.
LEVELS = (("campaigns_upserted", ("adopt_campaign_ids", "upsert_campaigns",
                                  "insert_named_campaigns")),
          ("ad_sets_upserted", ("adopt_ad_set_ids", "upsert_ad_sets", "insert_named_ad_sets")),
          ("ads_upserted", ("adopt_ad_ids", "upsert_ads", "insert_named_ads")))
FACTS = (("daily_metrics_upserted", "upsert_daily_metrics"),
         ("period_metrics_upserted", "upsert_period_metrics"))


def prepare(conn: db.Conn, target: Target) -> dict[str, int]:
    """Before the budget, in one transaction: rows repeating a fact and its breakdown, and facts
    whose slices sum beyond a fact's columns, become errors (and leave the stage); slices of one
    fact are summed into its first row. Running it again changes nothing."""
    params = {**target.keys}
    repeated = overflowing = 0
    merged = {"facts": 0, "slices": 0}
    with conn.transaction():
        if _one(conn.execute(Q["facts_to_prepare"], params).fetchone())["found"]:
            repeated = _reject(conn, params, "repeated_facts", None, ad_metrics.REPEATED)
            overflowing = _reject(conn, params, "overflowing_facts", "spend",
                                  ad_metrics.TOTAL_OUT_OF_RANGE)
            merged = _merge_slices(conn, params)
    return {"repeated_rows": repeated, "overflowing_rows": overflowing,
            "summed_facts": merged["facts"], "summed_slices": merged["slices"]}


def _merge_slices(conn: db.Conn, params: dict[str, Any]) -> dict[str, int]:
    """Each fact's slices summed into its first row (one statement for all facts)."""
    sums = conn.execute(Q["slice_sums"], params).fetchall()
    if not sums:
        return {"facts": 0, "slices": 0}
    return _one(conn.execute(Q["merge_slices"], {
        **params, "firsts": [s["first_row"] for s in sums],
        **{name: [s[name] for s in sums] for name in SUMMED},
        "indicators": [s["result_indicator"] for s in sums],
        "slices": [s["slices"] for s in sums],
        "aside": [row for s in sums for row in s["others"]]}).fetchone())


def _reject(conn: db.Conn, params: dict[str, Any], query: str, field: str | None,
            rule: Rule) -> int:
    """The rows ``query`` finds (one pass over the batch) leave the stage as errors of
    ``rule``, by primary key from the list (docs/decisions/0187)."""
    rows = [r["row_number"] for r in conn.execute(Q[query], params)]
    if not rows:
        return 0
    return conn.execute(Q["reject_rows"], {**params, "rows": rows, "field": field,
                                           "code": rule.code, "message": rule.message}).rowcount


def promote(conn: db.Conn, target: Target, contract: contracts.Contract,
            batch: dict[str, Any], counts: Counts, *, stats: dict[str, Any], db_ms_before: int,
            hold: Callable[[], None], group_rows: int = GROUP_ROWS) -> dict[str, int]:
    """staging_complete → promoting → completed | partial. ``hold`` is the test-only pause
    point, inside the transaction after the writes. A row promotion could not write (an
    ambiguous name) has its error, and the batch ends partial (DESIGN.md)."""
    started = time.monotonic()
    params: dict[str, Any] = {**target.keys, "client_id": batch["client_id"],
                              "platform": batch["platform"]}
    with conn.transaction():
        conn.execute(RQ["start_promoting"], target.keys)
        conn.execute("SELECT set_config('work_mem', %s, true)", (WORK_MEM,))
        written = write_groups(conn, params, group_rows)
        hold()
        facts = written.pop("facts")
        rejected = written.pop("rejected")
        result = {"inserted": facts["inserted"], "updated": facts["updated"],
                  "unchanged": facts["distinct_rows"] - facts["inserted"] - facts["updated"],
                  **written}
        partial = (batch["force_partial"] and counts.invalid) or rejected
        status = "partial" if partial else "completed"
        dates = _one(conn.execute(Q["affected_dates"], target.keys).fetchone())["dates"]
        db_ms = db_ms_before + round((time.monotonic() - started) * 1000)
        promoted = facts["distinct_rows"]
        # The commit's time, read last: completed_at, finished_at and the event's timestamp
        # say when the promotion ended, not when its transaction began.
        finished_at = completion.commit_time(conn)
        conn.execute(Q["finish_batch"], {
            **target.keys, "status": status, "inserted": result["inserted"],
            "updated": result["updated"], "unchanged": result["unchanged"],
            "campaigns": written["campaigns_upserted"], "ad_sets": written["ad_sets_upserted"],
            "ads": written["ads_upserted"], "daily_metrics": written["daily_metrics_upserted"],
            "period_metrics": written["period_metrics_upserted"], "dates": dates,
            "db_ms": db_ms, "finished_at": finished_at})
        completion.emit_ingestion_complete(
            conn, tenant_id=target.tenant_id, batch_id=target.batch_id, contract=contract.name,
            status=status, client_id=batch["client_id"], platform=batch["platform"],
            metrics={"total_rows": counts.total, "promoted_rows": promoted,
                     "failed_rows": counts.invalid + rejected, **written},
            affected_dates=list(dates), at=finished_at)
        done = conn.execute(RQ["succeed_run"], {
            "run_id": target.run_id, "tenant_id": target.tenant_id, "fence": target.fence,
            "finished_at": finished_at,
            "stats": Jsonb({**stats, **result, "status": status,
                            "promote_ms": db_ms - db_ms_before, "rows_total": counts.total,
                            "rows_invalid": counts.invalid, "rows_duplicate": counts.duplicate,
                            "rows_rejected_at_promotion": rejected,
                            "affected_dates": [d.isoformat() for d in dates]})}).fetchone()
        if done is None:
            raise runs.LeaseLost(f"run {target.run_id} is no longer ours to finish")
    return {**result, "partial": int(status == "partial")}


def write_groups(conn: db.Conn, params: dict[str, Any], group_rows: int) -> dict[str, Any]:
    """In the caller's transaction: the batch's dimensions, parent first, each entity once
    (the file's last row naming it wins), then the facts of every group in row order (with the
    warnings for parents still missing). Counts summed over the groups."""
    params = {**params, "key_prefix": key_prefix(params["tenant_id"], params["platform"],
                                                 params["client_id"])}
    upto = [r["upto"] for r in conn.execute(Q["groups"], {**params, "group_rows": group_rows})]
    totals = {counter: 0 for counter, _ in LEVELS} | {counter: 0 for counter, _ in FACTS}
    facts = {"distinct_rows": 0, "inserted": 0, "updated": 0}
    rejected = 0
    notes = {"ad_set_code": AD_SET_NOT_FOUND.code, "ad_set_message": AD_SET_NOT_FOUND.message,
             "ad_code": AD_NOT_FOUND.code, "ad_message": AD_NOT_FOUND.message,
             "ambiguous_code": ad_metrics.NAME_AMBIGUOUS.code,
             "ambiguous_message": ad_metrics.NAME_AMBIGUOUS.message,
             "repeated_code": ad_metrics.REPEATED.code,
             "repeated_message": ad_metrics.REPEATED.message}
    if upto:
        batch = {**params, "after": 0, "upto": upto[-1]}
        for counter, queries in LEVELS:
            for query in queries:
                totals[counter] += _one(conn.execute(Q[query], batch).fetchone())["n"]
    after = 0
    for last in upto:
        group = {**params, "after": after, "upto": last}
        for counter, query in FACTS:
            row = _one(conn.execute(Q[query], {**group, **notes}).fetchone())
            for key in facts:
                facts[key] += row[key]
            totals[counter] += row["inserted"] + row["updated"]
            rejected += row["rejected"]
        after = last
    return {**totals, "facts": facts, "rejected": rejected}


def key_prefix(tenant_id: Any, platform: str, client_id: Any) -> str:
    """The dimensions' lookup_key up to the external id (migrations/0021_ad_metrics.sql)."""
    return f"{tenant_id}|{platform}|{client_id or ''}|"


def _one(row: dict[str, Any] | None) -> dict[str, Any]:
    assert row is not None, "an aggregate query returns one row"
    return row
