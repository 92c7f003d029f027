"""JSON lines files (issue 31, docs/decisions/0271): a machine's format, whose numbers are JSON
numbers and whose keys may be column names or field names, read and validated one object at a
time by the contract's own per-row code (``contracts.validate_row``, as the event ledger
validates an event), then handed to the stage as the same typed columns a CSV's rows become.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared import contracts
from worker.records import columns, parse


@dataclass
class Part:
    """Rows (previous, last] validated, and the raw rows of those with issues."""

    previous: int
    last: int
    rows: list[contracts.RowResult]
    raw: dict[int, Mapping[str, Any]]

    def validated(self, contract: contracts.Contract,
                  match: contracts.HeaderMatch) -> tuple[columns.Validated, dict[int, Any]]:
        valid = [r for r in self.rows if r.valid]
        return (columns.Validated(len(self.rows), columns.frame_of(contract, valid),
                                  columns.issues_of(self.rows)), self.raw)


class JsonLines:
    """The JSON lines counterpart of worker/records/table.py's Table."""

    def __init__(self, path: Path, contract: contracts.Contract,
                 decimal: str | None = None) -> None:
        self.contract = contract
        self.reader = parse.Reader(path, contract, "jsonl", decimal=decimal)
        self.encoding = self.reader.encoding
        self.last = 0
        self._rows = self.reader.rows()
        self._first: list[tuple[int, Any, Mapping[str, Any]]] = []

    @property
    def parsed(self) -> parse.ParsedFile | None:
        return self.reader.parsed

    @property
    def header(self) -> tuple[str, ...]:
        return self.reader.parsed.header if self.reader.parsed is not None else ()

    def open(self) -> parse.ParsedFile:
        """Read the first object (its keys are the file's header)."""
        self._first = [next(self._rows)]  # no object at all: BatchRejected (empty file)
        assert self.reader.parsed is not None
        return self.reader.parsed

    def position(self) -> float:
        return self.reader.position()

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> JsonLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def chunks(self, chunk_rows: int, after: int = 0) -> Iterator[Part]:
        assert self.reader.parsed is not None
        match = self.reader.parsed.match
        part = Part(after, after, [], {})
        for number, cells, raw in itertools.chain(self._first, self._rows):
            self.last = number
            if number <= after:
                continue
            result = contracts.validate_row(self.contract, cells, match, number)
            part.rows.append(result)
            part.last = number
            if result.errors or result.warnings:
                part.raw[number] = raw
            if len(part.rows) == chunk_rows:
                yield part
                part = Part(number, number, [], {})
        if part.rows:
            yield part
