"""EPUB: the book's chapters in reading order (the OPF spine), each read as XHTML."""

from __future__ import annotations

import posixpath
import zipfile
from pathlib import Path

from lxml import etree

from worker.pipeline.formats import common, html, xml

_FIX = "export it again as EPUB (for example with Calibre) and upload it again."
_OPF = "{http://www.idpf.org/2007/opf}"
_DC = "{http://purl.org/dc/elements/1.1/}"
_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_XHTML = ("application/xhtml+xml", "text/html")


def read(path: Path, limits: common.Limits) -> common.Doc:
    common.check_zip(path, "EPUB", "META-INF/container.xml", limits, _FIX)
    try:
        with zipfile.ZipFile(path) as book:
            return _read(book)
    except (KeyError, etree.XMLSyntaxError, zipfile.BadZipFile, ValueError) as exc:
        raise common.damaged("EPUB", _FIX) from exc


def _read(book: zipfile.ZipFile) -> common.Doc:
    container = xml.parse(book.read("META-INF/container.xml"))
    rootfile = container.find(f".//{_CONTAINER}rootfile")
    if rootfile is None or not rootfile.get("full-path"):
        raise KeyError("rootfile")
    opf_path = rootfile.get("full-path", "")
    opf = xml.parse(book.read(opf_path))
    base = posixpath.dirname(opf_path)
    manifest = {item.get("id"): item for item in opf.iter(f"{_OPF}item")}
    title = opf.findtext(f".//{_DC}title")
    doc = common.Doc(title=common.one_line(title) if title else None)
    for ref in opf.iter(f"{_OPF}itemref"):
        item = manifest.get(ref.get("idref"))
        if item is None or item.get("media-type") not in _XHTML or not item.get("href"):
            continue
        member = posixpath.normpath(posixpath.join(base, item.get("href", "")))
        chapter = html.read_text(html.decode(book.read(member)), main_content=False)
        doc.add(*chapter.blocks)
    return doc
