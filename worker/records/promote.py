"""Budget and promotion: decide over the whole staged file, then write the production tables
in slices that nobody sees until one last transaction ends the batch (docs/decisions/0180).

- ``finish_staging``: processing → staging_complete with the counts and the within-file
  duplicates flagged and warned, in one transaction.
- ``check_budget``: over budget fails the batch before any production write.
- ``promote``: staging_complete → promoting, then slices of SLICE_ROWS row numbers, each one
  transaction that inserts the slice's new records (and, for plaintiffs, links and
  warnings), marks the rows whose key is stored already (the amends), and moves the batch's
  promoted_upto. Rows written carry the batch's id, and readers see a row only once its
  batch is completed or partial. Then the flip: the amends upserted, the batch completed, the
  run succeeded and the IngestionCompleteEvent, in one transaction.

Idempotent and resumable like staging (docs/decisions/0095): a takeover in `promoting` resumes
after promoted_upto; a promotion that starts over first removes what an earlier try inserted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

from shared import contracts, db
from shared.contracts import codes, plaintiffs
from worker import runs
from worker.records.completion import emit_ingestion_complete
from worker.records.parse import BatchRejected
from worker.records.stage import Target

Q = db.load_queries(Path(__file__).with_name("records.sql"))

# A plaintiff whose case number names no judgment of the tenant (docs/decisions/0096): a rule
# of the published contract, so GET /v1/contracts/plaintiffs lists what this writes.
PLAINTIFF_JUDGMENT_NOT_FOUND = plaintiffs.CASE_NUMBER_NOT_FOUND
BUDGET_CODE = codes.BATCH_ERROR_BUDGET_EXCEEDED
# Row numbers per slice transaction: a few seconds of index work on a table that holds
# millions of rows, so no transaction over live tables lasts long (docs/decisions/0180).
SLICE_ROWS = 10_000
# Which within-file duplicate statement keys each contract's rows (records.sql).
REPEATS = {"judgments": "judgment_repeats", "plaintiffs": "plaintiff_repeats"}


@dataclass(frozen=True)
class Counts:
    total: int
    invalid: int
    duplicate: int

    @property
    def distinct(self) -> int:
        """Valid rows that are not a repeat of an earlier row's key: what promotion writes."""
        return self.total - self.invalid - self.duplicate


@dataclass(frozen=True)
class Statements:
    """A records contract's promotion: its slice insert, its amends finder, its flip upsert."""

    insert: str
    amends: str
    upsert: str
    links: bool = False


PROMOTIONS = {
    "judgments": Statements("insert_judgments", "judgment_amends", "upsert_judgments"),
    "plaintiffs": Statements("insert_plaintiffs", "plaintiff_amends", "upsert_plaintiffs",
                             links=True),
}


def finish_staging(conn: db.Conn, target: Target, contract: contracts.Contract,
                   total: int, parse_ms: int) -> Counts:
    """processing → staging_complete with the file's counts, and the within-file duplicates
    flagged and recorded as warnings, in one transaction (so a takeover never records them
    twice)."""
    repeats = REPEATS.get(contract.name, "staged_repeats")
    with conn.transaction():
        invalid = _one(conn.execute(Q["count_invalid"], target.keys).fetchone())["invalid"]
        rows = [r["row_number"] for r in conn.execute(Q[repeats], target.keys)]
        if rows:
            conn.execute(Q["flag_duplicates"], {
                **target.keys, "rows": rows, "code": contract.duplicate.code,
                "message": contract.duplicate.message})
        done = conn.execute(Q["staging_complete"], {
            **target.keys, "run_id": target.run_id, "fence": target.fence, "total": total,
            "invalid": invalid, "duplicate": len(rows), "parse_ms": parse_ms}).fetchone()
        if done is None:
            raise runs.LeaseLost(f"batch {target.batch_id} is no longer ours to finish staging")
    return Counts(total, invalid, len(rows))


def check_budget(counts: Counts, threshold: Decimal, force_partial: bool) -> None:
    """Over budget (invalid % strictly above the threshold) fails the batch before any
    production write, unless force_partial; a file with no valid row at all cannot complete."""
    rate = Decimal(counts.invalid * 100) / counts.total if counts.total else Decimal(0)
    if rate > threshold and not force_partial:
        reason = (f"Error rate {rate:.1f}% exceeded limit {threshold:.1f}% "
                  f"({counts.invalid}/{counts.total} rows invalid)")
        raise BatchRejected(reason, stage="budget", code=BUDGET_CODE)


