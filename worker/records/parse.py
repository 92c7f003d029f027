"""Parse stage: stream a records file as (row number, cells, raw) through its contract's header.

Real files are read as people download them (issue 20, docs/decisions/0170–0172):
- the encoding is decided before the first row, from a byte-order mark (UTF-8, UTF-16 and
  UTF-32, either byte order), else from the NUL pattern of UTF-16 without one, else UTF-8 if
  the whole file decodes, else cp1252, else latin-1 (with BATCH_ENCODING_WARNING); so a
  fallback never changes rows already staged;
- the delimiter (comma, semicolon, tab or pipe) is the one under which the header names the
  contract's columns, else the one that splits the first lines alike; a file where neither
  tells fails with BATCH_DELIMITER_UNKNOWN;
- the decimal separator is the upload's, else the one the first rows' numbers prove (a value
  that reads one way only), else unknown (then only unambiguous numbers read);
- an export's furniture (title lines above the header, `Total: …` rows, Meta's summary row,
  notes under the table) is skipped and counted with its reason, never an invalid row.

Memory stays flat in the file's size: rows are yielded one at a time after a bounded
look-ahead; the caller validates and stages them in chunks.
"""

from __future__ import annotations

import codecs
import csv
import io
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import orjson

from shared import contracts, errors, textcodecs
from shared.contracts import codes
from shared.contracts import normalise as n

SCAN_BLOCK = 1 << 20
SNIFF_CHARS = 1 << 16
# A cell may be long (the contract's rules then judge it); a file is malformed only past this.
csv.field_size_limit(min(sys.maxsize, 16 << 20))
DELIMITERS = (",", ";", "\t", "|")
DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}
# Rows read ahead of the first one yielded, to learn the file's decimal separator.
LOOKAHEAD_ROWS = 2000
# What a raw row keeps of a very wide or very long row: it is evidence, not a copy.
RAW_COLUMNS = 200
RAW_CHARS = 10_000
# An export's total rows start so (Google `Total: Account`, `Total - filtered`; TikTok
# `Total of 5 results`); a campaign called `Total Fitness` is not one.
TOTAL_PREFIXES = ("total:", "total -", "total –", "total of ")
# A row whose first cell is just one of these, with no other name or breakdown beside it, is a
# total too: TikTok's `Total,,12.50,…`, AdWords' `Total, --, --, …`.
TOTAL_WORDS = ("total", "totals", "grand total")
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
    """What a parse knows before its first row: the header's match and batch-level warnings,
    and how the file was read (recorded on the batch)."""

    match: contracts.HeaderMatch
    header: tuple[str, ...]
    warnings: list[contracts.Issue] = field(default_factory=list)
    encoding: str = "UTF-8"
    delimiter: str | None = None
    # Rows skipped as export furniture, by reason; complete once rows() is exhausted.
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def decimal(self) -> str | None:
        return self.match.decimal


@dataclass(frozen=True)
class Encoding:
    codec: str   # what Python opens the file with
    label: str   # what the batch says was read


def detect_encoding(path: Path) -> Encoding:
    """A byte-order mark decides; else UTF-16 recognisable by its NULs (Excel's "Unicode
    text" without a BOM); else UTF-8 if the whole file decodes, else cp1252, else latin-1."""
    with open(path, "rb") as fh:
        head = fh.read(4096)
    mark = textcodecs.bom(head)
    if mark is not None and _decodes(path, mark.codec):
        return Encoding(mark.codec, mark.label)
    utf16 = textcodecs.utf16_without_bom(head)
    if utf16 is not None and _decodes(path, utf16):
        return Encoding(utf16, utf16.upper().replace("UTF-16-", "UTF-16") + " without BOM")
    for codec, label in (("utf-8", "UTF-8"), ("cp1252", "cp1252")):
        if _decodes(path, codec):
            return Encoding(codec, label)
    return Encoding("latin-1", "latin-1")


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


def _encoding_issue(encoding: Encoding) -> list[contracts.Issue]:
    if encoding.codec not in ("cp1252", "latin-1"):
        return []
    rule = codes.ENCODING_WARNING
    return [contracts.Issue(None, None, rule.code, rule.severity,
                            f"The file has no byte-order mark and is not UTF-8; it was decoded "
                            f"as {encoding.label}.")]


