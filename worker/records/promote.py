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

- ``Ahead``: the same slices, promoted on a connection of their own while the rest of the
  file is still read, validated and staged (docs/decisions/0273): Postgres writes one slice
  while Python validates the next chunk, on the other core.

Idempotent and resumable like staging (docs/decisions/0095): a takeover in `promoting` (or in
`processing`, after slices ahead) resumes after promoted_upto; a promotion that starts over
first removes what an earlier try inserted, and so does a batch that fails.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import ROUND_DOWN, Decimal
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from shared import contracts, db
from shared.contracts import codes, judgments, plaintiffs
from worker import runs
from worker.records.completion import commit_time, emit_ingestion_complete
from worker.records.parse import BatchRejected
from worker.records.stage import STAGES, Target

Q = db.load_queries(Path(__file__).with_name("records.sql"))

# A plaintiff whose case number names no judgment of the tenant (docs/decisions/0096): a rule
# of the published contract, so GET /v1/contracts/plaintiffs lists what this writes.
PLAINTIFF_JUDGMENT_NOT_FOUND = plaintiffs.CASE_NUMBER_NOT_FOUND
BUDGET_CODE = codes.BATCH_ERROR_BUDGET_EXCEEDED
# Row numbers per slice transaction: a few seconds of index work on a table that holds
# millions of rows, so no transaction over live tables lasts long (docs/decisions/0180).
SLICE_ROWS = 10_000
# Connections that write the slices left once staging has ended, at once (docs/decisions/0390):
# the file is read and staged by then, so the core that ran Python writes a slice too.
SIDE_BY_SIDE = 2


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
    """A records contract's promotion: its slice insert, its amends marker, its flip upsert,
    the table they write and the rule of a row that table refuses."""

    insert: str
    amends: str
    upsert: str
    table: str
    refused: contracts.Rule
    links: bool = False
    # Slices that may be written side by side (docs/decisions/0390): judgments' slices touch
    # only their own keys; plaintiffs' may link one plaintiff to one judgment twice.
    side_by_side: bool = False


PROMOTIONS = {
    "judgments": Statements("insert_judgments", "judgment_amends", "upsert_judgments",
                            "judgments", judgments.NOT_STORED, side_by_side=True),
    "plaintiffs": Statements("insert_plaintiffs", "plaintiff_amends", "upsert_plaintiffs",
                             "plaintiffs", plaintiffs.NOT_STORED, links=True),
}
# What the database says of one row's values (a check, a NOT NULL, a number too large, a
# date out of range): that row is refused, the others promoted (docs/decisions/0186).
ROW_REFUSALS = (psycopg.errors.IntegrityError, psycopg.errors.DataError)


def on_stage(query: str, contract: contracts.Contract) -> sql.Composed:
    """A records.sql statement that names {stage}, on the contract's typed stage."""
    return sql.SQL(Q[query]).format(stage=sql.Identifier(STAGES[contract.name]))  # type: ignore[arg-type]


