"""Headings of PDFs without an outline, from font sizes PDFium reports per text object.

A PDF with bookmarks gets its headings from them (pdf.py). Without, a line set in a font
clearly larger than the body text is a heading: sizes come from PDFium's text objects (one
per run of text, not per character: ADR 0213 found per-character sizes too slow), read in
two passes so that only the few large objects have their text read. The body size is the
size that covers the most page width; a size at least _RATIO times larger that sets little of
the text, used for a short line with letters, is a heading, and the distinct heading sizes,
largest first, are levels 1 to _LEVELS. pdfplumber/pdfminer give the same sizes per character at 20-40x
PDFium's cost (docs/decisions/0294), so PDFium stays the reader here.
"""

from __future__ import annotations

import collections
import ctypes
import re
from dataclasses import dataclass
from typing import Any

import pypdfium2.raw as pdfium_raw

from worker.pipeline.formats import common

_RATIO = 1.15
_MAX_RATIO = 4.0
_MAX_SHARE = 0.1
_LEVELS = 3
_MAX_WORDS = 15
_KEY = re.compile(r"\W+")
_LETTERS = re.compile(r"[^\W\d_]{2}")


@dataclass
class _Run:
    size: float
    bottom: float
    objects: list[Any]


def _objects(page: Any) -> Any:
    """(size as drawn, width, bottom, object) of each text object of a page."""
    size = ctypes.c_float()
    for obj in page.get_objects(filter=[pdfium_raw.FPDF_PAGEOBJ_TEXT], max_depth=2):
        if not pdfium_raw.FPDFTextObj_GetFontSize(obj.raw, ctypes.byref(size)):
            continue
        matrix = obj.get_matrix()
        scale = (matrix.c ** 2 + matrix.d ** 2) ** 0.5  # the size as drawn, not as declared
        left, bottom, right, _ = obj.get_bounds()
        yield round(size.value * scale, 1), right - left, bottom, obj


def widths(page: Any) -> collections.Counter[float]:
    """First pass: how much page width each font size covers (no text is read)."""
    covered: collections.Counter[float] = collections.Counter()
    for size, width, _, _ in _objects(page):
        covered[size] += width
    return covered


def heading_sizes(pages: list[collections.Counter[float]]) -> set[float]:
    """The sizes that set headings: larger than the body's (the size covering the most page
    width) by _RATIO, at most _MAX_RATIO times it (a mis-scaled object is no heading), and
    covering under _MAX_SHARE of the text (a size used that much is a second body size, such
    as a form's labels)."""
    total: collections.Counter[float] = collections.Counter()
    for covered in pages:
        total.update(covered)
    if not total:
        return set()
    body = total.most_common(1)[0][0]
    everything = sum(total.values())
    return {size for size, width in total.items()
            if body * _RATIO <= size <= body * _MAX_RATIO and width < _MAX_SHARE * everything}


def headings(page: Any, wanted: set[float]) -> list[tuple[float, str]]:
    """Second pass, on a page that uses a heading size: (size, text) of its runs in one
    (consecutive objects of one size on one baseline, or on the next line below: a wrapped
    heading); only their text is read."""
    textpage = None
    runs: list[_Run] = []
    for size, _, bottom, obj in _objects(page):
        if size not in wanted:
            continue
        if runs and runs[-1].size == size and -2 < runs[-1].bottom - bottom < size * 1.6:
            runs[-1].objects.append(obj)
            runs[-1].bottom = bottom
        else:
            runs.append(_Run(size, bottom, [obj]))
    found = []
    try:
        for run in runs:
            if textpage is None:
                textpage = page.get_textpage()
            text = common.one_line(" ".join(_text(obj, textpage) for obj in run.objects))
            if _LETTERS.search(text) and len(text.split()) <= _MAX_WORDS:
                found.append((run.size, text))
    finally:
        if textpage is not None:
            textpage.close()
    return found


def levels(found: list[list[tuple[float, str]]]) -> dict[float, int]:
    """Heading level of each heading size: the largest is 1, then 2, the rest _LEVELS."""
    distinct = sorted({size for page in found for size, _ in page}, reverse=True)
    return {size: min(i + 1, _LEVELS) for i, size in enumerate(distinct)}


def mark(lines: list[str], level: int, text: str) -> None:
    """Turn the line (or two wrapped lines) that reads ``text`` into a heading, if there is one."""
    want = _KEY.sub("", text.casefold())
    if not want:
        return
    for index, line in enumerate(lines):
        if line.startswith(("#", "|")):
            continue
        got = _KEY.sub("", line.casefold())
        if got == want:
            lines[index] = common.heading(level, line)
            return
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if got and want.startswith(got) and _KEY.sub("", following.casefold()) == want[len(got):]:
            lines[index: index + 2] = [common.heading(level, f"{line} {following}")]
            return


def _text(obj: Any, textpage: Any) -> str:
    length = pdfium_raw.FPDFTextObj_GetText(obj.raw, textpage.raw, None, 0)
    if length <= 2:
        return ""
    buffer = ctypes.create_string_buffer(length)
    pdfium_raw.FPDFTextObj_GetText(obj.raw, textpage.raw,
                                   ctypes.cast(buffer, ctypes.POINTER(ctypes.c_ushort)), length)
    return buffer.raw[: length - 2].decode("utf-16-le", errors="replace")