class Reader:
    """Rows of one file after its header: ``rows()`` yields (row_number, cells, raw) where
    cells is what validate_row takes and raw is the row as the file had it (header → value,
    bounded, with characters Postgres cannot store replaced)."""

    def __init__(self, path: Path, contract: contracts.Contract, file_format: str,
                 decimal: str | None = None) -> None:
        self.path = path
        self.contract = contract
        self.file_format = file_format
        self.decimal_option = decimal
        self.size = max(1, path.stat().st_size)
        self.encoding = detect_encoding(path)
        self._fh: TextIO = open(path, encoding=self.encoding.codec, newline="")  # noqa: SIM115
        self.parsed: ParsedFile | None = None
        self._pending: list[list[str]] = []

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
        sample = self._fh.read(SNIFF_CHARS)
        self._fh.seek(0)
        delimiter = choose_delimiter(sample, self.contract)
        reader = csv.reader(self._fh, strict=True, delimiter=delimiter)
        header, titles = self._find_header(reader)
        self._accept_header(header, delimiter, titles)
        assert self.parsed is not None
        skipped = self.parsed.skipped
        furniture = self._furniture_test()
        ahead: list[list[str]] = list(self._pending)
        while len(ahead) < LOOKAHEAD_ROWS and (cells := next_csv(reader)) is not None:
            ahead.append(cells)
        self._learn_decimal(ahead)
        row_number = 0
        for cells in _chain(ahead, lambda: next_csv(reader)):
            if not any(c.strip() for c in cells):
                continue  # a blank line is not a row
            reason = furniture(cells) if furniture is not None else None
            if reason is not None:
                skipped[reason] += 1
                continue
            row_number += 1
            yield row_number, cells, raw_row(header, cells)
        if row_number == 0:
            raise _empty(skipped)

    def _find_header(self, reader: Any) -> tuple[list[str], list[str]]:
        """The header row and its title lines (``pick_header``)."""
        lines = list(header_lines(reader, self.contract))
        if not lines:
            raise _empty(Counter())
        best, titles = pick_header(self.contract, lines)
        # Lines read past the header are rows: hand them back to the row loop.
        self._pending = lines[best + 1:]
        return lines[best], titles

    def _furniture_test(self) -> Callable[[Sequence[str]], str | None] | None:
        assert self.parsed is not None
        return furniture_test(self.contract, self.parsed.match)

    def _learn_decimal(self, rows: list[list[str]]) -> None:
        """The file's decimal separator: the upload's, else the one the numbers of the first
        rows prove (most of them, if they disagree), else None."""
        assert self.parsed is not None
        decimal = self.decimal_option
        if decimal is None:
            decimal = decimal_of(self.contract, self.parsed.match, rows)
        self.parsed.match = replace(self.parsed.match, decimal=decimal)

    # ── JSON lines ────────────────────────────────────────────────────────────────────────
    def _json_rows(self) -> Iterator[tuple[int, Mapping[str, Any], Mapping[str, Any]]]:
        row_number = 0
        for line in self._fh:
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                obj = None
            if not isinstance(obj, dict):
                # One line that is no JSON object is that row's error, not the file's.
                if self.parsed is None:
                    self._accept_header([], None, [])
                row_number += 1
                yield row_number, contracts.UNREADABLE, {"line": _bounded(line.strip())}
                continue
            if self.parsed is None or not self.parsed.header:
                # The first object's keys are the file's header: a required field absent
                # there fails the batch, as a missing CSV column does.
                self._accept_header([str(k) for k in obj], None, [])
                self._learn_decimal([])
            row_number += 1
            yield row_number, obj, _clean(obj)
        if row_number == 0:
            raise _empty(Counter())

    def _accept_header(self, header: Sequence[str], delimiter: str | None,
                       titles: Sequence[str]) -> None:
        self.parsed = accept_header(self.contract, header, delimiter, titles, self.encoding)


def accept_header(contract: contracts.Contract, header: Sequence[str], delimiter: str | None,
                  titles: Sequence[str], encoding: Encoding) -> ParsedFile:
    """The file's header matched to the contract, its title lines read for a period, and its
    batch-level issues; BatchRejected when the header cannot be imported."""
    match = contracts.match_header(contract, header)
    period = next((p for t in titles if (p := n.report_period(t)) is not None), None)
    match = replace(match, context={"period": period, "titles": tuple(titles),
                                    "fields": frozenset(match.index)})
    issues = contracts.header_issues(contract, match) if header else []
    critical = [i for i in issues if i.severity is contracts.Severity.CRITICAL]
    if critical:
        first = critical[0]
        raise BatchRejected(first.message, stage="parse", code=first.code, issues=critical)
    if header and contract.header_check is not None:
        refused = contract.header_check(contract, match)
        if refused is not None:
            raise BatchRejected(refused.message, stage="parse", code=refused.code,
                                issues=[refused])
    return ParsedFile(match, tuple(header), _encoding_issue(encoding) + issues,
                      encoding.label, delimiter)


