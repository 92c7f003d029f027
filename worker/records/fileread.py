"""What the batch says about how its file was read (issue 20, docs/decisions/0170): the
encoding, delimiter and decimal separator the parse used, the rows it skipped as export
furniture with their reasons, and for ad metrics whether entities were keyed by ids or names
and the report's grain (day, period, all time). The pipeline calls ``opened`` to read the
header and ``finish`` after the rows; both are idempotent, so a takeover reading the file again records the
same.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import psycopg
from psycopg.types.json import Jsonb

from shared import contracts, db
from shared.contracts import ad_metrics, codes
from worker.records import parse
from worker.records.stage import Target

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("fileread.sql"))


def decimal_option(conn: db.Conn, target: Target) -> str | None:
    """The upload's decimal separator, or None (detect it from the file)."""
    row = conn.execute(Q["decimal_option"], target.keys).fetchone()
    return None if row is None else row["decimal_separator"]


class Source(Protocol):
    """A file being read: a CSV's Table (worker/records/table.py) or JSON lines."""

    contract: contracts.Contract
    encoding: parse.Encoding
    last: int

    @property
    def parsed(self) -> parse.ParsedFile | None: ...

    def open(self) -> parse.ParsedFile: ...

    def position(self) -> float: ...


def opened(conn: db.Conn, target: Target, source: Source) -> parse.ParsedFile:
    """The file's header read; how the file was read is recorded then, and also when the file
    is refused (a failed batch says what was read too)."""
    try:
        parsed = source.open()
    except parse.BatchRejected:
        _best_effort(conn, target, source)
        raise
    record(conn, target, source)
    return parsed


def record(conn: db.Conn, target: Target, reader: Source) -> None:
    parsed = reader.parsed
    delimiter = parsed.delimiter if parsed is not None else None
    conn.execute(Q["record_read"], {
        **target.keys, "encoding": reader.encoding.label,
        "delimiter": parse.DELIMITER_NAMES.get(delimiter or "", None),
        "decimal": parsed.decimal if parsed is not None else None,
        "entity_keys": (ad_metrics.entity_keys(parsed.match)
                        if parsed is not None and reader.contract.name == "ad_metrics" else None)})


def _best_effort(conn: db.Conn, target: Target, reader: Source) -> None:
    try:
        record(conn, target, reader)
    except psycopg.Error as exc:  # the failure itself is what matters; it is written next
        log.warning("could not record how the file was read",
                    extra={"error": type(exc).__name__})


def finish(conn: db.Conn, target: Target, reader: Source) -> None:
    """After the whole file was read: the rows skipped, by reason (one batch warning), and the
    grain of the rows staged."""
    skipped: Mapping[str, int] = reader.parsed.skipped if reader.parsed is not None else {}
    total = sum(skipped.values())
    rule = codes.ROWS_SKIPPED
    message = (f"{total:,} row(s) of the export's layout were skipped, not imported: "
               f"{parse.describe_skipped(skipped)}." if total else rule.message)
    conn.execute(Q["record_skipped"], {
        **target.keys, "skipped": total, "reasons": Jsonb(dict(skipped)) if total else None,
        "code": rule.code, "message": message})
