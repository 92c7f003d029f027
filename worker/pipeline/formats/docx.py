"""DOCX: paragraphs with their heading levels, list items, and tables as Markdown tables."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import docx
from docx.table import Table, _Cell
from docx.text.paragraph import Paragraph

from shared import errors
from worker.pipeline.formats import common

_HEADING_STYLE = re.compile(r"Heading ([1-9])")
_FIX = "save it as .docx in Word and upload it again."


def read(path: Path, limits: common.Limits) -> common.Doc:
    if common.is_ole(path):
        # Word writes both legacy .doc and password-protected .docx as OLE compound files.
        raise errors.ExtractionError(
            "extract: the file is a password-protected DOCX or a legacy .doc, not a DOCX; "
            "remove the password or save it as .docx and upload it again.", stage=common.STAGE)
    common.check_zip(path, "DOCX", "word/document.xml", limits, _FIX)
    try:
        document = docx.Document(str(path))
        blocks = [_block(item) for item in document.iter_inner_content()]
    except Exception as exc:  # python-docx raises lxml, KeyError, ValueError... on bad parts
        raise common.damaged("DOCX", "open it in Word, save it again and upload it.") from exc
    doc = common.Doc()
    doc.add(*blocks)
    return doc


def _block(item: Paragraph | Table) -> str:
    if isinstance(item, Table):
        return common.table([[cell.text for cell in _distinct_cells(row.cells)] for row in item.rows])
    return _paragraph(item)


def _paragraph(paragraph: Paragraph) -> str:
    text = paragraph.text.strip()
    style = (paragraph.style.name or "") if paragraph.style is not None else ""
    heading = _HEADING_STYLE.fullmatch(style)
    if not text:
        return ""
    if style == "Title":
        return common.heading(1, text)
    if heading:
        return common.heading(int(heading.group(1)), text)
    if style.startswith("List") or _has_numbering(paragraph):
        return f"- {text}"
    return text


def _has_numbering(paragraph: Paragraph) -> bool:
    """Lists typed with the toolbar keep the Normal style and carry numbering properties."""
    properties = paragraph._p.pPr
    return properties is not None and properties.numPr is not None


def _distinct_cells(cells: list[_Cell]) -> Iterator[_Cell]:
    # A merged cell is returned once per grid column it spans; keep the first.
    previous = None
    for cell in cells:
        if cell._tc is not previous:
            yield cell
        previous = cell._tc
