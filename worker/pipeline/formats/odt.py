"""ODT (OpenDocument text): headings with their outline level, paragraphs, lists and tables."""

from __future__ import annotations

import zipfile
from pathlib import Path

from lxml import etree

from worker.pipeline.formats import common, xml

_FIX = "open it in LibreOffice Writer, save it as .odt (or .docx) and upload it again."
_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
_OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"


def read(path: Path, limits: common.Limits) -> common.Doc:
    common.check_zip(path, "ODT", "content.xml", limits, _FIX)
    try:
        with zipfile.ZipFile(path) as package:
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
        if tag == f"{_TEXT}h":
            level = int(node.get(f"{_TEXT}outline-level", "1") or 1)
            blocks.append(common.heading(level, _text(node)))
        elif tag == f"{_TEXT}p":
            blocks.append(common.collapse(_text(node)))
        elif tag == f"{_TEXT}list":
            for item in node.iter(f"{_TEXT}list-item"):
                if item.getparent() is not node:
                    continue
                for block in _blocks(item, lists + 1):
                    nested = block.startswith(("- ", "  "))
                    blocks.append(block if nested else "  " * lists + "- " + block)
        elif tag == f"{_TABLE}table":
            rows = [[_text(cell) for cell in row.iter(f"{_TABLE}table-cell")]
                    for row in node.iter(f"{_TABLE}table-row")]
            blocks.append(common.table(rows))
        elif tag in (f"{_TEXT}section", f"{_TEXT}list-item", f"{_TABLE}table-header-rows"):
            blocks.extend(_blocks(node, lists))
    return blocks


def _text(node: etree._Element) -> str:
    """A paragraph's text, with ODF's encoded spaces, tabs and line breaks."""
    parts: list[str] = []
    for event, element in etree.iterwalk(node, events=("start", "end")):
        if event == "start":
            if element.tag == f"{_TEXT}s":
                parts.append(" " * int(element.get(f"{_TEXT}c", "1") or 1))
            elif element.tag == f"{_TEXT}tab":
                parts.append("\t")
            elif element.tag == f"{_TEXT}line-break":
                parts.append("\n")
            elif element.tag == f"{_TEXT}note":
                continue
            if element.text and element.tag not in (f"{_TEXT}s", f"{_TEXT}tab"):
                parts.append(element.text)
        elif element is not node and element.tail:
            parts.append(element.tail)
    return "".join(parts)
