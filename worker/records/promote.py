"""Budget and promotion: decide over the whole staged file, then write production tables in
ONE transaction, set-based, and end the batch and its run in that same transaction.

Promotion is idempotent: duplicates were found once (in the staging_complete transaction), the
upserts change only rows whose values differ, links and warnings are written inside the one
transaction. A takeover in `promoting` simply runs it again (docs/decisions/0095).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_DOWN, Decimal
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

from shared import contracts, db
from shared.contracts import codes, plaintiffs
from worker import runs
from worker.records.completion import commit_time, emit_ingestion_complete
from worker.records.parse import BatchRejected
from worker.records.stage import Target

Q = db.load_queries(Path(__file__).with_name("records.sql"))

# A plaintiff whose case number names no judgment of the tenant (docs/decisions/0096): a rule
# of the published contract, so GET /v1/contracts/plaintiffs lists what this writes.
PLAINTIFF_JUDGMENT_NOT_FOUND = plaintiffs.CASE_NUMBER_NOT_FOUND
BUDGET_CODE = codes.BATCH_ERROR_BUDGET_EXCEEDED


@dataclass(frozen=True)
class Counts:
    total: int
    invalid: int
    duplicate: int


def finish_staging(conn: db.Conn, target: Target, contract: contracts.Contract,
                   total: int, parse_ms: int) -> Counts:
    """processing → staging_complete with the file's counts, and the within-file duplicates
    recorded as warnings, in one transaction (so a takeover never records them twice)."""
    dup_query = {"judgments": "judgment_duplicates",
                 "plaintiffs": "plaintiff_duplicates"}.get(contract.name, "staged_duplicates")
    with conn.transaction():
        invalid = _one(conn.execute(Q["count_invalid"], target.keys).fetchone())["invalid"]
        duplicate = conn.execute(Q[dup_query], {
            **target.keys, "code": contract.duplicate.code,
            "message": contract.duplicate.message}).rowcount
        done = conn.execute(Q["staging_complete"], {
            **target.keys, "run_id": target.run_id, "fence": target.fence, "total": total,
            "invalid": invalid, "duplicate": duplicate, "parse_ms": parse_ms}).fetchone()
        if done is None:
            raise runs.LeaseLost(f"batch {target.batch_id} is no longer ours to finish staging")
    return Counts(total, invalid, duplicate)


def check_budget(counts: Counts, threshold: Decimal, force_partial: bool) -> None:
    """Over budget (invalid % strictly above the threshold) fails the batch before any
    production write, unless force_partial; a file with no valid row at all cannot complete,
    whatever the threshold or force_partial (spec §7.2)."""
    if counts.total and counts.invalid >= counts.total:
        rule = codes.NO_VALID_ROWS
        reason = (f"None of the file's {counts.total:,} rows is valid, so nothing can be "
                  "promoted; see the row errors.")
        raise BatchRejected(reason, stage="budget", code=rule.code,
                            issues=[contracts.Issue(None, None, rule.code, rule.severity, reason)])
    rate = Decimal(counts.invalid * 100) / counts.total if counts.total else Decimal(0)
    if rate > threshold and not force_partial:
        raise BatchRejected(budget_reason(counts, threshold), stage="budget", code=BUDGET_CODE)


def budget_reason(counts: Counts, threshold: Decimal) -> str:
    """`10.01 % (1,001 of 10,000 rows) exceeded the limit of 10 %`: the rate with as few
    decimals as show it above the limit (two at least where it is not whole)."""
    rate = Decimal(counts.invalid * 100) / counts.total
    shown = _percent(rate, 2)
    for places in range(3, 9):
        if Decimal(shown) > threshold:
            break
        shown = _percent(rate, places)
    return (f"{shown} % ({counts.invalid:,} of {counts.total:,} rows) exceeded the limit of "
            f"{_percent(threshold, 2)} %")


def _percent(value: Decimal, places: int) -> str:
    """`10.01`, `10`, `12.5`: rounded down to ``places``, trailing zeros dropped."""
    text = f"{value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_DOWN):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def promote(conn: db.Conn, target: Target, contract: contracts.Contract,
            batch: dict[str, Any], counts: Counts, *, stats: dict[str, Any], db_ms_before: int,
            hold: Callable[[], None]) -> dict[str, int]:
    """staging_complete → promoting → completed | partial, the writes and the run's success
    in one transaction. ``hold`` is the test-only pause point, inside the transaction."""
    started = time.monotonic()
    params = {**target.keys, "source": batch["source"],
              "source_reference": batch["source_reference"]}
    with conn.transaction():
        conn.execute(Q["start_promoting"], target.keys)
        if contract.name == "judgments":
            written = _one(conn.execute(Q["upsert_judgments"], params).fetchone())
        else:
            written = _one(conn.execute(Q["upsert_plaintiffs"], params).fetchone())
            conn.execute(Q["link_plaintiffs"], params)
            conn.execute(Q["unlinked_plaintiffs"], {
                **params, "code": PLAINTIFF_JUDGMENT_NOT_FOUND.code,
                "message": PLAINTIFF_JUDGMENT_NOT_FOUND.message})
        hold()
        result = {"inserted": written["inserted"], "updated": written["updated"],
                  "unchanged": written["distinct_rows"] - written["inserted"] - written["updated"]}
        status = "partial" if batch["force_partial"] and counts.invalid else "completed"
        db_ms = db_ms_before + round((time.monotonic() - started) * 1000)
        finished_at = commit_time(conn)  # the end, not the transaction's start (now())
        conn.execute(Q["finish_batch"], {**target.keys, **result, "status": status,
                                         "db_ms": db_ms, "finished_at": finished_at})
        done = conn.execute(Q["succeed_run"], {
            "run_id": target.run_id, "tenant_id": target.tenant_id, "fence": target.fence,
            "finished_at": finished_at,
            "stats": Jsonb({**stats, **result, "status": status, "rows_total": counts.total,
                            "rows_invalid": counts.invalid,
                            "rows_duplicate": counts.duplicate})}).fetchone()
        if done is None:
            raise runs.LeaseLost(f"run {target.run_id} is no longer ours to finish")
        # The IngestionCompleteEvent commits with the status (docs/decisions/0152).
        emit_ingestion_complete(
            conn, tenant_id=target.tenant_id, batch_id=target.batch_id, contract=contract.name,
            status=status, client_id=None, platform=None, affected_dates=[], metrics={
                "total_rows": counts.total, "promoted_rows": written["distinct_rows"],
                "failed_rows": counts.invalid,
                f"{contract.name}_upserted": result["inserted"] + result["updated"]},
            at=finished_at)
    return {**result, "partial": int(status == "partial")}


def fail(conn: db.Conn, target: Target, reason: str, stage: str,
         stats: dict[str, Any], issues: list[contracts.Issue], code: str) -> bool:
    """The batch and its run failed, with the reason and the file-level issues, in one
    transaction; False (nothing written) when the run is no longer ours."""
    try:
        with conn.transaction():
            _fail(conn, target, reason, stage, stats, issues, code)
    except _NotOurs:
        return False
    return True


def _fail(conn: db.Conn, target: Target, reason: str, stage: str,
          stats: dict[str, Any], issues: list[contracts.Issue], code: str) -> None:
    if issues:
        with conn.cursor().copy("COPY import_row_errors (tenant_id, batch_id, row_number, "
                                "field, code, severity, message) FROM STDIN") as copy:
            for i in issues:
                copy.write_row((target.tenant_id, target.batch_id, 0, i.field, i.code,
                                i.severity.value, i.message))
    conn.execute(Q["fail_batch"], {**target.keys, "reason": reason})
    done = conn.execute(Q["fail_run"], {
        "run_id": target.run_id, "tenant_id": target.tenant_id, "fence": target.fence,
        "error": reason, "error_code": code, "stats": Jsonb(stats), "stage": stage}).fetchone()
    if done is None:
        raise _NotOurs  # rolls the batch back too: whoever owns the run decides


def _one(row: dict[str, Any] | None) -> dict[str, Any]:
    assert row is not None, "an aggregate query returns one row"
    return row


class _NotOurs(Exception):
    pass
