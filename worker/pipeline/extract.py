"""Extract stage: turn an uploaded file into Markdown text, whatever its format.

Every type comes out in the same shape so the chunker can treat them alike: blocks separated by
a blank line, headings as `#` … `######` lines at their real level, list items as `- …`,
tables as Markdown tables; paged formats (PDF, images, slides) also say where each page starts.
One module per format reads it (worker/pipeline/formats/); this one picks the reader, applies
the limits, and assembles the result. Anything wrong with the file itself becomes a
`BadDocument` subclass that tells the user what to do; nothing here retries, because retrying
cannot fix a bad file.
"""

from __future__ import annotations

import bisect
import pathlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from shared import errors
from worker.pipeline.formats import (
    common,
    docx,
    epub,
    html,
    images,
    jsondoc,
    mail,
    odt,
    pdf,
    rtf,
    sheets,
    slides,
)

SOURCE_TYPES = ("pdf", "docx", "html", "txt", "md", "pptx", "xlsx", "xls", "csv", "eml", "msg",
                "epub", "odt", "rtf", "json", "png", "jpeg", "tiff", "webp")
# Other spellings of the same types (attachments are typed by their file name).
ALIASES = {"htm": "html", "xhtml": "html", "markdown": "md", "jpg": "jpeg", "tif": "tiff",
           "text": "txt"}
IMAGE_TYPES = ("png", "jpeg", "tiff", "webp")
Limits = common.Limits

_STAGE = common.STAGE
_NO_TEXT = (
    "extract: the document contains no extractable text (a scanned PDF without OCR?); "
    "upload a version with a text layer."
)


@dataclass(frozen=True)
class Extracted:
    text: str
    pages: int | None
    page_starts: list[int]
    # The document's own title and canonical URL where it declares them (HTML, EPUB, e-mail).
    title: str | None = None
    url: str | None = None

    def page_at(self, offset: int) -> int | None:
        """The 1-based page holding the character at ``offset``; None for unpaged documents."""
        if not self.page_starts:
            return None
        # bisect_right so that an empty page (same start as the next one) never wins.
        return max(1, bisect.bisect_right(self.page_starts, offset))


def extract(
    path: pathlib.Path,
    source_type: str,
    *,
    max_uncompressed_bytes: int = 200 * 1024 * 1024,
    limits: common.Limits | None = None,
    on_ocr: Callable[[int], None] = lambda pages: None,
) -> Extracted:
    """Read ``path`` as ``source_type`` and return its text; raise a BadDocument on a bad file.

    ``on_ocr(n)`` is called before ``n`` pages are OCR'd, so a caller can allow the time.
    """
    if source_type not in SOURCE_TYPES:
        raise errors.BadDocument(
            f"extract: the source type {source_type!r} is not supported; upload one of: "
            f"{', '.join(SOURCE_TYPES)}.", stage=_STAGE)
    if path.stat().st_size == 0:
        raise errors.BadDocument(
            "extract: the file is empty (0 bytes); upload the file again.", stage=_STAGE
        )
    if limits is None:
        limits = common.Limits(max_uncompressed_bytes=max_uncompressed_bytes)
    doc = _Reader(limits, on_ocr).read(path, source_type, 0)
    result = _assemble(doc, paged=source_type in ("pdf", "pptx", *IMAGE_TYPES))
    if not result.text.strip():
        raise errors.NoTextFound(_NO_TEXT, stage=_STAGE)
    return result


def type_for_name(name: str) -> str | None:
    """The source type a file name's extension stands for, or None if we read no such type."""
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    ext = ALIASES.get(ext, ext)
    return ext if ext in SOURCE_TYPES else None


class _Reader:
    """Dispatches a file to its format's reader; attachments come back here, one level deeper."""

    def __init__(self, limits: common.Limits, on_ocr: Callable[[int], None]) -> None:
        self.limits = limits
        self.on_ocr = on_ocr

    def read(self, path: pathlib.Path, source_type: str, depth: int) -> common.Doc:
        limits = self.limits
        if source_type == "pdf":
            return pdf.read(path, limits, self.on_ocr)
        if source_type in IMAGE_TYPES:
            return images.read(path, source_type, limits, self.on_ocr)
        if source_type == "docx":
            return docx.read(path, limits)
        if source_type == "pptx":
            return slides.read(path, limits)
        if source_type in ("xlsx", "xls"):
            return sheets.read_workbook(path, source_type, limits)
        if source_type == "epub":
            return epub.read(path, limits)
        if source_type == "odt":
            return odt.read(path, limits)
        if source_type == "msg":
            return mail.read_msg(path, limits, self.attachment, depth)
        data = path.read_bytes()
        if source_type == "html":
            return html.read(data, limits)
        if source_type == "csv":
            return sheets.read_csv(data, limits)
        if source_type == "eml":
            return mail.read_eml(data, limits, self.attachment, depth)
        if source_type == "rtf":
            return rtf.read(data, limits)
        if source_type == "json":
            return jsondoc.read(data, limits)
        doc = common.Doc()  # txt, md: the text is already what we emit
        doc.add(common.normalise(common.decode_text(data)))
        return doc

    def attachment(self, name: str, data: bytes, depth: int) -> str | None:
        """An attachment's Markdown, or None when its type is not one we read."""
        source_type = type_for_name(name)
        if source_type is None:
            return None
        if not data:
            return ""
        with tempfile.TemporaryDirectory(prefix="attachment-") as folder:
            path = pathlib.Path(folder) / f"attachment.{source_type}"
            path.write_bytes(data)
            return common.join_blocks(self.read(path, source_type, depth).blocks)


def _assemble(doc: common.Doc, *, paged: bool) -> Extracted:
    if not paged:
        text = common.normalise(common.join_blocks(doc.blocks))
        return Extracted(text, None, [], doc.title, doc.url)
    bounds = [*doc.page_block, len(doc.blocks)]
    page_texts = [common.normalise(common.join_blocks(doc.blocks[a:b]))
                  for a, b in zip(bounds, bounds[1:], strict=False)]
    page_starts: list[int] = []
    offset = 0
    for page_text in page_texts:
        page_starts.append(offset)
        offset += len(page_text) + 2  # the "\n\n" join below
    return Extracted("\n\n".join(page_texts), len(page_texts), page_starts, doc.title, doc.url)
