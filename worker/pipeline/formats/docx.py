"""DOCX: paragraphs with their heading levels, list items, tables as Markdown tables, and the
text Word keeps outside the plain paragraph runs: content controls (structured document tags),
text boxes and footnotes/endnotes.

The body is walked on its XML rather than through python-docx's paragraph text, which reads
only a paragraph's direct runs: a run inside a content control, a hyperlink's field or a text
box would be lost (issue 33: a text-box document gave 10 of its 38 words). Word writes each
text box twice (a DrawingML one and, under `mc:Fallback`, a VML copy for old readers); the
copy is skipped. A text box's paragraphs become blocks after the paragraph that anchors them,
so their words are never glued to the anchor's. python-docx still opens the package and
names each paragraph's style (heading levels, lists) and each table's merged cells.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docx
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.oxml.ns import qn
from docx.oxml.parser import parse_xml
from docx.text.paragraph import Paragraph
from lxml import etree

from worker.pipeline.formats import common, office

_HEADING_STYLE = re.compile(r"Heading ([1-9])")
_FIX = "save it as .docx in Word and upload it again."
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
_P, _TBL, _SDT, _CONTENT = f"{_W}p", f"{_W}tbl", f"{_W}sdt", f"{_W}sdtContent"
_CUSTOM_XML, _TEXTBOX = f"{_W}customXml", f"{_W}txbxContent"
# Inline elements that stand for a character (python-docx reads them the same way).
_CHARACTERS = {f"{_W}tab": "\t", f"{_W}br": "\n", f"{_W}cr": "\n", f"{_W}noBreakHyphen": "-",
               f"{_W}softHyphen": ""}
# Footnote and endnote parts, and the heading their notes go under.
_NOTES = (("word/footnotes.xml", f"{_W}footnote", "Footnotes"),
          ("word/endnotes.xml", f"{_W}endnote", "Endnotes"))


def read(path: Path, limits: common.Limits) -> common.Doc:
    office.refuse_encrypted(path, "DOCX")
    if common.is_ole(path):
        raise common.not_a("DOCX", "it is a legacy Word .doc; save it as .docx in Word and "
                           "upload it again.")
    names = common.check_zip(path, "DOCX", "word/document.xml", limits, _FIX)
    try:
        document = docx.Document(str(path))
        walker = _Walker(document)
        blocks = list(walker.blocks(document.element.body))
        blocks.extend(_margins(document, walker, set(blocks)))
        for part, tag, title in _NOTES:
            if part in names:
                blocks.extend(_notes(_part(document, f"/{part}"), tag, title, walker))
    except Exception as exc:  # python-docx raises lxml, KeyError, ValueError... on bad parts
        raise common.damaged("DOCX", "open it in Word, save it again and upload it.") from exc
    doc = common.Doc()
    doc.add(*blocks)
    return doc


class _Walker:
    """Turns body-level WordprocessingML (body, cell, text box, note) into Markdown blocks."""

    def __init__(self, document: Any) -> None:
        self.document = document

    def blocks(self, parent: etree._Element, *, flat: bool = False) -> Iterator[str]:
        """``flat``: a table inside a table cell is its cells' text, not a table of its own."""
        for child in parent:
            tag = child.tag
            if tag == _P:
                yield from self._paragraph(child)
            elif tag == _TBL and flat:
                yield " ".join(self.cell_text(cell) for row in _unwrapped(child, f"{_W}tr")
                               for cell in _unwrapped(row, f"{_W}tc"))
            elif tag == _TBL:
                yield self._table(child)
            elif tag in (_SDT, _CUSTOM_XML):  # a content control or custom XML around blocks
                if _is_contents(child):
                    continue  # a table of contents only echoes the headings, with page numbers
                content = child.find(_CONTENT) if tag == _SDT else child
                if content is not None:
                    yield from self.blocks(content, flat=flat)

    def _paragraph(self, element: etree._Element) -> Iterator[str]:
        boxes: list[etree._Element] = []
        text = _text(element, boxes).strip()
        if text:
            yield _styled(Paragraph(element, self.document), text)
        for box in boxes:  # after the paragraph that anchors them, as blocks of their own
            yield from self.blocks(box)

    def _table(self, element: etree._Element) -> str:
        # Rows and cells may each sit inside a content control; a cell merged down from the
        # row above (vMerge continue) is empty, so its text appears once, in its first row.
        rows = [[self.cell_text(cell) for cell in _unwrapped(row, f"{_W}tc")]
                for row in _unwrapped(element, f"{_W}tr")]
        return common.table(rows)

    def cell_text(self, cell: etree._Element) -> str:
        return " ".join(block.lstrip("#- ") for block in self.blocks(cell, flat=True))


