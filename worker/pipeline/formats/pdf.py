"""PDF: the text layer, cleaned, with the outline's headings; OCR for pages without one.

Cleaning (docs/decisions/0213), each step cheap enough that born-digital extraction keeps its
speed:
- running headers and footers: a line in the top or bottom band of a page that is (digits
  aside) nearly the same as a band line of a nearby page, so both fixed headers and headers
  that name the current section go; page numbers alone in a band go too;
- table-of-contents lines with dot leaders, and whole pages that are mostly such lines;
- words hyphenated across a line break are joined (lower-case letters on both sides only,
  so `32-bit` stays);
- headings come from the PDF's outline (bookmarks): the line a bookmark names becomes a
  Markdown heading of the bookmark's depth. PDFs without an outline get no headings.
A page whose text layer is empty or garbage but which carries an image is OCR'd (formats/ocr.py).
"""

from __future__ import annotations

import collections
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_raw

from shared import errors
from worker.pipeline.formats import common, ocr, pdfheadings, pdftables

log = logging.getLogger(__name__)

_LOCKED = (pdfium_raw.FPDF_ERR_PASSWORD, pdfium_raw.FPDF_ERR_SECURITY)
_BAND = 0.08  # share of the page height that counts as header or footer band
_NEIGHBOURS = 2  # pages either side a running header is compared with
_PAGE_NUMBER = re.compile(
    r"(?i)(?:page\s+)?[-–—]?\s*(?:\d{1,5}|[ivxlcdm]{1,8})\s*[-–—]?(?:\s*(?:/|of)\s*\d{1,5})?")
_DIGITS = re.compile(r"\d+")
_LEADER = re.compile(r"(?:\.\s?){4,}\s*(?:\d{1,5}|[ivxlcdm]{1,8})\s*$|(?:…\s?){2,}\s*\d{1,5}\s*$",
                     re.IGNORECASE)
_TOC_PAGE_SHARE = 0.4
_HYPHENATED = re.compile(r"(?<=[a-zß-öø-ÿ])-\n(?=[a-zß-öø-ÿ])")
# PDFium reports a soft hyphen at a line end as U+FFFE (or U+0002); the word is one word.
_SOFT_HYPHEN = re.compile("[\xad\x02\ufffe]\n?")
_CHAPTER_LINE = re.compile(r"(?i)(chapter|part|appendix|section)\s+[\dIVXLC]+[.:]?|[\dIVXLC]+\.?")
_KEY = re.compile(r"\W+")
_HEADING_LINE = re.compile(r"(?m)^(#{1,6} .*)$")
_BLANK_RUNS = re.compile(r"\n{3,}")
# Fewer letters than this on a page with an image: the page is a scan (perhaps with a stamp).
_SCANNED_BELOW = 20


@dataclass
class _Page:
    lines: list[str]
    # (line index, y of its first character) of the first and last lines, when in a band
    top: list[tuple[int, float]] = field(default_factory=list)
    bottom: list[tuple[int, float]] = field(default_factory=list)
    needs_ocr: bool = False
    ruled: bool = False  # draws enough lines to hold a ruled table (pdftables.py)
    # page width covered by each font size (PDFs without an outline: pdfheadings.py)
    widths: collections.Counter[float] = field(default_factory=collections.Counter)


def read(path: Path, limits: common.Limits, on_ocr: Callable[[int], None],
         on_ocr_page: Callable[[], None] = lambda: None) -> common.Doc:
    document = _open(path)
    try:
        if len(document) > limits.max_pages:
            raise common.too_large("PDF", limits.max_pages, "pages")
        outline = _outline(document)
        pages = [_read_page(document, i, sized=not outline) for i in range(len(document))]
        sized = _sized_headings(document, pages) if not outline else []
        _ocr_pages(document, pages, limits, on_ocr, on_ocr_page)
    except pdfium.PdfiumError as exc:
        raise errors.ExtractionError(
            "extract: a page of the PDF is damaged and could not be read; "
            "re-save the PDF (for example with Print to PDF) and upload it again.",
            stage=common.STAGE) from exc
    finally:
        document.close()
    _drop_running_lines(pages)
    _tables(path, pages)
    for number, level, title in outline:
        if 0 <= number < len(pages):
            _mark_heading(pages[number], level, title)
    for number, level, title in sized:
        pdfheadings.mark(pages[number].lines, level, title)
    doc = common.Doc()
    for page in pages:
        doc.page()
        doc.add(_clean(page.lines))
    return doc


