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
import hashlib
import pathlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace

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
_MAX_NAME = 255
_NO_TEXT = (
    "extract: the document contains no extractable text (a scanned PDF without OCR?); "
    "upload a version with a text layer."
)


@dataclass(frozen=True)
class Attachment:
    """An e-mail attachment kept to become a child document (docs/decisions/0250): its bytes
    are in ``path``, in the folder the caller gave extract()."""

    ordinal: int  # from 1, in the message's order
    filename: str
    source_type: str
    size_bytes: int
    content_hash: str  # sha256:<hex>, as intake names an upload's bytes
    path: str


@dataclass(frozen=True)
class Extracted:
    text: str
    pages: int | None
    page_starts: list[int]
    # The document's own title and canonical URL where it declares them (HTML, EPUB, e-mail).
    title: str | None = None
    url: str | None = None
    # A message's attachments, when extract() was given a folder to keep them in.
    attachments: tuple[Attachment, ...] = ()

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
    on_ocr_page: Callable[[], None] = lambda: None,
    attachments_dir: pathlib.Path | None = None,
    depth: int = 0,
) -> Extracted:
    """Read ``path`` as ``source_type`` and return its text; raise a BadDocument on a bad file.

    ``on_ocr(n)`` is called before ``n`` pages are OCR'd, so a caller can allow the time, and
    ``on_ocr_page()`` after each, so that a timeout can say how far OCR got.
    ``attachments_dir``: an e-mail's attachments are written there and returned to become
    child documents, while ``depth`` (how deep this message is nested in messages already
    ingested) is below Limits.max_depth; otherwise they are read as sections of the message.
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
    keeper = (_Keeper(attachments_dir) if attachments_dir is not None and depth < limits.max_depth
              else None)
    doc = _Reader(limits, on_ocr, keeper, on_ocr_page).read(path, source_type, depth)
    result = _assemble(doc, paged=source_type in ("pdf", "pptx", *IMAGE_TYPES))
    if not result.text.strip():
        raise errors.NoTextFound(_NO_TEXT, stage=_STAGE)
    if keeper is not None and keeper.kept:
        return replace(result, attachments=tuple(keeper.kept))
    return result


def type_for_name(name: str) -> str | None:
    """The source type a file name's extension stands for, or None if we read no such type."""
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    ext = ALIASES.get(ext, ext)
    return ext if ext in SOURCE_TYPES else None


class _Keeper:
    """Writes a message's attachments to a folder, for the worker to store as child documents."""

    def __init__(self, folder: pathlib.Path) -> None:
        self.folder = folder
        self.kept: list[Attachment] = []
        self.seen = 0

    def __call__(self, name: str, data: bytes) -> str:
        self.seen += 1
        name = _title(name) or f"attachment {self.seen}"
        source_type = type_for_name(name)
        if source_type is None:
            return f"- {name} (not read: this type of file is not supported)"
        if not data:
            return f"- {name} (empty)"
        path = self.folder / f"{self.seen}.{source_type}"
        path.write_bytes(data)
        self.kept.append(Attachment(self.seen, name, source_type, len(data),
                                    f"sha256:{hashlib.sha256(data).hexdigest()}", str(path)))
        return f"- {name}"


class _Reader:
    """Dispatches a file to its format's reader; attachments come back here, one level deeper."""

    def __init__(self, limits: common.Limits, on_ocr: Callable[[int], None],
                 keeper: _Keeper | None = None,
                 on_ocr_page: Callable[[], None] = lambda: None) -> None:
        self.limits = limits
        self.on_ocr = on_ocr
        self.on_ocr_page = on_ocr_page
        # Only the message being extracted keeps its attachments; nested ones are read.
        self.keeper = keeper

    def read(self, path: pathlib.Path, source_type: str, depth: int) -> common.Doc:
        limits = self.limits
        if source_type == "pdf":
            return pdf.read(path, limits, self.on_ocr, self.on_ocr_page)
        if source_type in IMAGE_TYPES:
            return images.read(path, source_type, limits, self.on_ocr, self.on_ocr_page)
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
            return mail.read_msg(path, limits, self.attachment, depth, self._keep())
        data = path.read_bytes()
        if source_type == "html":
            return html.read(data, limits)
        if source_type == "csv":
            return sheets.read_csv(data, limits)
        if source_type == "eml":
            return mail.read_eml(data, limits, self.attachment, depth, self._keep())
        if source_type == "rtf":
            return rtf.read(data, limits)
        if source_type == "json":
            return jsondoc.read(data, limits)
        doc = common.Doc()  # txt, md: the text is already what we emit
        doc.add(common.normalise(common.decode_text(data)))
        return doc

    def _keep(self) -> _Keeper | None:
        keeper, self.keeper = self.keeper, None  # the outermost message only
        return keeper

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


def _title(name: str) -> str:
    """An attachment's name as its document's title: no control characters (Postgres refuses
    NUL), at most _MAX_NAME characters, its extension kept."""
    name = "".join(ch for ch in name if ch.isprintable()).strip()
    if len(name) <= _MAX_NAME:
        return name
    stem, dot, ext = name.rpartition(".")
    if not dot or len(ext) > 16:
        return name[:_MAX_NAME]
    return f"{stem[:_MAX_NAME - len(ext) - 1]}.{ext}"


def _assemble(doc: common.Doc, *, paged: bool) -> Extracted:
    # The boundary: whatever a reader handed on, no lone surrogate leaves this stage (normalise
    # pairs them in the text), so nothing downstream meets text UTF-8 cannot encode.
    title = common.paired(doc.title) if doc.title else doc.title
    url = common.paired(doc.url) if doc.url else doc.url
    if not paged:
        text = common.normalise(common.join_blocks(doc.blocks))
        return Extracted(text, None, [], title, url)
    bounds = [*doc.page_block, len(doc.blocks)]
    page_texts = [common.normalise(common.join_blocks(doc.blocks[a:b]))
                  for a, b in zip(bounds, bounds[1:], strict=False)]
    page_starts: list[int] = []
    offset = 0
    for page_text in page_texts:
        page_starts.append(offset)
        offset += len(page_text) + 2  # the "\n\n" join below
    return Extracted("\n\n".join(page_texts), len(page_texts), page_starts, title, url)
