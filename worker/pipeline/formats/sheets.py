"""Spreadsheets (XLSX, legacy XLS) and CSV as documents: each sheet under its name, its rows
as Markdown tables in row ranges small enough for one chunk, each repeating the header row.

A sheet of 100,000 rows becomes a few thousand self-describing tables ("Rows 2–31" with the
column names), never one giant block that the chunker would cut through without a header.
python-calamine reads both XLSX and the legacy binary XLS, without an office suite.
"""

from __future__ import annotations

import csv
import datetime
import io
import itertools
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import python_calamine

from worker.pipeline.formats import cellformats, common, numfmt, office

# A row range's table stops growing past this many characters: about one chunk of tokens.
BLOCK_CHARS = 700
_FIX = "open it in Excel or LibreOffice Calc, save it as .xlsx and upload it again."
_CSV_SNIFF = 64 * 1024
_TITLE_ROWS = 3


def read_workbook(path: Path, source_type: str, limits: common.Limits) -> common.Doc:
    kind = source_type.upper()
    if source_type == "xlsx":
        office.refuse_encrypted(path, kind)
        if common.is_ole(path):
            raise common.not_a("XLSX", "it is a legacy .xls; rename it to .xls and upload it "
                               "again.")
        common.check_zip(path, kind, "xl/workbook.xml", limits, _FIX)
    elif not common.is_ole(path):
        raise common.not_a("XLS (Excel 97–2003 workbook)", _FIX)
    formats = None
    try:
        workbook = python_calamine.CalamineWorkbook.from_path(str(path))
        # Numbers and dates as the user sees them ("1,599.99", "17-May-07"), ADR 0296.
        formats = cellformats.open_formats(path, source_type)
        doc = common.Doc()
        cells = 0
        for name in workbook.sheet_names:
            sheet = workbook.get_sheet_by_name(name)
            cells += sheet.total_height * sheet.total_width
            if cells > limits.max_cells:
                raise common.too_large(kind, limits.max_cells, "cells")
            rows: Iterator[Sequence[object]] = sheet.iter_rows()
            if formats is not None and sheet.start is not None:
                rows = formats.apply(name, rows, first_column=sheet.start[1])
            doc.add(common.heading(2, f"Sheet: {name}"))
            doc.add(*row_ranges(rows, level=3))
    except common.DocumentTooLarge:
        raise
    except Exception as exc:  # calamine raises its own errors, ValueError, ZipError...
        raise common.damaged(kind, _FIX) from exc
    finally:
        if formats is not None:
            formats.close()
    return doc


def read_csv(data: bytes, limits: common.Limits) -> common.Doc:
    text = common.decode_text(data)
    dialect = _dialect(text[:_CSV_SNIFF])
    rows = csv.reader(io.StringIO(text, newline=""), dialect)
    doc = common.Doc()
    doc.add(*row_ranges(_bounded(rows, limits), level=2))
    return doc


def _dialect(sample: str) -> type[csv.Dialect] | csv.Dialect:
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|")
    except csv.Error:
        return csv.excel


def _bounded(rows: Iterable[list[str]], limits: common.Limits) -> Iterator[list[str]]:
    cells = 0
    for row in rows:
        cells += len(row)
        if cells > limits.max_cells:
            raise common.too_large("CSV", limits.max_cells, "cells")
        yield row


def row_ranges(rows: Iterable[Sequence[object]], *, level: int) -> Iterator[str]:
    """Markdown tables of consecutive rows, each with the header row and a "Rows a–b" heading."""
    numbered = ((n, [_value(v) for v in row]) for n, row in enumerate(rows, start=1))
    numbered = ((n, row) for n, row in numbered if any(row))
    header = next(numbered, None)
    # Title lines above the table (one filled cell in a wider sheet) are text, not its header.
    for _ in range(_TITLE_ROWS):
        if header is None or sum(map(bool, header[1])) != 1 or len(header[1]) < 2:
            break
        yield next(filter(None, header[1]))
        header = next(numbered, None)
    if header is None:
        return
    head_row = header[1]
    block: list[list[str]] = []
    first = size = last = 0
    for number, row in itertools.chain(numbered, [(0, [])]):
        if block and (number == 0 or size + _width(row) > BLOCK_CHARS):
            yield common.heading(level, f"Rows {first}–{last}")
            yield common.table([head_row, *block])
            block, size = [], 0
        if number == 0:
            break
        if not block:
            first = number
        block.append(row)
        size += _width(row)
        last = number
    if first == 0:  # a header and nothing else
        yield common.table([head_row])


def _width(row: list[str]) -> int:
    return sum(len(v) + 3 for v in row)


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"  # as a spreadsheet shows a logical cell
    if isinstance(value, float):
        return numfmt.general(value)
    if isinstance(value, datetime.datetime) and value.time() == datetime.time():
        return value.date().isoformat()
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return common.one_line(str(value)) if value is not None else ""
