"""Tables inside PDFs as Markdown tables, found by pdfplumber where PDFium sees ruling lines.

PDFium gives text and positions but no cells. pdfplumber (MIT, on pdfminer.six) finds tables
from a page's ruling lines and reads their cells; it is 20–40 times slower per page than
PDFium's text (measured in docs/decisions/0294), so it runs only on pages that PDFium shows
drawing a grid of rules (`ruled`), and PDFium stays the
reader of every page's text. A table is kept only when it is one: at least two rows and two
columns, and its words are the words PDFium read on that page (pdfplumber glues words of
PDFs that draw no spaces; such a table would lose them, so the page keeps its lines).
The table replaces the run of the page's lines that holds its words, so each cell's text is
indexed once, in a Markdown table like those of DOCX (first row as header).
"""

from __future__ import annotations

import collections
import ctypes
import logging
import re
from pathlib import Path
from typing import Any

from worker.pipeline.formats import common

# A rule is a path thinner than _THIN points; a row or column is longer than _LONG points.
_THIN, _LONG = 3.0, 15.0
_SAME_WORDS = 0.9  # share of a table's words PDFium must have read on the page
_RUN_COVERS = 0.6  # share of a table's words the replaced run of lines must hold
_WORD = re.compile(r"\w+")

# pdfminer reports every oddity of a PDF on its logger; they are not ours to log.
logging.getLogger("pdfminer").setLevel(logging.ERROR)


def tables(path: Path, pages: dict[int, list[str]]) -> dict[int, list[tuple[str, set[str]]]]:
    """Markdown tables of the given pages (index -> its PDFium lines), with each table's words;
    pages whose tables fail the checks are left out."""
    import pdfplumber  # noqa: PLC0415 - only PDFs with ruled pages pay for it

    found: dict[int, list[tuple[str, set[str]]]] = {}
    with pdfplumber.open(path) as document:
        for index, lines in pages.items():
            words = collections.Counter(_words("\n".join(lines)))
            kept = []
            for table in document.pages[index].find_tables():
                rows = [[common.one_line(cell or "") for cell in row] for row in table.extract()]
                markdown = _checked(rows, words)
                if markdown:
                    kept.append((markdown, set(_words(" ".join(" ".join(r) for r in rows)))))
            if kept:
                found[index] = kept
    return found


def _checked(rows: list[list[str]], page_words: collections.Counter[str]) -> str:
    rows = [row for row in rows if any(row)]
    columns = [i for i in range(max((len(r) for r in rows), default=0))
               if any(i < len(r) and r[i] for r in rows)]
    if len(rows) < 2 or len(columns) < 2:
        return ""  # a box around text, not a table
    rows = [[row[i] if i < len(row) else "" for i in columns] for row in rows]
    words = collections.Counter(_words(" ".join(" ".join(row) for row in rows)))
    total = sum(words.values())
    if not total or sum((words & page_words).values()) < _SAME_WORDS * total:
        return ""
    return common.table(rows)


def splice(lines: list[str], markdown: str, words: set[str]) -> list[str]:
    """``lines`` with the run of lines made of the table's words replaced by the table; if no
    run holds most of its words, the table goes after the lines (nothing is lost)."""
    inside = [bool(_words(line)) and set(_words(line)) <= words for line in lines]
    best = (0, 0, 0)  # words covered, start, end
    start = None
    for i, flag in enumerate([*inside, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            covered = len(set().union(*(_words(line) for line in lines[start:i])) & words)
            best = max(best, (covered, start, i))
            start = None
    covered, first, end = best
    if covered < _RUN_COVERS * len(words):
        return [*lines, markdown]
    return [*lines[:first], markdown, *lines[end:]]


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def ruled(page: Any, pdfium_raw: Any) -> bool:
    """Whether a PDFium page draws a grid: at least three horizontal and two vertical rules,
    or cell-sized rectangles side by side on two rows or more. Boxes around text, underlines,
    a page's frame and the shading behind each line of a code block are not one (Debian's FAQ
    draws those, at two indents, and holds no table)."""
    rules = {"h": 0, "v": 0}
    rows: dict[int, set[int]] = {}  # a row of cells (its bottom) -> their columns (left edges)
    # PDFium's C calls on the page's own objects: pypdfium2's object wrappers cost more than
    # the whole page's text on pages of many text objects (Debian's FAQ: 5 ms a page).
    box = [ctypes.c_float() for _ in range(4)]
    pointers = [ctypes.byref(value) for value in box]
    for number in range(pdfium_raw.FPDFPage_CountObjects(page.raw)):
        handle = pdfium_raw.FPDFPage_GetObject(page.raw, number)
        if pdfium_raw.FPDFPageObj_GetType(handle) != pdfium_raw.FPDF_PAGEOBJ_PATH or \
                not pdfium_raw.FPDFPageObj_GetBounds(handle, *pointers):
            continue
        left, bottom, right, top = (value.value for value in box)
        width, height = right - left, top - bottom
        if height < _THIN and width > _LONG:
            rules["h"] += 1
        elif width < _THIN and height > _THIN * 3:
            rules["v"] += 1
        elif width > _LONG and height > _THIN * 3:
            rows.setdefault(round(bottom), set()).add(round(left))
        if rules["h"] >= 3 and rules["v"] >= 2:
            return True
    return sum(len(columns) > 1 for columns in rows.values()) >= 2
