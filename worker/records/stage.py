"""Stage step: a validated chunk's rows into its contract's typed stage by binary COPY, its
issues into import_row_errors, and the batch's counter moved, in one transaction (issue 31,
docs/decisions/0095, 0272).

The valid rows leave the worker as the columns they were validated in: an Arrow table encoded
in Postgres' binary COPY format by pgpq, into import_staged_judgments, _plaintiffs or
_ad_metrics (migrations/0070), keyed (batch_id, row_number). No value is written as text or
JSON and read back. A chunk's rows, its issues and last_staged_row commit together, and the
counter moves only from the row the chunk started after, so a takeover finds exactly the
chunks that committed and resumes after them; nothing is staged twice.
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
import polars as pl

from shared import contracts, db
from worker import runs

Q = db.load_queries(Path(__file__).with_name("records.sql"))
CHUNK_ROWS = 10_000
# The spec's entity_type of a staged row (staging-promotion-runtime.md §3.4): an ad-metrics row
# is a daily metric that also names its campaign, ad set and ad (docs/decisions/0148).
ENTITY_TYPES = {"judgments": "judgment", "plaintiffs": "plaintiff", "ad_metrics": "daily_metric"}
# Each contract's typed stage and the values it keeps, in the table's terms (migrations/0070).
STAGES = {"judgments": "import_staged_judgments", "plaintiffs": "import_staged_plaintiffs",
          "ad_metrics": "import_staged_ad_metrics"}
VALUES = {
    "judgments": ("case_number", "plaintiff_name", "defendant_name", "amount", "filed_date",
                  "court", "county"),
    "plaintiffs": ("case_number", "name", "address_line1", "city", "state", "zip", "phone",
                   "email", "contact_name", "status"),
    "ad_metrics": ("campaign_external_id", "campaign_name", "ad_set_external_id", "ad_set_name",
                   "ad_external_id", "ad_name", "campaign_path", "ad_set_path", "ad_path",
                   "grain", "metric_date", "period_start", "period_end", "spend", "impressions",
                   "clicks", "conversions", "results", "result_indicator", "currency",
                   "breakdown"),
}
# Values ``derive`` adds beside the contract's fields, and their types.
DERIVED = {"campaign_path": pl.String, "ad_set_path": pl.String, "ad_path": pl.String,
           "grain": pl.String, "period_start": pl.Date, "period_end": pl.Date,
           "breakdown": pl.String}


def entity_type(contract: contracts.Contract) -> str:
    return ENTITY_TYPES.get(contract.name, contract.name)


def stage_table(contract: contracts.Contract) -> str:
    return STAGES[contract.name]


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(type(value).__name__)


def to_json(value: Any) -> str:
    return orjson.dumps(value, default=_default).decode()


# One issue as import_row_errors takes it: (row, field, code, severity, message, raw JSON).
IssueRow = tuple[int, str | None, str, str, str, str | None]


@dataclass
class Staged:
    """One transaction's worth: the valid rows of rows (previous, last] and every issue."""

    previous: int
    last: int
    values: pl.DataFrame | None = None
    issues: list[IssueRow] = field(default_factory=list)

    def add_batch_issues(self, issues: Iterable[contracts.Issue]) -> None:
        self.issues[:0] = [(0, i.field, i.code, i.severity.value, i.message, None)
                           for i in issues]

    def __len__(self) -> int:
        return self.last - self.previous


def issue_rows(issues: pl.DataFrame, raw: Mapping[int, Any]) -> list[IssueRow]:
    """The issues frame of worker/records/columns.py with each row's evidence."""
    evidence = {row: to_json(value) for row, value in raw.items()}
    return [(row, fld, code, severity, message, evidence.get(row))
            for row, fld, code, severity, message in issues.select(
                "row", "field", "code", "severity", "message").iter_rows()]


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
            # Slices promoted ahead of a restage (docs/decisions/0273) are written again.
            conn.execute(Q["forget_promoted"], target.keys)
    return last_staged_row


def arrow(contract: contracts.Contract, target: Target, values: pl.DataFrame) -> Any:
    """The valid rows as the stage's COPY takes them: the batch and tenant as the 16 bytes of
    a uuid (binary COPY carries no types: the server reads them with uuid's own binary form),
    the row number as int4, every value in its own type."""
    import pyarrow as pa

    names = VALUES[contract.name]
    frame = values.select(
        pl.col("row").cast(pl.Int32).alias("row_number"), pl.col("natural_key"),
        *(pl.col(name) if name in values.columns else pl.lit(None, DERIVED.get(name, pl.String))
          .alias(name) for name in names))
    table = frame.to_arrow()
    count = table.num_rows
    ids = [pa.array([target.batch_id.bytes] * count, pa.binary(16)),
           pa.array([target.tenant_id.bytes] * count, pa.binary(16))]
    columns = ids + list(table.columns)
    fields = ["batch_id", "tenant_id", *table.column_names]
    if contract.name == "ad_metrics":
        columns.append(pa.array([hashlib.sha256(k.encode()).hexdigest()
                                 for k in values["natural_key"].to_list()], pa.string()))
        fields.append("natural_key_hash")
    return pa.table(columns, names=fields)


def write(conn: db.Conn, target: Target, contract: contracts.Contract, chunk: Staged) -> None:
    """COPY the chunk's rows and issues and move the counter, in one transaction; raise
    LeaseLost (and so roll back) if the batch or the run is no longer ours to stage."""
    import pgpq

    with conn.transaction(), conn.cursor() as cur:
        if chunk.values is not None and chunk.values.height:
            table = arrow(contract, target, chunk.values)
            encoder = pgpq.ArrowToPostgresBinaryEncoder(table.schema)
            with cur.copy(f"COPY {stage_table(contract)} ({', '.join(table.column_names)}) "
                          "FROM STDIN (FORMAT BINARY)") as copy:
                copy.write(encoder.write_header())
                for batch in table.to_batches():
                    copy.write(encoder.write_batch(batch))
                copy.write(encoder.finish())
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