def furniture_test(contract: contracts.Contract,
                   match: contracts.HeaderMatch) -> Callable[[Sequence[str]], str | None] | None:
    """Why a row is no record (a total, the export's summary, a note), or None; None when the
    contract's exports have no such rows. (worker/records/table.py asks it of whole columns.)"""
    if not contract.summary_prefixes and not contract.furniture:
        return None
    empty = contract.empty_markers
    dimensions = [match.index[c.name] for c in contract.columns
                  if c.name in match.index and is_dimension(c)]
    wide = match.width >= 3

    def blank(text: str) -> bool:
        text = text.strip()
        return not text or text in empty

    def named(cells: Sequence[str]) -> list[str]:
        return [cells[p].strip().casefold() for p in dimensions
                if p < len(cells) and not blank(cells[p])]

    def reason(cells: Sequence[str]) -> str | None:
        filled = [c.strip() for c in cells if not blank(c)]
        first = filled[0].casefold() if filled else ""
        if contract.summary_prefixes and (
                first.startswith(TOTAL_PREFIXES)
                # a segmented report's totals follow the segment (`Computers,Total: Display`)
                or any(name.startswith(TOTAL_PREFIXES) for name in named(cells))
                or (first in TOTAL_WORDS and named(cells) in ([], [first]))):
            return "total row"
        if not contract.furniture:
            return None
        if wide and len(filled) == 1:
            return "note"
        if dimensions and all(blank(cells[p]) if p < len(cells) else True
                              for p in dimensions):
            return "summary row"
        return None

    return reason


# ── the file's dialect and conventions ────────────────────────────────────────────────────
def choose_delimiter(sample: str, contract: contracts.Contract) -> str:
    """The delimiter under which a line of the first few names the most of the contract's
    columns (then: splits it into the most cells); when no line names any, the one that
    splits the first lines alike into more than one cell. BatchRejected
    (BATCH_DELIMITER_UNKNOWN) when neither tells."""
    scores: dict[str, tuple[int, int, int]] = {}
    for delimiter in DELIMITERS:
        lines = _sample_rows(sample, delimiter, contract.preamble_lines + 30)
        heads = lines[:contract.preamble_lines + 1]
        named, width = max(((sum(contract.lookup(c) is not None for c in set(line)), len(line))
                            for line in heads), default=(0, 0))
        widths = Counter(len(line) for line in lines if len(line) > 1)
        alike = widths.most_common(1)[0][1] if widths else 0
        scores[delimiter] = (named, width, alike) if named else (0, 0, alike)
    ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    (best, score), (_, second) = ranked[0], ranked[1]
    if score[0] > 0 and score[1] <= 1:
        return ","  # a one-column file: any delimiter reads it
    if score > second and (score[0] > 0 or score[2] > 0):
        return best
    rule = codes.DELIMITER_UNKNOWN
    message = ("The file's delimiter cannot be told from its header: no comma, semicolon, tab "
               "or pipe splits it into the contract's columns; save it as CSV with one of them "
               "and a header row.")
    raise BatchRejected(message, stage="parse", code=rule.code,
                        issues=[contracts.Issue(None, None, rule.code, rule.severity, message)])


def _sample_rows(sample: str, delimiter: str, limit: int) -> list[list[str]]:
    rows: list[list[str]] = []
    # newline="": a line may end in CR alone (classic Mac Excel), as the file's reader takes it.
    reader = csv.reader(io.StringIO(sample, newline=""), delimiter=delimiter)
    try:
        for row in reader:
            if any(c.strip() for c in row):
                rows.append(row)
            if len(rows) >= limit:
                break
    except csv.Error:
        pass  # the sample may end inside a quoted cell
    return rows


def decimal_of(contract: contracts.Contract, match: contracts.HeaderMatch,
               rows: Sequence[Sequence[str]]) -> str | None:
    """The decimal separator the numbers of ``rows`` prove: the convention most values that
    read one way only read under; None when no value tells."""
    positions = [match.index[c.name] for c in contract.columns
                 if c.number and c.name in match.index]
    # Each distinct text is read once and votes as often as it occurs (an export repeats its
    # figures: 8,000 cells of a Meta export's first 2,000 rows hold ~300 texts).
    texts: Counter[str] = Counter()
    for row in rows:
        for p in positions:
            text = row[p].strip() if p < len(row) else ""
            if text:
                texts[text] += 1
    votes: Counter[str] = Counter()
    for text, count in texts.items():  # first seen first: most_common breaks ties the same
        if (proved := n.convention(text)) is not None:
            votes[proved] += count
    if not votes:
        return None
    return votes.most_common(1)[0][0]


