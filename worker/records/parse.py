"""Parse stage: stream a records file as (row number, cells) through its contract's header.

Memory stays flat in the file's size: the file is read from local disk as a text stream and
rows are yielded one at a time; the caller validates and stages them in chunks. The encoding is
decided before the first row (a cheap byte scan), so a fallback never changes rows already
staged: UTF-8 (BOM stripped), else cp1252, else latin-1, with BATCH_ENCODING_WARNING.
"""

from __future__ import annotations

import codecs
import csv
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import orjson

from shared import contracts, errors
from shared.contracts import codes

# The csv module's default field limit (128 KiB) is far above any real cell; kept as is.
SCAN_BLOCK = 1 << 20
SNIFF_CHARS = 1 << 16
csv.field_size_limit(min(sys.maxsize, 1 << 20))


class BatchRejected(errors.BadDocument):
    """The file as a whole cannot be imported: the batch fails with this one sentence, and
    ``issues`` (file-level, row 0) are stored beside it."""

    code = "batch_rejected"

    def __init__(self, detail: str, *, stage: str, code: str,
                 issues: Sequence[contracts.Issue] = ()) -> None:
        super().__init__(detail, stage=stage)
        self.batch_code = code
        self.issues = list(issues)


@dataclass
class ParsedFile:
    """What a parse knows before its first row: the header's match and batch-level warnings."""

    match: contracts.HeaderMatch
    header: tuple[str, ...]
    warnings: list[contracts.Issue] = field(default_factory=list)
    encoding: str = "utf-8"


def detect_encoding(path: Path) -> str:
    """utf-16 when the file starts with its byte-order mark (Google Ads' "Excel CSV"), else
    utf-8-sig if the whole file decodes as UTF-8, else cp1252, else latin-1 (total)."""
    with open(path, "rb") as fh:
        if fh.read(2) in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE) and _decodes(path, "utf-16"):
            return "utf-16"
    for encoding in ("utf-8", "cp1252"):
        if _decodes(path, encoding):
            return "utf-8-sig" if encoding == "utf-8" else encoding
    return "latin-1"


def _decodes(path: Path, encoding: str) -> bool:
    decoder = codecs.getincrementaldecoder(encoding)()
    with open(path, "rb") as fh:
        try:
            while block := fh.read(SCAN_BLOCK):
                decoder.decode(block)
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return False
    return True


def _encoding_issue(encoding: str) -> list[contracts.Issue]:
    if encoding in ("utf-8-sig", "utf-16"):
        return []
    rule = codes.ENCODING_WARNING
    return [contracts.Issue(None, None, rule.code, rule.severity,
                            f"The file is not UTF-8; it was decoded as {encoding}.")]