def _open(path: Path) -> pdfium.PdfDocument:
    try:
        return pdfium.PdfDocument(path)
    except pdfium.PdfiumError as exc:
        if exc.err_code in _LOCKED:
            raise errors.EncryptedDocument(
                "extract: the PDF is password-protected; remove the password and upload it again.",
                stage=common.STAGE) from exc
        raise errors.ExtractionError(
            "extract: the PDF is corrupt or truncated and could not be opened; "
            "check that it opens and upload it again.", stage=common.STAGE) from exc


def _read_page(document: pdfium.PdfDocument, index: int, sized: bool = False) -> _Page:
    page = document[index]
    try:
        textpage = page.get_textpage()
        try:
            raw = textpage.get_text_range()
            raw_lines = raw.split("\r\n")
            result = _Page([line.strip() for line in raw_lines])
            _find_bands(result, raw_lines, textpage, page.get_bbox())
        finally:
            textpage.close()
        result.needs_ocr = _is_garbage(raw) and _has_image(page)
        result.ruled = not result.needs_ocr and pdftables.ruled(page, pdfium_raw)
        if sized and not result.needs_ocr:
            result.widths = pdfheadings.widths(page)
        return result
    finally:
        page.close()


def _find_bands(page: _Page, raw_lines: list[str], textpage: Any,
                bbox: tuple[float, ...]) -> None:
    """Note which of the first and last two lines sit in the header and footer bands.

    One character box per candidate line, not the positions of every character: PDFium's
    character indices are those of the page text (its generated line breaks included).
    """
    _, bottom, _, top = bbox
    band = (top - bottom) * _BAND
    filled = [i for i, line in enumerate(page.lines) if line]
    wanted = sorted(set(filled[:2] + filled[-2:]))
    starts: dict[int, int] = {}
    offset = 0
    for i, line in enumerate(raw_lines[: wanted[-1] + 1] if wanted else []):
        if i in wanted:
            # Its first visible character: the box says where the line really is.
            starts[i] = offset + len(line) - len(line.lstrip())
        offset += len(line) + 2
    # The second line is looked at only when the first is in the band (one box per page on
    # most pages of most documents: each box is a call into PDFium).
    for i in filled[:2]:
        _, low, _, high = textpage.get_charbox(starts[i])
        if high < top - band:
            break
        page.top.append((i, round(low)))
    for i in reversed(filled[-2:]):
        _, low, _, _ = textpage.get_charbox(starts[i])
        if low > bottom + band:
            break
        page.bottom.append((i, round(low)))


_ALNUM = re.compile(r"\w")
_ENOUGH_LETTERS = re.compile(rf"(?:\W*\w){{{_SCANNED_BELOW}}}")
_UNUSABLE = re.compile("[\ufffd\ue000-\uf8ff]")


def _is_garbage(text: str) -> bool:
    """Too little text for a page, or mostly characters no reader could use."""
    if not _ENOUGH_LETTERS.match(text):
        return True
    sample = text[:2000]  # a page of real text shows it early; no need to count it all
    return bool(_UNUSABLE.search(sample)) and \
        len(_UNUSABLE.findall(sample)) > len(_ALNUM.findall(sample))


def _has_image(page: Any) -> bool:
    return any(True for _ in page.get_objects(filter=[pdfium_raw.FPDF_PAGEOBJ_IMAGE], max_depth=2))