def is_dimension(column: contracts.Column) -> bool:
    return column.breakdown or column.name.endswith(("_name", "_external_id"))


def _chain(ahead: list[list[str]],
           more: Callable[[], list[str] | None]) -> Iterator[list[str]]:
    yield from ahead
    ahead.clear()
    while (cells := more()) is not None:
        yield cells


# ── raw rows: evidence for the errors API, never more than it needs ───────────────────────
def _bounded(text: str) -> str:
    if contracts.unstorable(text):
        text = "".join("\ufffd" if ch == "\x00" or "\ud800" <= ch <= "\udfff" else ch
                       for ch in text)
    if len(text) > RAW_CHARS:
        return text[:RAW_CHARS] + f"… [{len(text) - RAW_CHARS:,} more characters]"
    return text


def raw_row(header: Sequence[str], cells: Sequence[str]) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for i, cell in enumerate(cells[:RAW_COLUMNS]):
        name = _bounded(header[i]) if i < len(header) else f"(column {i + 1})"
        if name in raw:
            name = f"{name} (column {i + 1})"
        raw[name] = _bounded(cell)
    if len(cells) > RAW_COLUMNS:
        raw["…"] = f"{len(cells) - RAW_COLUMNS:,} more cells"
    return raw


def _clean(value: Any) -> Any:
    """A JSON row as evidence: strings bounded and storable, at most RAW_COLUMNS keys."""
    if isinstance(value, str):
        return _bounded(value)
    if isinstance(value, dict):
        items = list(value.items())
        out = {_bounded(str(k)): _clean(v) for k, v in items[:RAW_COLUMNS]}
        if len(items) > RAW_COLUMNS:
            out["…"] = f"{len(items) - RAW_COLUMNS:,} more keys"
        return out
    if isinstance(value, list):
        return [_clean(v) for v in value[:RAW_COLUMNS]]
    return value


def _empty(skipped: Counter[str]) -> BatchRejected:
    rule = codes.EMPTY_FILE
    message = "The file contains no data rows."
    if skipped:
        message = ("The file contains no data rows, only " + describe_skipped(skipped) + ".")
    return BatchRejected(message, stage="parse", code=rule.code,
                         issues=[contracts.Issue(None, None, rule.code, rule.severity, message)])


def describe_skipped(skipped: Mapping[str, int]) -> str:
    """`2 total rows, 1 summary row`."""
    return ", ".join(f"{count:,} {reason}{'s' if count != 1 else ''}"
                     for reason, count in sorted(skipped.items()))


def _malformed(line: int, problem: str) -> BatchRejected:
    rule = codes.MALFORMED_CSV
    message = f"The file is malformed at line {line}: {problem}."
    return BatchRejected(message, stage="parse", code=rule.code,
                         issues=[contracts.Issue(None, None, rule.code, rule.severity, message)])


def header_lines(reader: Any, contract: contracts.Contract) -> Iterator[list[str]]:
    """The header's candidates: the first non-blank line, and for an export with title lines
    (``contract.preamble_lines``) that many more."""
    for _ in range(contract.preamble_lines + 1):
        line = next_csv(reader)
        while line is not None and not any(c.strip() for c in line):
            line = next_csv(reader)  # blank lines before the header
        if line is None:
            return
        yield line


def pick_header(contract: contracts.Contract, lines: list[list[str]]) -> tuple[int, list[str]]:
    """Which of ``lines`` is the header: the first that names every required column and the
    most of the contract's columns, or else the first (which then fails as a header); the
    lines above it are its titles, each as one text."""
    best, named = 0, 0
    for i, line in enumerate(lines):
        match = contracts.match_header(contract, line)
        if not match.missing and len(match.index) > named:
            best, named = i, len(match.index)
    return best, [" ".join(c for c in t if c.strip()) for t in lines[:best]]


def next_csv(reader: Any) -> list[str] | None:
    """The csv reader's next record, None at the end; its error as a malformed batch (csv's
    messages name the problem, never a cell's content)."""
    try:
        return list(next(reader))
    except StopIteration:
        return None
    except csv.Error as exc:
        raise _malformed(reader.line_num, str(exc)) from exc