def _text(element: etree._Element, boxes: list[etree._Element]) -> str:
    """A paragraph's characters in order, inline content controls and fields included; its text
    boxes are appended to ``boxes`` instead, and VML fallback copies are skipped."""
    parts: list[str] = []
    walk = etree.iterwalk(element, events=("start",))
    for _, node in walk:
        tag = node.tag
        if tag == _FALLBACK:
            walk.skip_subtree()
        elif tag == _TEXTBOX:
            boxes.append(node)
            walk.skip_subtree()
        elif tag == f"{_W}t":
            parts.append(node.text or "")
        elif tag in _CHARACTERS:
            parts.append(_CHARACTERS[tag])
    return "".join(parts)


def _styled(paragraph: Paragraph, text: str) -> str:
    style = (paragraph.style.name or "") if paragraph.style is not None else ""
    heading = _HEADING_STYLE.fullmatch(style)
    if style == "Title":
        return common.heading(1, text)
    if heading:
        return common.heading(int(heading.group(1)), text)
    if style.startswith("List") or _has_numbering(paragraph):
        return f"- {common.one_line(text)}"
    return text


def _has_numbering(paragraph: Paragraph) -> bool:
    """Lists typed with the toolbar keep the Normal style and carry numbering properties."""
    properties = paragraph._p.pPr
    return properties is not None and properties.numPr is not None


def _is_contents(element: etree._Element) -> bool:
    gallery = element.find(f"{_W}sdtPr/{_W}docPartObj/{_W}docPartGallery")
    return gallery is not None and gallery.get(qn("w:val")) == "Table of Contents"


def _unwrapped(parent: etree._Element, tag: str) -> Iterator[etree._Element]:
    """``parent``'s children of ``tag``, looking through content controls and custom XML."""
    for child in parent:
        if child.tag == tag:
            yield child
        elif child.tag in (_SDT, _CUSTOM_XML):
            content = child.find(_CONTENT) if child.tag == _SDT else child
            if content is not None:
                yield from _unwrapped(content, tag)


def _part(document: Any, name: str) -> Any:
    return next((rel.target_part for rel in document.part.rels.values()
                 if not rel.is_external and str(rel.target_part.partname) == name), None)


def _margins(document: Any, walker: _Walker, seen: set[str]) -> list[str]:
    """The text of the headers and footers (text boxes included), each distinct block once,
    after the body: a title or a company name there is searched for; a section's header that
    repeats on every printed page is stored once."""
    blocks: list[str] = []
    rels = [rel for rel in document.part.rels.values()
            if not rel.is_external and rel.reltype in (RT.HEADER, RT.FOOTER)]
    for rel in sorted(rels, key=lambda r: (r.reltype != RT.HEADER, str(r.target_part.partname))):
        for block in walker.blocks(parse_xml(rel.target_part.blob)):
            if block not in seen:
                seen.add(block)
                blocks.append(block)
    return blocks


def _notes(part: Any, tag: str, title: str, walker: _Walker) -> list[str]:
    """The real notes of a footnotes/endnotes part (not Word's separator lines), one block each
    under one heading at the end: where a reader of the printed page finds them."""
    if part is None:
        return []
    # python-docx's parser (entities off), so its paragraphs know their styles.
    root = parse_xml(part.blob)
    notes = [" ".join(walker.blocks(note)) for note in root.iter(tag)
             if note.get(qn("w:type")) in (None, "normal")]
    notes = [note for note in notes if note.strip()]
    return [common.heading(2, title), *notes] if notes else []