def finish_staging(conn: db.Conn, target: Target, contract: contracts.Contract,
                   total: int, parse_ms: int) -> Counts:
    """processing → staging_complete with the file's counts, and the within-file duplicates
    flagged and recorded as warnings, in one transaction (so a takeover never records them
    twice)."""
    with conn.transaction():
        invalid = _one(conn.execute(Q["count_invalid"], target.keys).fetchone())["invalid"]
        rows = [r["row_number"] for r in conn.execute(Q["repeats"], target.keys)]
        if rows:
            conn.execute(on_stage("flag_duplicates", contract), {
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
            hold: Callable[[], None],
            tick: Callable[[float], None] = lambda _done: None,
            connect: Callable[[], db.Conn] | None = None) -> dict[str, int]:
    """staging_complete | promoting → completed | partial: the slices, then the flip.
    ``tick`` is called between slices with the share done (progress, lease and shutdown
    checks); ``hold`` is the test-only pause point, inside the flip after its writes.
    With ``connect``, judgments' slices are written by SIDE_BY_SIDE connections of their own
    at once (docs/decisions/0390); a slice with a row the database refuses, and what follows
    it, is then left to the loop below, which refuses the row (docs/decisions/0186)."""
    started = time.monotonic()
    statements = PROMOTIONS[contract.name]
    params = {**target.keys, "run_id": target.run_id, "fence": target.fence,
              "source": batch["source"], "source_reference": batch["source_reference"]}
    after = _begin(conn, params)
    if connect is not None and statements.side_by_side:
        after = _side_by_side(connect, statements, params, after, counts.total, tick)
    while after < counts.total:
        upto = min(after + SLICE_ROWS, counts.total)
        _slice(conn, contract, statements, {**params, "after": after, "upto": upto})
        after = upto
        tick(after / counts.total)
    flip = {**params, "after": 0, "upto": counts.total}
    return _refusing(conn, contract, statements, statements.upsert, flip, lambda: _flip(
        conn, target, contract, statements, batch, flip, stats=stats, started=started,
        db_ms_before=db_ms_before, hold=hold))


def _flip(conn: db.Conn, target: Target, contract: contracts.Contract, statements: Statements,
          batch: dict[str, Any], params: dict[str, Any], *, stats: dict[str, Any],
          started: float, db_ms_before: int, hold: Callable[[], None]) -> dict[str, int]:
    """The last transaction: the amends upserted, the batch completed or partial, the run
    succeeded, the IngestionCompleteEvent; everything the slices wrote is seen from its
    commit (docs/decisions/0181)."""
    flip_started = time.monotonic()
    with conn.transaction():
        upsert_started = time.monotonic()
        written = _one(conn.execute(Q[statements.upsert], params).fetchone())
        upsert_ms = round((time.monotonic() - upsert_started) * 1000)  # the amends' share
        hold()
        # Rows the database refused are invalid now: the budget decides again, and the
        # batch is partial (some valid rows could not be promoted, DESIGN.md).
        now = _one(conn.execute(Q["promotion_counts"], {
            **target.keys, "code": statements.refused.code}).fetchone())
        counts = Counts(now["rows_total"], now["rows_invalid"], now["rows_duplicate"])
        check_budget(counts, batch["error_threshold_percent"], batch["force_partial"])
        status = ("partial" if (batch["force_partial"] and counts.invalid) or now["refused"]
                  else "completed")
        db_ms = db_ms_before + round((time.monotonic() - started) * 1000)
        finished_at = commit_time(conn)  # the end, not the transaction's start (now())
        result = _one(conn.execute(Q["finish_batch"], {
            **target.keys, "status": status, "inserted": written["inserted"],
            "updated": written["updated"], "distinct": counts.distinct,
            "db_ms": db_ms, "finished_at": finished_at}).fetchone())
        done = conn.execute(Q["succeed_run"], {
            "run_id": target.run_id, "tenant_id": target.tenant_id, "fence": target.fence,
            "finished_at": finished_at,
            "stats": Jsonb({**stats, **result, "status": status,
                            "promote_ms": db_ms - db_ms_before, "rows_total": counts.total,
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
                f"{contract.name}_upserted": result["rows_inserted"] + result["rows_updated"]},
            at=finished_at)
    return {"inserted": result["rows_inserted"], "updated": result["rows_updated"],
            "unchanged": result["rows_unchanged"], "partial": int(status == "partial"),
            "flip_upsert_ms": upsert_ms,
            "flip_ms": round((time.monotonic() - flip_started) * 1000)}


class Ahead:
    """Slices promoted while the file is still being staged (docs/decisions/0273): each staged
    chunk's rows are ``offer``ed once committed, and a thread writes them as slices (the
    statements and transactions of ``promote``) on a connection of its own, so Postgres
    promotes one chunk while this process validates the next. Rows written carry the batch's
    id and stay unseen until the flip, as before. A file already over its error budget is not
    promoted ahead (the flip's budget check decides; a batch that fails loses its rows).
    ``finish`` waits for the slice under way only: the slices offered and not begun are left
    to ``promote``, which writes them side by side once staging has ended (docs/decisions/
    0390). An error of the thread is raised by the next ``offer`` or by ``finish``."""

    def __init__(self, connect: Callable[[], db.Conn], target: Target,
                 contract: contracts.Contract, batch: dict[str, Any]) -> None:
        self.statements = PROMOTIONS[contract.name]
        self.contract, self.threshold = contract, batch["error_threshold_percent"]
        self.force_partial = batch["force_partial"]
        self.params = {**target.keys, "run_id": target.run_id, "fence": target.fence,
                       "source": batch["source"], "source_reference": batch["source_reference"]}
        self.busy_s = 0.0
        self._ending = False
        self._connect = connect
        self._offers: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="records-slices-ahead",
                                        daemon=True)
        self._thread.start()

    @classmethod
    def applies(cls, contract: contracts.Contract) -> bool:
        return contract.name in PROMOTIONS

    def offer(self, upto: int, rows: int, invalid: int) -> None:
        """Rows up to ``upto`` are staged and committed; ``invalid`` of the ``rows`` validated
        so far were invalid. Within the budget so far, they are promoted ahead."""
        self._raise()
        if self.force_partial or invalid * 100 <= self.threshold * max(rows, 1):
            self._offers.put(upto)

    def finish(self) -> None:
        self._ending = True
        self._offers.put(None)
        self._thread.join()
        self._raise()

    def stop(self) -> None:
        """The job ends otherwise (an error, a lost lease): the slice under way ends (its
        transaction commits or rolls back as a whole) and nothing more is promoted ahead."""
        self._error = self._error or _Stopped()
        self._offers.put(None)
        self._thread.join()

    def _raise(self) -> None:
        if self._error is not None and not isinstance(self._error, _Stopped):
            raise self._error

    def _run(self) -> None:
        try:
            with self._connect() as conn:
                after: int | None = None
                while ((upto := self._offers.get()) is not None and self._error is None
                       and not self._ending):
                    if after is None:
                        after = _begin(conn, self.params, "slices_ahead")
                    started = time.monotonic()
                    while after < upto and not self._ending:
                        end = min(after + SLICE_ROWS, upto)
                        try:
                            _slice_once(conn, self.statements,
                                        {**self.params, "after": after, "upto": end})
                        except ROW_REFUSALS:
                            # A row the database refuses (rolled back) is left to promote(),
                            # which refuses it once staging has counted the valid rows that
                            # refusing one takes from: ahead, rows_valid is not set yet.
                            self.busy_s += time.monotonic() - started
                            return
                        after = end
                    self.busy_s += time.monotonic() - started
        except BaseException as exc:  # noqa: BLE001 - handed to the job's thread, raised there
            self._error = self._error or exc


class _Stopped(Exception):
    pass


def _begin(conn: db.Conn, params: dict[str, Any], start: str = "begin_promotion") -> int:
    """promoting (or, ``start`` slices_ahead, still processing), fenced; where the slices
    resume. Starting from the first slice, whatever an earlier try of the batch inserted is
    removed first, in the same transaction."""
    with conn.transaction():
        row = conn.execute(Q[start], params).fetchone()
        if row is None:
            raise runs.LeaseLost(f"batch {params['batch_id']} is no longer ours to promote")
        if row["promoted_upto"] == 0:
            conn.execute(Q["forget_promoted"], params)
    return int(row["promoted_upto"])


def _slice(conn: db.Conn, contract: contracts.Contract, statements: Statements,
           params: dict[str, Any]) -> None:
    _refusing(conn, contract, statements, statements.insert, params,
              lambda: _slice_once(conn, statements, params))


def _slice_once(conn: db.Conn, statements: Statements, params: dict[str, Any]) -> None:
    """One slice in one transaction: its new records, its amends marked for the flip, its
    links and warnings (plaintiffs), and the cursor; LeaseLost (rolled back) if the batch or
    the run is no longer ours."""
    with conn.transaction():
        _slice_rows(conn, statements, params)


def _slice_rows(conn: db.Conn, statements: Statements, params: dict[str, Any],
                turn: bool = False) -> None:
    """A slice's statements, in the caller's transaction. ``turn``: promoted side by side
    (docs/decisions/0390), the cursor moves only once the slice before has ended."""
    counted = _one(conn.execute(Q[statements.insert], params).fetchone())
    if counted["missed"]:
        # Some keys were stored already: those rows alone are compared for the flip.
        conn.execute(Q[statements.amends], {**params, "rows": counted["missed"]})
    if statements.links:
        conn.execute(Q["link_plaintiffs"], params)
        conn.execute(Q["unlinked_plaintiffs"], {
            **params, "code": PLAINTIFF_JUDGMENT_NOT_FOUND.code,
            "message": PLAINTIFF_JUDGMENT_NOT_FOUND.message})
    if turn:
        conn.execute(Q["wait_turn"], params)
    moved = conn.execute(Q["advance_promotion"], {
        **params, "inserted": counted["inserted"]}).fetchone()
    if moved is None:
        raise runs.LeaseLost(f"batch {params['batch_id']} is no longer ours to promote")


def _side_by_side(connect: Callable[[], db.Conn], statements: Statements,
                  params: dict[str, Any], after: int, total: int,
                  tick: Callable[[float], None]) -> int:
    """The slices after ``after``, written by SIDE_BY_SIDE connections at once and committed
    in file order (docs/decisions/0390); where the committed slices end. Staging has ended,
    so the file's repeats are flagged: no two slices insert one key, and no slice waits for
    another's rows. A slice the database refuses a row of stops the run there: what is left
    goes back to ``promote``'s own loop. Any other error, or one of ``tick``, is raised once
    every slice under way has ended (committed, or rolled back when one before it did not
    commit)."""
    bounds = [(start, min(start + SLICE_ROWS, total))
              for start in range(after, total, SLICE_ROWS)]
    if len(bounds) < 2:
        return after
    turns = _Turns(statements, params, bounds)
    with contextlib.ExitStack() as stack:
        conns = [stack.enter_context(connect()) for _ in range(SIDE_BY_SIDE)]
        threads = [threading.Thread(target=turns.run, args=(c,), daemon=True,
                                    name="records-slices-side-by-side") for c in conns]
        for thread in threads:
            thread.start()
        try:
            for position in turns.committed(threads):
                tick(position / total)
        finally:
            turns.stop()
            for thread in threads:
                thread.join()
    first = next(((a, b) for a, b in bounds if a == turns.position), None)
    error = turns.errors.get(first) if first else None
    if error is None or isinstance(error, ROW_REFUSALS):
        return turns.position
    raise error


class _Turns:
    """Slices handed to connections in file order. Each holds its turn from its first statement
    (taken while no other slice can be handed out), and moves the cursor only after the slice
    before it ended (records.sql hold_turn, wait_turn): the counter a takeover resumes after
    never passes a slice that did not commit."""

    def __init__(self, statements: Statements, params: dict[str, Any],
                 bounds: list[tuple[int, int]]) -> None:
        self.statements, self.params = statements, params
        self.position = bounds[0][0]
        self.errors: dict[tuple[int, int], BaseException] = {}
        self._bounds = iter(bounds)
        self._lock = threading.Lock()
        self._stopped = False
        self._ended: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
        self._done: dict[int, int] = {}

    def stop(self) -> None:
        self._stopped = True

    def run(self, conn: db.Conn) -> None:
        bound: tuple[int, int] | None = None
        try:
            while True:
                bound = None
                with conn.transaction():
                    bound = self._take(conn)
                    if bound is None:
                        break
                    _slice_rows(conn, self.statements,
                                {**self.params, "after": bound[0], "upto": bound[1]}, turn=True)
                self._ended.put(bound)
        except BaseException as exc:  # noqa: BLE001 - handed to the job's thread, raised there
            self._stopped = True
            if bound is not None:
                self.errors[bound] = exc
        finally:
            self._ended.put(None)

    def _take(self, conn: db.Conn) -> tuple[int, int] | None:
        with self._lock:
            bound = None if self._stopped else next(self._bounds, None)
            if bound is not None:
                conn.execute(Q["hold_turn"], {**self.params, "upto": bound[1]})
            return bound

    def committed(self, threads: list[threading.Thread]) -> Iterator[int]:
        """Where the committed slices end, each time it moves (in the caller's thread)."""
        running = len(threads)
        while running:
            bound = self._ended.get()
            if bound is None:
                running -= 1
                continue
            self._done[bound[0]] = bound[1]
            if self.position not in self._done:
                continue  # a slice after one still under way: counted once that one ends
            while self.position in self._done:
                self.position = self._done.pop(self.position)
            yield self.position


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
    # Rows slices wrote (ahead of staging's end, or before a flip that failed) go with it.
    conn.execute(Q["forget_promoted"], target.keys)
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


T = TypeVar("T")


def _refusing(conn: db.Conn, contract: contracts.Contract, statements: Statements, query: str,
              params: dict[str, Any], step: Callable[[], T]) -> T:
    """Run ``step`` (a transaction that runs ``query`` over rows (after, upto]). When the
    database refuses a row's values, the rows it refuses are found by halving the range (each
    try rolled back) and become invalid with the contract's code, in a transaction of their
    own; then ``step`` runs again over the rest (docs/decisions/0186)."""
    try:
        return step()
    except ROW_REFUSALS:
        with conn.transaction():
            refused = _refused(conn, query, params, params["after"], params["upto"])
            if not refused:
                raise  # not one row's values: the batch's problem
            for row, error in refused:
                _refuse(conn, contract, statements, params, row, error)
    return step()


class _Tried(Exception):
    """Rolls a probe back once it has succeeded."""


def _refused(conn: db.Conn, query: str, params: dict[str, Any], after: int,
             upto: int) -> list[tuple[int, psycopg.Error]]:
    try:
        with conn.transaction():
            conn.execute(Q[query], {**params, "after": after, "upto": upto})
            raise _Tried
    except _Tried:
        return []
    except ROW_REFUSALS as exc:
        if upto - after == 1:
            return [(upto, exc)]
    middle = (after + upto) // 2
    return (_refused(conn, query, params, after, middle)
            + _refused(conn, query, params, middle, upto))


def _refuse(conn: db.Conn, contract: contracts.Contract, statements: Statements,
            params: dict[str, Any], row: int, error: psycopg.Error) -> None:
    """The row is invalid now, with the contract's code and the field the database named.
    The error's own text may quote the row's values: only the constraint's name is kept."""
    constraint = error.diag.constraint_name
    field = error.diag.column_name
    if constraint and not field:
        columns = [r["name"] for r in conn.execute(Q["constraint_columns"], {
            "constraint": constraint, "table": statements.table})]
        field = next((c.removesuffix("_normalized") for c in columns), None)
    if field and field not in {c.name for c in contract.columns}:
        field = None
    rule = statements.refused
    why = f" ({constraint})" if constraint else ""
    conn.execute(on_stage("refuse_row", contract), {
        "batch_id": params["batch_id"], "tenant_id": params["tenant_id"], "row": row,
        "field": field, "code": rule.code, "message": rule.message.replace(
            "table)", f"table{why})", 1)})


def _one(row: dict[str, Any] | None) -> dict[str, Any]:
    assert row is not None, "an aggregate query returns one row"
    return row


class _NotOurs(Exception):
    pass
