"""Which number format each spreadsheet cell is shown with, beside calamine's stored values.

calamine reads values fast but not the formats, so this reads the style side by itself:
XLSX: styles.xml's cellXfs (each style's numFmtId) and each cell's `s` attribute, streamed
from the sheet's XML row by row; XLS: xlrd's XF records. A workbook whose styles carry no
number format but General and `@` costs nothing more (most exports); a workbook this module
cannot read keeps its stored values (a format is what the user sees, never what we need to
read the text). ADR 0296.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import re
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from lxml import etree

from worker.pipeline.formats import numfmt, xml

_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PACKAGE_REL = "http://schemas.openxmlformats.org/package/2006/relationships"
Row = tuple[int, dict[int, numfmt.Formatter]]


class WorkbookFormats:
    """Each sheet's rows with the formatter of every cell that has a number format."""

    def __init__(self, rows_of: dict[str, object], close: object = None) -> None:
        self._rows_of = rows_of  # sheet name → a callable giving (row, {column: formatter})
        self._close = close

    def close(self) -> None:
        if callable(self._close):
            self._close()

    def apply(self, sheet: str, rows: Iterable[Sequence[object]],
              first_column: int) -> Iterator[Sequence[object]]:
        """calamine's rows (row i is the sheet's row i, columns from ``first_column``) with
        each number or date shown as its format renders it."""
        rows_of = self._rows_of.get(sheet)
        if rows_of is None:
            yield from rows
            return
        styled: Iterator[Row] = rows_of()  # type: ignore[operator]
        pending = next(styled, None)
        for index, row in enumerate(rows):
            while pending is not None and pending[0] < index:
                pending = next(styled, None)
            if pending is None or pending[0] != index:
                yield row
                continue
            yield _rendered(row, pending[1], first_column)


def _rendered(row: Sequence[object], cells: dict[int, numfmt.Formatter],
              first_column: int) -> list[object]:
    shown = list(row)
    for column, render in cells.items():
        at = column - first_column
        if 0 <= at < len(shown) and not isinstance(shown[at], str):
            text = render(shown[at])
            if text is not None:
                shown[at] = text
    return shown


def open_formats(path: Path, source_type: str) -> WorkbookFormats | None:
    """The workbook's cell formats, or None when no cell can show anything but General."""
    try:
        return _xlsx(path) if source_type == "xlsx" else _xls(path)
    except Exception:  # noqa: BLE001 — damaged styles: the stored values are still the text
        return None


# ── XLSX ──────────────────────────────────────────────────────────────────────────────────

def _xlsx(path: Path) -> WorkbookFormats | None:
    archive = zipfile.ZipFile(path)
    try:
        workbook = xml.parse(archive.read("xl/workbook.xml"))
        pr = workbook.find(f"{{{_MAIN}}}workbookPr")
        date1904 = pr is not None and pr.get("date1904") in ("1", "true")
        styles = _xlsx_styles(archive, date1904)
        if not any(styles):
            archive.close()
            return None
        members = _xlsx_sheet_members(archive, workbook)
    except Exception:
        archive.close()
        raise

    def rows_of(member: str):
        return lambda: _xlsx_rows(archive, member, styles)

    return WorkbookFormats({name: rows_of(m) for name, m in members.items()}, archive.close)


def _xlsx_styles(archive: zipfile.ZipFile, date1904: bool) -> list[numfmt.Formatter | None]:
    """The formatter of each cell style (cellXfs), None where it shows General."""
    if "xl/styles.xml" not in archive.namelist():
        return []
    styles = xml.parse(archive.read("xl/styles.xml"))
    codes = {int(f.get("numFmtId")): f.get("formatCode", "")
             for f in styles.iter(f"{{{_MAIN}}}numFmt")}
    xfs = styles.find(f"{{{_MAIN}}}cellXfs")
    if xfs is None:
        return []
    out = []
    for xf in xfs.iter(f"{{{_MAIN}}}xf"):
        number = int(xf.get("numFmtId", "0"))
        code = codes.get(number, numfmt.BUILTIN.get(number, "General"))
        out.append(numfmt.formatter(code, date1904))
    return out


