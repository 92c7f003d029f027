"""ODT (OpenDocument text): headings with their outline level, paragraphs, lists, tables, and
the text that lives inside a paragraph without being part of its sentence.

A footnote's body, a comment, and the paragraphs of a frame or drawing shape anchored in a
paragraph are elements inside that paragraph; read as its text they were glued to the words
around them ("rather1This is of course a simple footnote", issue 33). They become blocks of
their own after the paragraph (the footnote's number is dropped), so every word stays a word.
Generated indexes keep their rendered body (a bibliography, an alphabetical index), except a
table of contents, which only echoes the headings. Tracked deletions are not text.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from lxml import etree

from worker.pipeline.formats import common, office, xml

_FIX = "open it in LibreOffice Writer, save it as .odt (or .docx) and upload it again."
_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
_OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
_DRAW = "{urn:oasis:names:tc:opendocument:xmlns:drawing:1.0}"
_SVG = "{urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0}"
# Elements inside a paragraph whose text is not part of the paragraph's sentence.
_ASIDE = (f"{_TEXT}note", f"{_OFFICE}annotation")
# Generated indexes whose rendered body is content; a table of contents only echoes headings.
_INDEXES = ("bibliography", "alphabetical-index", "user-index", "illustration-index",
            "table-index", "object-index")
# Never text: deleted revisions, declarations, a shape's title and description, the number
# of a footnote (its body is read as a block of its own).
_SKIP = frozenset({f"{_TEXT}tracked-changes", f"{_TEXT}sequence-decls", f"{_SVG}title",
                   f"{_SVG}desc", f"{_TEXT}note-citation", f"{_TEXT}table-of-content"})


def read(path: Path, limits: common.Limits) -> common.Doc:
    common.check_zip(path, "ODT", "content.xml", limits, _FIX)
    try:
        with zipfile.ZipFile(path) as package:
            office.refuse_encrypted_odf(package, "ODT")
            root = xml.parse(package.read("content.xml"))
    except (KeyError, etree.XMLSyntaxError, zipfile.BadZipFile) as exc:
        raise common.damaged("ODT", _FIX) from exc
    body = root.find(f"{_OFFICE}body/{_OFFICE}text")
    doc = common.Doc()
    if body is not None:
        doc.add(*_blocks(body, 0))
    return doc


def _blocks(parent: etree._Element, lists: int) -> list[str]:
    blocks: list[str] = []
    for node in parent:
        tag = node.tag
        if tag in _SKIP:
            continue
        if tag == f"{_TEXT}h":
            text, asides = _text(node)
            level = int(node.get(f"{_TEXT}outline-level", "1") or 1)
            blocks.extend([common.heading(level, text), *asides])
        elif tag == f"{_TEXT}p":
            text, asides = _text(node)
            blocks.extend([common.collapse(text), *asides])
        elif tag == f"{_TEXT}list":
            for item in node.iterchildren(f"{_TEXT}list-item", f"{_TEXT}list-header"):
                for block in _blocks(item, lists + 1):
                    nested = block.startswith(("- ", "  "))
                    blocks.append(block if nested else "  " * lists + "- " + block)
        elif tag == f"{_TABLE}table":
            rows = [[_cell(cell) for cell in row.iter(f"{_TABLE}table-cell")]
                    for row in node.iter(f"{_TABLE}table-row")]
            blocks.append(common.table(rows))
        elif tag.startswith(_TEXT) and tag[len(_TEXT):] in _INDEXES:
            body = node.find(f"{_TEXT}index-body")
            if body is not None:
                blocks.extend(_blocks(body, lists))
        elif tag in (f"{_TEXT}section", f"{_TEXT}list-item", f"{_TABLE}table-header-rows",
                     f"{_TEXT}index-title", f"{_TEXT}note-body", f"{_OFFICE}annotation",
                     f"{_DRAW}text-box") or tag.startswith(_DRAW):
            blocks.extend(_blocks(node, lists))
    return blocks


def _cell(cell: etree._Element) -> str:
    return " ".join(block.lstrip("#- ") for block in _blocks(cell, 0))


def _text(node: etree._Element) -> tuple[str, list[str]]:
    """A paragraph's own text, with ODF's encoded spaces, tabs and line breaks; and the blocks
    of what sits inside it without being its text (notes, comments, frames, shapes)."""
    parts: list[str] = []
    asides: list[str] = []
    walk = etree.iterwalk(node, events=("start", "end"))
    for event, element in walk:
        tag = element.tag
        if event == "start":
            if element is not node and (tag in _ASIDE or (isinstance(tag, str)
                                                           and tag.startswith(_DRAW))):
                asides.extend(_blocks(element, 0) if tag.startswith(_DRAW)
                              else _blocks(_body(element), 0))
                walk.skip_subtree()  # its "end" still comes, and adds its tail
                parts.append(" ")  # what followed the note starts a new word
                continue
            if tag in _SKIP:
                walk.skip_subtree()
                continue
            if tag == f"{_TEXT}s":
                parts.append(" " * int(element.get(f"{_TEXT}c", "1") or 1))
            elif tag == f"{_TEXT}tab":
                parts.append("\t")
            elif tag == f"{_TEXT}line-break":
                parts.append("\n")
            if element.text and tag not in (f"{_TEXT}s", f"{_TEXT}tab"):
                parts.append(element.text)
        else:
            _tail(element, node, parts)
    return "".join(parts), [block for block in asides if block.strip()]


def _tail(element: etree._Element, node: etree._Element, parts: list[str]) -> None:
    if element is not node and element.tail:
        parts.append(element.tail)


def _body(aside: etree._Element) -> etree._Element:
    """Where a note or comment keeps its paragraphs."""
    body = aside.find(f"{_TEXT}note-body")
    return body if body is not None else aside