def _outline(document: pdfium.PdfDocument) -> list[tuple[int, int, str]]:
    """(page index, depth from 1, title) of each bookmark that points at a page."""
    marks: list[tuple[int, int, str]] = []
    for bookmark in document.get_toc(max_depth=6):
        dest = bookmark.get_dest()
        index = dest.get_index() if dest is not None else None
        title = common.one_line(bookmark.get_title() or "")
        if index is not None and title:
            marks.append((index, bookmark.level + 1, title))
    return marks


def _sized_headings(document: pdfium.PdfDocument,
                    pages: list[_Page]) -> list[tuple[int, int, str]]:
    """(page index, level, text) of the lines set larger than the body text."""
    wanted = pdfheadings.heading_sizes([page.widths for page in pages])
    found: dict[int, list[tuple[float, str]]] = {}
    for index, page in enumerate(pages):
        if wanted & page.widths.keys():
            pdf_page = document[index]
            try:
                found[index] = pdfheadings.headings(pdf_page, wanted)
            finally:
                pdf_page.close()
    level = pdfheadings.levels(list(found.values()))
    return [(index, level[size], text) for index, runs in found.items() for size, text in runs]


def _tables(path: Path, pages: list[_Page]) -> None:
    """Ruled tables of the pages that draw them, as Markdown tables in place of their lines."""
    ruled = {i: page.lines for i, page in enumerate(pages) if page.ruled}
    if not ruled:
        return
    try:
        found = pdftables.tables(path, ruled)
    except Exception as exc:  # noqa: BLE001 - pdfminer's errors on odd PDFs: keep the lines
        log.info("pdf tables skipped", extra={"error_type": type(exc).__name__})
        return
    for index, tables in found.items():
        for markdown, words in tables:
            # Blank lines around it: the table is a block of its own.
            pages[index].lines = pdftables.splice(pages[index].lines, f"\n{markdown}\n", words)


# ── OCR ────────────────────────────────────────────────────────────────────────────────────
def _ocr_pages(document: pdfium.PdfDocument, pages: list[_Page], limits: common.Limits,
               on_ocr: Callable[[int], None], on_page: Callable[[], None]) -> None:
    todo = [i for i, page in enumerate(pages) if page.needs_ocr]
    if not todo:
        return
    if len(todo) > limits.max_ocr_pages:
        raise common.too_large("PDF", limits.max_ocr_pages, "scanned pages to OCR")
    on_ocr(len(todo))
    with ocr.engine() as api:
        for index in todo:
            page = document[index]
            try:
                image = _render(page, limits).to_pil()
            finally:
                page.close()
            text = ocr.read_image(api, image)
            pages[index] = _Page(text.split("\n"))
            on_page()


def _render(page: Any, limits: common.Limits) -> Any:
    width, height = page.get_size()
    scale = ocr.DPI / 72
    pixels = width * height * scale * scale
    if pixels > limits.max_image_pixels:  # a poster-sized page: read it at a lower resolution
        scale *= (limits.max_image_pixels / pixels) ** 0.5
    return page.render(scale=scale, grayscale=True)


# ── cleaning ───────────────────────────────────────────────────────────────────────────────
def _tokens(line: str) -> list[str]:
    return _DIGITS.sub("#", line.casefold()).split()