def promote(conn: db.Conn, target: Target, contract: contracts.Contract,
            batch: dict[str, Any], counts: Counts, *, stats: dict[str, Any], db_ms_before: int,
            hold: Callable[[], None],
            tick: Callable[[float], None] = lambda _done: None) -> dict[str, int]:
    """staging_complete | promoting → completed | partial: the slices, then the flip.
    ``tick`` is called between slices with the share done (progress, lease and shutdown
    checks); ``hold`` is the test-only pause point, inside the flip after its writes."""
    started = time.monotonic()
    statements = PROMOTIONS[contract.name]
    params = {**target.keys, "run_id": target.run_id, "fence": target.fence,
              "source": batch["source"], "source_reference": batch["source_reference"]}
    after = _begin(conn, params)
    while after < counts.total:
        upto = min(after + SLICE_ROWS, counts.total)
        _slice(conn, statements, {**params, "after": after, "upto": upto})
        after = upto
        tick(after / counts.total)
    with conn.transaction():
        written = _one(conn.execute(Q[statements.upsert], params).fetchone())
        hold()
        status = "partial" if batch["force_partial"] and counts.invalid else "completed"
        db_ms = db_ms_before + round((time.monotonic() - started) * 1000)
        result = _one(conn.execute(Q["finish_batch"], {
            **target.keys, "status": status, "inserted": written["inserted"],
            "updated": written["updated"], "distinct": counts.distinct,
            "db_ms": db_ms}).fetchone())
        done = conn.execute(Q["succeed_run"], {
            "run_id": target.run_id, "tenant_id": target.tenant_id, "fence": target.fence,
            "stats": Jsonb({**stats, **result, "status": status, "rows_total": counts.total,
                            "rows_invalid": counts.invalid,
                            "rows_duplicate": counts.duplicate})}).fetchone()
        if done is None:
            raise runs.LeaseLost(f"run {target.run_id} is no longer ours to finish")
        # The IngestionCompleteEvent commits with the status (docs/decisions/0152).
        emit_ingestion_complete(
            conn, tenant_id=target.tenant_id, batch_id=target.batch_id, contract=contract.name,
            status=status, client_id=None, platform=None, affected_dates=[], metrics={
                "total_rows": counts.total, "promoted_rows": counts.distinct,
                "failed_rows": counts.invalid,
                f"{contract.name}_upserted": result["rows_inserted"] + result["rows_updated"]})
    return {"inserted": result["rows_inserted"], "updated": result["rows_updated"],
            "unchanged": result["rows_unchanged"], "partial": int(status == "partial")}


def _begin(conn: db.Conn, params: dict[str, Any]) -> int:
    """promoting, fenced; where the slices resume. Starting from the first slice, whatever an
    earlier try of the batch inserted is removed first, in the same transaction."""
    with conn.transaction():
        row = conn.execute(Q["begin_promotion"], params).fetchone()
        if row is None:
            raise runs.LeaseLost(f"batch {params['batch_id']} is no longer ours to promote")
        if row["promoted_upto"] == 0:
            conn.execute(Q["forget_promoted"], params)
    return int(row["promoted_upto"])


def _slice(conn: db.Conn, statements: Statements, params: dict[str, Any]) -> None:
    """One slice in one transaction: its new records, its amends marked for the flip, its
    links and warnings (plaintiffs), and the cursor; LeaseLost (rolled back) if the batch or
    the run is no longer ours."""
    with conn.transaction():
        counted = _one(conn.execute(Q[statements.insert], params).fetchone())
        if counted["inserted"] < counted["candidates"]:
            rows = [r["row_number"] for r in conn.execute(Q[statements.amends], params)]
            if rows:
                conn.execute(Q["mark_amends"], {**params, "rows": rows})
        if statements.links:
            conn.execute(Q["link_plaintiffs"], params)
            conn.execute(Q["unlinked_plaintiffs"], {
                **params, "code": PLAINTIFF_JUDGMENT_NOT_FOUND.code,
                "message": PLAINTIFF_JUDGMENT_NOT_FOUND.message})
        moved = conn.execute(Q["advance_promotion"], {
            **params, "inserted": counted["inserted"]}).fetchone()
        if moved is None:
            raise runs.LeaseLost(f"batch {params['batch_id']} is no longer ours to promote")


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
