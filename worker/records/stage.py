"""Stage step: validated rows into import_staged_rows, problems into import_row_errors, with
COPY, one transaction per chunk of rows.

A chunk's rows, its errors and the batch's last_staged_row commit together, and the counter
moves only from the row the chunk started after (docs/decisions/0095). So a takeover finds
exactly the chunks that committed and resumes after them; nothing is staged twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson

from shared import contracts, db
from worker import runs

Q = db.load_queries(Path(__file__).with_name("records.sql"))
CHUNK_ROWS = 10_000
# The spec's entity_type of a staged row (staging-promotion-runtime.md §3.4): an ad-metrics row
# is a daily metric that also names its campaign, ad set and ad (docs/decisions/0148).
ENTITY_TYPES = {"judgments": "judgment", "plaintiffs": "plaintiff", "ad_metrics": "daily_metric"}


def entity_type(contract: contracts.Contract) -> str:
    return ENTITY_TYPES.get(contract.name, contract.name)


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(type(value).__name__)


def to_json(value: Any) -> str:
    return orjson.dumps(value, default=_default).decode()


# What one row adds to a chunk: its staged row (None when it is invalid) and its issues, as
# the COPYs below take them. Built by ``encode`` here or in a validating process
# (worker/records/validate.py): both give the same tuples for the same row.
StagedRow = tuple[int, str | None, str | None, str, str | None]
IssueRow = tuple[int, str | None, str, str, str, str | None]


@dataclass(frozen=True, slots=True)
class Encoded:
    row: int
    staged: StagedRow | None
    issues: list[IssueRow]


def encode(result: contracts.RowResult, key: str | None, raw: Mapping[str, Any]) -> Encoded:
    """One validated row as the stage stores it: (row number, natural key, its SHA-256, values
    as JSON, warnings as JSON or None) when valid, and its issues with the raw row."""
    problems = result.errors + result.warnings
    issues: list[IssueRow] = []
    if problems:
        raw_json = to_json(raw)
        issues = [(i.row or 0, i.field, i.code, i.severity.value, i.message, raw_json)
                  for i in problems]
    staged: StagedRow | None = None
    if result.valid:
        digest = hashlib.sha256(key.encode()).hexdigest() if key is not None else None
        warnings = to_json([i.as_dict() for i in result.warnings]) if result.warnings else None
        staged = (result.row, key, digest, to_json(result.values), warnings)
    return Encoded(result.row, staged, issues)


def validate(contract: contracts.Contract, match: contracts.HeaderMatch | None, number: int,
             cells: Any, raw: Mapping[str, Any]) -> Encoded:
    """Validate one row and encode it: what the stage needs of it."""
    result = contracts.validate_row(contract, cells, match, number)
    key = contracts.natural_key(contract, result.values) if result.valid else None
    return encode(result, key, raw)


@dataclass
class Chunk:
    """One transaction's worth: staged rows and issues, for rows after ``previous``."""

    previous: int
    last: int = 0
    rows: list[StagedRow] = field(default_factory=list)
    issues: list[IssueRow] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.last = max(self.last, self.previous)  # an empty chunk ends where it starts

    def add(self, result: contracts.RowResult, key: str | None, raw: Mapping[str, Any]) -> None:
        self.extend(encode(result, key, raw))

    def extend(self, encoded: Encoded) -> None:
        self.last = encoded.row
        self.issues += encoded.issues
        if encoded.staged is not None:
            self.rows.append(encoded.staged)

    def add_batch_issues(self, issues: Iterable[contracts.Issue]) -> None:
        self.issues += [(0, i.field, i.code, i.severity.value, i.message, None) for i in issues]

    def __len__(self) -> int:
        return self.last - self.previous


@dataclass(frozen=True)
class Target:
    """The batch and run a chunk belongs to, and our fence on the run."""

    batch_id: UUID
    tenant_id: UUID
    run_id: UUID
    fence: int
    entity_type: str = "record"

    @property
    def keys(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "tenant_id": self.tenant_id}


def resume_point(conn: db.Conn, target: Target, last_staged_row: int) -> int:
    """Where staging continues: after last_staged_row if the stage accounts for every row up
    to it, else from the start. Anything past the point is removed first."""
    if last_staged_row:
        row = conn.execute(Q["staged_rows_consistent"],
                           {**target.keys, "last": last_staged_row}).fetchone()
        if row is None or row["accounted"] != last_staged_row:
            last_staged_row = 0  # the UNLOGGED stage lost rows (a Postgres crash): restage
    with conn.transaction():
        conn.execute(Q["forget_after"], {**target.keys, "last": last_staged_row})
        conn.execute(Q["forget_errors_after"], {**target.keys, "last": last_staged_row})
        if last_staged_row == 0:
            conn.execute(Q["reset_counter"], target.keys)
    return last_staged_row


def write(conn: db.Conn, target: Target, chunk: Chunk) -> None:
    """COPY the chunk's rows and issues and move the counter, in one transaction; raise
    LeaseLost (and so roll back) if the batch or the run is no longer ours to stage."""
    with conn.transaction(), conn.cursor() as cur:
        if chunk.rows:
            with cur.copy("COPY import_staged_rows (batch_id, tenant_id, row_number, natural_key,"
                          " natural_key_hash, data, validation_errors, entity_type)"
                          " FROM STDIN") as copy:
                for row in chunk.rows:
                    copy.write_row((target.batch_id, target.tenant_id, *row, target.entity_type))
        if chunk.issues:
            with cur.copy("COPY import_row_errors (tenant_id, batch_id, row_number, field, code,"
                          " severity, message, raw) FROM STDIN") as copy:
                for issue in chunk.issues:
                    copy.write_row((target.tenant_id, target.batch_id, *issue))
        moved = cur.execute(Q["advance_counter"], {
            **target.keys, "run_id": target.run_id, "fence": target.fence,
            "previous": chunk.previous, "last": chunk.last}).fetchone()
        if moved is None:
            raise runs.LeaseLost(f"batch {target.batch_id} is no longer ours to stage")