def _drop_running_lines(pages: list[_Page]) -> None:
    """Blank out running headers/footers and page numbers found in the bands of each page.

    A band line is a running line when a band line of a nearby page sits at the same height
    and reads nearly the same (digits aside): a chapter's pages share their header even when
    it also names the current section, and a two-page chapter's header repeats on one
    neighbour only (so "most pages" would keep it). A page number alone in a band goes in any
    case. A page never loses its only text this way: a one-line page of a short document
    ("This is a page about France", then "…Denmark") is its body, not a header (issue 33).
    """
    tokens = {(id(page), j): _tokens(page.lines[j])
              for page in pages for j, _ in page.top + page.bottom}
    for i, page in enumerate(pages):
        near = pages[max(0, i - _NEIGHBOURS): i] + pages[i + 1: i + 1 + _NEIGHBOURS]
        doomed: set[int] = set()
        numbers: set[int] = set()
        for at_top in (True, False):
            for index, y in page.top if at_top else page.bottom:
                line = page.lines[index]
                if _PAGE_NUMBER.fullmatch(line):
                    numbers.add(index)
                elif _repeats(tokens[id(page), index], y, near, tokens, at_top):
                    doomed.add(index)
        if doomed and all(not line or j in doomed or j in numbers
                          for j, line in enumerate(page.lines)):
            doomed.clear()  # nothing else on the page: its lines are its body
        for index in sorted(doomed | numbers, reverse=True):
            del page.lines[index]


def _repeats(mine: list[str], y: float, near: list[_Page],
             tokens: dict[tuple[int, int], list[str]], at_top: bool) -> bool:
    """Whether a band line recurs at the same height on a nearby page."""
    return any(abs(y - y2) <= 2 and _same_line(mine, tokens[id(other), j])
               for other in near for j, y2 in (other.top if at_top else other.bottom))


def _same_line(ta: list[str], tb: list[str]) -> bool:
    if ta == tb:
        return True
    prefix = 0
    for x, y in zip(ta, tb, strict=False):
        if x != y:
            break
        prefix += 1
    union = set(ta) | set(tb)
    return prefix >= 2 or (bool(union) and len(set(ta) & set(tb)) / len(union) >= 0.6)


def _mark_heading(page: _Page, level: int, title: str) -> None:
    """Turn the line(s) a bookmark names into a heading; else put the heading atop the page."""
    want = _KEY.sub("", title.casefold())
    lines = page.lines
    for index in range(len(lines)):
        joined = ""
        for span in range(3):  # a long title wraps over up to three lines
            if index + span >= len(lines) or lines[index + span].startswith("#"):
                break
            joined = f"{joined} {lines[index + span]}".strip()
            got = _KEY.sub("", joined.casefold())
            if got and (got == want or (got.endswith(want) and len(got) - len(want) < 12)):
                start = index
                if start > 0 and _CHAPTER_LINE.fullmatch(lines[start - 1]):
                    joined = f"{lines[start - 1]} {joined}"
                    start -= 1
                lines[start: index + span + 1] = [common.heading(level, joined)]
                return
    # Atop the page, after the headings already put there: bookmarks keep their order.
    at = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    lines.insert(at, common.heading(level, title))


def _is_leader(line: str) -> bool:
    # The substring test first: the regex is only worth running on the few lines with dots.
    return (". ." in line or "...." in line or "……" in line) and bool(_LEADER.search(line))


def _clean(lines: list[str]) -> str:
    leaders = sum(map(_is_leader, lines))
    if leaders and leaders >= _TOC_PAGE_SHARE * sum(bool(line) for line in lines):
        # A contents page: its entries would only echo the headings, each with a page number.
        lines = [line for line in lines if line.startswith("#")]
    else:
        lines = [line for line in lines if not _is_leader(line)]
    text = "\n".join(lines).strip()
    # Each substitution only where its cheap substring test says it can apply: most pages have
    # no hyphenated break and no heading, and the 50-page bench must keep its speed.
    if "\xad" in text or "\x02" in text or "\ufffe" in text:
        text = _SOFT_HYPHEN.sub("", text)
    if "-\n" in text:
        text = _HYPHENATED.sub("", text)
    if "#" in text:
        # Headings stand apart, so the chunker sees them as Markdown headings, not text lines.
        text = _BLANK_RUNS.sub("\n\n", _HEADING_LINE.sub("\n\n\\1\n\n", text)).strip()
    return text