def _xlsx_sheet_members(archive: zipfile.ZipFile, workbook: etree._Element) -> dict[str, str]:
    rels = xml.parse(archive.read("xl/_rels/workbook.xml.rels"))
    targets = {r.get("Id"): r.get("Target", "") for r in rels.iter(f"{{{_PACKAGE_REL}}}Relationship")}
    members = {}
    for sheet in workbook.iter(f"{{{_MAIN}}}sheet"):
        target = targets.get(sheet.get(f"{{{_REL}}}id"), "")
        member = target.lstrip("/") if target.startswith("/") else posixpath.normpath(
            posixpath.join("xl", target))
        members[sheet.get("name", "")] = member
    return members


# A cell's start tag, any prefix: attributes in any order; `s` is its style, `r` its place.
_CELL = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?c\s([^>]*)>")
_STYLE = re.compile(rb'\bs="(\d+)"')
_REF = re.compile(rb'\br="([A-Z]{1,3})(\d+)"')
_CHUNK = 1 << 20


def _xlsx_rows(archive: zipfile.ZipFile, member: str,
               styles: list[numfmt.Formatter | None]) -> Iterator[Row]:
    """(row index, {column: formatter}) for each row holding a cell with a number format.

    The sheet's XML is scanned for cell start tags, not parsed: lxml's iterparse costs 2.3
    times as much here (ADR 0296), and only the `s` and `r` attributes matter. A styled cell
    without its `r` (optional in the standard, written by no common tool) ends the scan:
    the rest of the sheet keeps its stored values.
    """
    row_index = -1
    cells: dict[int, numfmt.Formatter] = {}
    for style, ref in _styled_cells(archive, member):
        if ref is None:
            break
        index = int(ref.group(2)) - 1
        if index != row_index:
            if cells:
                yield row_index, cells
            row_index, cells = index, {}
        render = styles[style] if style < len(styles) else None
        if render is not None:
            cells[_column(ref.group(1).decode())] = render
    if cells:
        yield row_index, cells


def _styled_cells(archive: zipfile.ZipFile, member: str
                  ) -> Iterator[tuple[int, re.Match[bytes] | None]]:
    """Each cell with a style: (style index, its reference), read a megabyte at a time."""
    with contextlib.closing(archive.open(member)) as stream:
        rest = b""
        while chunk := stream.read(_CHUNK):
            data = rest + chunk
            cut = data.rfind(b">") + 1
            rest = data[cut:]
            for tag in _CELL.finditer(data, 0, cut):
                found = _STYLE.search(tag.group(1))
                if found is not None:
                    yield int(found.group(1)), _REF.search(tag.group(1))


def _column(ref: str) -> int:
    number = 0
    for char in ref:
        if not char.isalpha():
            break
        number = number * 26 + (ord(char.upper()) - 64)
    return number - 1


# ── XLS ───────────────────────────────────────────────────────────────────────────────────

_LOCALE_BUILTINS = {5, 6, 7, 8, 41, 42, 43, 44}


def _xls(path: Path) -> WorkbookFormats | None:
    import xlrd  # only legacy .xls needs it

    book = xlrd.open_workbook(str(path), formatting_info=True, on_demand=True,
                              logfile=io.StringIO())
    styles = []
    for xf in book.xf_list:
        found = book.format_map.get(xf.format_key)
        code = found.format_str if found is not None else "General"
        # xlrd fills missing built-ins with older strings ("m/d/yy" for 14); the currency
        # ones (5-8, 41-44) follow the saving locale, so the file's own string wins there.
        if xf.format_key in numfmt.BUILTIN and xf.format_key not in _LOCALE_BUILTINS:
            code = numfmt.BUILTIN[xf.format_key]
        styles.append(numfmt.formatter(code, bool(book.datemode)))
    if not any(styles):
        book.release_resources()
        return None

    def rows_of(name: str):
        return lambda: _xls_rows(book, name, styles)

    return WorkbookFormats({name: rows_of(name) for name in book.sheet_names()},
                           book.release_resources)


def _xls_rows(book, name: str, styles: list[numfmt.Formatter | None]) -> Iterator[Row]:
    sheet = book.sheet_by_name(name)
    for index in range(sheet.nrows):
        cells = {}
        for column in range(sheet.row_len(index)):
            render = styles[sheet.cell_xf_index(index, column)]
            if render is not None:
                cells[column] = render
        if cells:
            yield index, cells