class Reader:
    """Rows of one file after its header: ``rows()`` yields (row_number, cells, raw) where
    cells is what validate_row takes and raw is the row as the file had it (header → value)."""

    def __init__(self, path: Path, contract: contracts.Contract, file_format: str) -> None:
        self.path = path
        self.contract = contract
        self.file_format = file_format
        self.size = max(1, path.stat().st_size)
        self.encoding = detect_encoding(path)
        self._fh: TextIO = open(path, encoding=self.encoding, newline="")  # noqa: SIM115
        self.parsed: ParsedFile | None = None

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def position(self) -> float:
        """How far through the file, 0..1, for progress (bytes of the underlying file)."""
        try:
            return min(1.0, self._fh.buffer.tell() / self.size)  # type: ignore[attr-defined]
        except (OSError, ValueError):
            return 0.0

    def rows(self) -> Iterator[tuple[int, Sequence[str] | Mapping[str, Any], Mapping[str, Any]]]:
        if self.file_format == "jsonl":
            yield from self._json_rows()
        else:
            yield from self._csv_rows()

    # ── CSV ───────────────────────────────────────────────────────────────────────────────
    def _csv_rows(self) -> Iterator[tuple[int, Sequence[str], Mapping[str, Any]]]:
        reader = csv.reader(self._fh, strict=True, delimiter=self._delimiter())
        header = self._find_header(reader)
        self._accept_header(header)
        summary = self._summary_test()
        row_number = 0
        while (cells := self._next_csv(reader)) is not None:
            if not any(c.strip() for c in cells):
                continue  # a blank line is not a row
            if summary is not None and summary(cells):
                continue  # an export's `Total: …` row sums the rows, it is none of them
            row_number += 1
            yield row_number, cells, dict(zip(header, cells, strict=False))
        if row_number == 0:
            raise _empty()

    def _delimiter(self) -> str:
        """Comma, or tab for a tab-separated export (Google Ads' "Excel CSV", a TikTok
        export saved from a spreadsheet): whichever the file's first block has more of."""
        sample = self._fh.read(SNIFF_CHARS)
        self._fh.seek(0)
        return "\t" if sample.count("\t") > sample.count(",") else ","

    def _find_header(self, reader: Any) -> list[str]:
        """The header row: the first non-blank line, or, for an export with title lines
        (``contract.preamble_lines``), the first of that many more lines that names every
        required column. When none does, the first line is the header (and fails as such)."""
        first: list[str] | None = None
        for _ in range(self.contract.preamble_lines + 1):
            line = self._next_csv(reader)
            while line is not None and not any(c.strip() for c in line):
                line = self._next_csv(reader)  # blank lines before the header
            if line is None:
                break
            if first is None:
                first = line
            if not contracts.match_header(self.contract, line).missing:
                return line
        if first is None:
            raise _empty()
        return first

    def _summary_test(self) -> Callable[[Sequence[str]], bool] | None:
        """For an export with total rows: whether a row is one (its first non-empty cell
        starts with a summary word and its first required field is empty)."""
        prefixes = self.contract.summary_prefixes
        assert self.parsed is not None
        required = next((self.parsed.match.index[c.name] for c in self.contract.columns
                         if c.required and c.name in self.parsed.match.index), None)
        if not prefixes or required is None:
            return None
        empty = self.contract.empty_markers

        def is_summary(cells: Sequence[str]) -> bool:
            first = next((c.strip() for c in cells if c.strip()), "")
            if not first.casefold().startswith(prefixes):
                return False
            key = cells[required].strip() if required < len(cells) else ""
            return not key or key in empty

        return is_summary

    def _next_csv(self, reader: Any) -> list[str] | None:
        try:
            return next(reader)
        except StopIteration:
            return None
        except csv.Error as exc:
            # csv's messages name the problem, never a cell's content.
            raise _malformed(reader.line_num, str(exc)) from exc

    # ── JSON lines ────────────────────────────────────────────────────────────────────────
    def _json_rows(self) -> Iterator[tuple[int, Mapping[str, Any], Mapping[str, Any]]]:
        row_number = 0
        for line_number, line in enumerate(self._fh, start=1):
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise _malformed(line_number, "not valid JSON") from exc
            if not isinstance(obj, dict):
                raise _malformed(line_number, "not a JSON object")
            if row_number == 0:
                # The first object's keys are the file's header: a required field absent
                # there fails the batch, as a missing CSV column does.
                self._accept_header([str(k) for k in obj])
            row_number += 1
            yield row_number, obj, obj
        if row_number == 0:
            raise _empty()

    def _accept_header(self, header: Sequence[str]) -> None:
        match = contracts.match_header(self.contract, header)
        issues = contracts.header_issues(self.contract, match)
        critical = [i for i in issues if i.severity is contracts.Severity.CRITICAL]
        if critical:
            first = critical[0]
            raise BatchRejected(first.message, stage="parse", code=first.code, issues=critical)
        self.parsed = ParsedFile(match, tuple(header),
                                 _encoding_issue(self.encoding) + issues, self.encoding)


def _empty() -> BatchRejected:
    rule = codes.EMPTY_FILE
    message = "The file contains no data rows."
    return BatchRejected(message, stage="parse", code=rule.code,
                         issues=[contracts.Issue(None, None, rule.code, rule.severity, message)])


def _malformed(line: int, problem: str) -> BatchRejected:
    rule = codes.MALFORMED_CSV
    message = f"The file is malformed at line {line}: {problem}."
    return BatchRejected(message, stage="parse", code=rule.code,
                         issues=[contracts.Issue(None, None, rule.code, rule.severity, message)])
