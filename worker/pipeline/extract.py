"""Extract stage: turn an uploaded file into plain, Markdown-ish text.

Every type comes out in the same shape so the chunker can treat them alike: blocks separated by
a blank line, headings as ``# ...`` lines, list items as ``- ...``, table rows as ``a | b | c``.
Anything wrong with the file itself becomes a ``BadDocument`` subclass that tells the user what
to do; nothing here retries, because retrying cannot fix a bad file.
"""

from __future__ import annotations

import bisect
import codecs
import pathlib
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

import docx
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_raw
from docx.table import Table, _Cell
from docx.text.paragraph import Paragraph
from selectolax.lexbor import LexborHTMLParser, LexborNode

from shared import errors

SOURCE_TYPES = ("pdf", "docx", "html", "txt", "md")

_STAGE = "extract"
_NO_TEXT = (
    "extract: the document contains no extractable text (a scanned PDF without OCR?); "
    "upload a version with a text layer."
)


@dataclass(frozen=True)
class Extracted:
    text: str
    pages: int | None
    page_starts: list[int]

    def page_at(self, offset: int) -> int | None:
        """The 1-based page holding the character at ``offset``; None for non-PDF documents."""
        if not self.page_starts:
            return None
        # bisect_right so that an empty page (same start as the next one) never wins.
        return max(1, bisect.bisect_right(self.page_starts, offset))


def extract(
    path: pathlib.Path,
    source_type: str,
    *,
    max_uncompressed_bytes: int = 200 * 1024 * 1024,
) -> Extracted:
    """Read ``path`` as ``source_type`` and return its text; raise a BadDocument on a bad file."""
    if source_type not in SOURCE_TYPES:
        raise errors.BadDocument(
            f"extract: the source type {source_type!r} is not supported; "
            "upload a PDF, DOCX, HTML, TXT or Markdown file.",
            stage=_STAGE,
        )
    if path.stat().st_size == 0:
        raise errors.BadDocument(
            "extract: the file is empty (0 bytes); upload the file again.", stage=_STAGE
        )
    if source_type == "pdf":
        result = _extract_pdf(path)
    elif source_type == "docx":
        result = Extracted(_extract_docx(path, max_uncompressed_bytes), None, [])
    elif source_type == "html":
        result = Extracted(_extract_html(path.read_bytes()), None, [])
    else:
        result = Extracted(_normalise(_decode_text(path.read_bytes())), None, [])
    if not result.text.strip():
        raise errors.NoTextFound(_NO_TEXT, stage=_STAGE)
    return result


# ── shared text helpers ────────────────────────────────────────────────────────────────────
_NEWLINES = re.compile(r"\r\n?|[\f\v\x85\u2028\u2029]")
_BLANK_RUNS = re.compile(r"\n{3,}")
_SPACES = re.compile(r"[^\S\n]+")
_SPACE_AROUND_NEWLINE = re.compile(r" ?\n ?")


def _normalise(text: str) -> str:
    """One newline convention (blank lines mark blocks) and no NULs (Postgres text refuses them)."""
    return _NEWLINES.sub("\n", text).replace("\x00", "")


def _collapse(text: str) -> str:
    """Collapse layout whitespace the way a browser renders it, keeping explicit line breaks."""
    return _SPACE_AROUND_NEWLINE.sub("\n", _SPACES.sub(" ", text)).strip()


def _join_blocks(blocks: list[str]) -> str:
    """Blank lines between blocks, except between list items, which stay one Markdown list."""
    parts: list[str] = []
    for block in filter(str.strip, blocks):
        if parts and block.startswith("- ") and parts[-1].startswith("- "):
            parts.append("\n")
        elif parts:
            parts.append("\n\n")
        parts.append(block)
    return _BLANK_RUNS.sub("\n\n", "".join(parts))


_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def _bom_encoding(data: bytes) -> str | None:
    return next((name for bom, name in _BOMS if data.startswith(bom)), None)


def _decode_text(data: bytes) -> str:
    """Plain text has no declared charset: a BOM decides, then UTF-8, then Windows' cp1252."""
    encoding = _bom_encoding(data)
    if encoding:
        return data.decode(encoding, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        # cp1252 leaves five bytes undefined; replacing them beats refusing the whole file.
        return data.decode("cp1252", errors="replace")


# ── PDF ────────────────────────────────────────────────────────────────────────────────────
_PDF_LOCKED = (pdfium_raw.FPDF_ERR_PASSWORD, pdfium_raw.FPDF_ERR_SECURITY)


def _extract_pdf(path: pathlib.Path) -> Extracted:
    document = _open_pdf(path)
    try:
        page_texts = [_normalise(_pdf_page_text(document, i)).strip() for i in range(len(document))]
    except pdfium.PdfiumError as exc:
        raise errors.ExtractionError(
            "extract: a page of the PDF is damaged and could not be read; "
            "re-save the PDF (for example with Print to PDF) and upload it again.",
            stage=_STAGE,
        ) from exc
    finally:
        document.close()
    page_starts: list[int] = []
    offset = 0
    for page_text in page_texts:
        page_starts.append(offset)
        offset += len(page_text) + 2  # the "\n\n" join below
    return Extracted("\n\n".join(page_texts), len(page_texts), page_starts)


def _open_pdf(path: pathlib.Path) -> pdfium.PdfDocument:
    try:
        return pdfium.PdfDocument(path)
    except pdfium.PdfiumError as exc:
        if exc.err_code in _PDF_LOCKED:
            raise errors.EncryptedDocument(
                "extract: the PDF is password-protected; remove the password and upload it again.",
                stage=_STAGE,
            ) from exc
        raise errors.ExtractionError(
            "extract: the PDF is corrupt or truncated and could not be opened; "
            "check that it opens and upload it again.",
            stage=_STAGE,
        ) from exc


def _pdf_page_text(document: pdfium.PdfDocument, index: int) -> str:
    page = document[index]
    try:
        textpage = page.get_textpage()
        try:
            return textpage.get_text_range()
        finally:
            textpage.close()
    finally:
        page.close()


# ── DOCX ───────────────────────────────────────────────────────────────────────────────────
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_BOMB_RATIO = 200
_BOMB_MIN_MEMBER_BYTES = 10 * 1024 * 1024
_HEADING_STYLE = re.compile(r"Heading ([1-9])")


def _extract_docx(path: pathlib.Path, max_uncompressed_bytes: int) -> str:
    _check_docx_container(path, max_uncompressed_bytes)
    try:
        document = docx.Document(str(path))
        blocks = [_docx_block(item) for item in document.iter_inner_content()]
    except Exception as exc:  # python-docx raises lxml, KeyError, ValueError... on bad parts
        raise errors.ExtractionError(
            "extract: the DOCX is damaged and its text could not be read; "
            "open it in Word, save it again and upload it.",
            stage=_STAGE,
        ) from exc
    return _normalise(_join_blocks(blocks))


def _check_docx_container(path: pathlib.Path, max_uncompressed_bytes: int) -> None:
    """Refuse non-DOCX files and zip bombs before python-docx inflates every part into memory."""
    with path.open("rb") as handle:
        is_ole = handle.read(len(_OLE_MAGIC)) == _OLE_MAGIC
    if is_ole:
        # Word writes both legacy .doc and password-protected .docx as OLE compound files.
        raise errors.ExtractionError(
            "extract: the file is a password-protected DOCX or a legacy .doc, not a DOCX; "
            "remove the password or save it as .docx and upload it again.",
            stage=_STAGE,
        )
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise _not_docx() from exc
    if "word/document.xml" not in {member.filename for member in members}:
        raise _not_docx()
    if sum(m.file_size for m in members) > max_uncompressed_bytes or any(
        _is_bomb_member(m) for m in members
    ):
        raise errors.BadDocument(
            "extract: the DOCX looks like a zip bomb (it would inflate to far more than its size); "
            "remove embedded media or upload the text as a smaller file.",
            stage=_STAGE,
        )


def _is_bomb_member(member: zipfile.ZipInfo) -> bool:
    ratio = member.file_size / max(member.compress_size, 1)
    return member.file_size > _BOMB_MIN_MEMBER_BYTES and ratio > _BOMB_RATIO


def _not_docx() -> errors.ExtractionError:
    return errors.ExtractionError(
        "extract: the file is not a valid DOCX (not a Word zip package with word/document.xml); "
        "save it as .docx in Word and upload it again.",
        stage=_STAGE,
    )


def _docx_block(item: Paragraph | Table) -> str:
    if isinstance(item, Table):
        return "\n".join(_docx_row(row.cells) for row in item.rows)
    return _docx_paragraph(item)


def _docx_paragraph(paragraph: Paragraph) -> str:
    text = paragraph.text.strip()
    style = (paragraph.style.name or "") if paragraph.style is not None else ""
    heading = _HEADING_STYLE.fullmatch(style)
    if not text:
        return ""
    if style == "Title":
        return f"# {text}"
    if heading:
        return f"{'#' * int(heading.group(1))} {text}"
    if style.startswith("List") or _has_numbering(paragraph):
        return f"- {text}"
    return text


def _has_numbering(paragraph: Paragraph) -> bool:
    """Lists typed with the toolbar keep the Normal style and carry numbering properties."""
    properties = paragraph._p.pPr
    return properties is not None and properties.numPr is not None


def _docx_row(cells: list[_Cell]) -> str:
    return " | ".join(_collapse(cell.text) for cell in _distinct_cells(cells))


def _distinct_cells(cells: list[_Cell]) -> Iterator[_Cell]:
    # A merged cell is returned once per grid column it spans; keep the first.
    previous = None
    for cell in cells:
        if cell._tc is not previous:
            yield cell
        previous = cell._tc


# ── HTML ───────────────────────────────────────────────────────────────────────────────────
# nav is site chrome; header/footer are kept because article headers often hold the title.
_HTML_DROP = ["script", "style", "noscript", "template", "svg", "nav", "iframe", "object", "head"]
_HTML_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_BLOCK_TAG_NAMES = """
address article aside blockquote body caption dd details dialog div dl dt fieldset
figcaption figure footer form header hgroup hr li main menu ol p section summary table
tbody tfoot thead ul
"""
_HTML_BLOCKS = frozenset(_BLOCK_TAG_NAMES.split())
_META_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?\s*([A-Za-z0-9_:.\-]+)", re.IGNORECASE)
# WHATWG: browsers read a declared Latin-1 or ASCII as windows-1252 (pages are written for
# browsers), and a UTF-16 declaration in ASCII-compatible bytes as UTF-8.
_DECLARED_OVERRIDES = {"iso8859-1": "cp1252", "ascii": "cp1252", "utf-16": "utf-8"}


def _extract_html(data: bytes) -> str:
    tree = LexborHTMLParser(_decode_html(data))
    title = _html_title(tree)
    tree.strip_tags(_HTML_DROP)
    body = tree.body
    if body is None:
        return ""
    blocks = _HtmlBlocks().walk(body).blocks
    if title and body.css_first("h1") is None:
        blocks.insert(0, f"# {title}")
    return _normalise(_join_blocks(blocks))


def _html_title(tree: LexborHTMLParser) -> str:
    title = tree.head.css_first("title") if tree.head is not None else None
    return _collapse(title.text()) if title is not None else ""


def _decode_html(data: bytes) -> str:
    encoding = _bom_encoding(data) or _meta_charset(data[:1024]) or "utf-8"
    return data.decode(encoding, errors="replace")


def _meta_charset(head: bytes) -> str | None:
    match = _META_CHARSET.search(head)
    if not match:
        return None
    try:
        name = codecs.lookup(match.group(1).decode("ascii")).name
    except LookupError:
        return None
    return _DECLARED_OVERRIDES.get(name.removesuffix("-le").removesuffix("-be"), name)


class _HtmlBlocks:
    """Flattens a DOM subtree into Markdown-ish blocks.

    Iterative rather than recursive so that absurdly nested markup cannot hit the recursion
    limit. Inline text accumulates until a block boundary flushes it; a heading or list item
    sets the prefix that the next non-empty flush carries.
    """

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self._inline: list[str] = []
        self._prefix = ""
        self._after_row = False  # rows of one table share a block, as DOCX tables do

    def walk(self, root: LexborNode) -> _HtmlBlocks:
        stack: list[tuple[LexborNode, bool]] = [(root, False)]
        while stack:
            node, leaving = stack.pop()
            if leaving:
                self._flush()
                if node.tag in _HTML_HEADINGS or node.tag == "li":
                    self._prefix = ""  # an empty heading or item must not label the next block
            elif self._visit(node):
                if node.tag in _HTML_HEADINGS or node.tag in _HTML_BLOCKS:
                    stack.append((node, True))
                children = list(node.iter(include_text=True))
                stack.extend((child, False) for child in reversed(children))
        self._flush()
        return self

    def _visit(self, node: LexborNode) -> bool:
        """Handle ``node``; True when its children still need walking."""
        tag = node.tag or ""
        if tag == "-text":
            self._inline.append(node.text_content or "")
        elif tag == "br":
            self._inline.append("\n")
        elif tag == "tr":
            self._flush()
            self._add_row(self._row(node))
        elif tag == "pre":
            self._flush()
            self._add(node.text().strip("\n"))
        elif tag in _HTML_HEADINGS or tag in _HTML_BLOCKS:
            self._flush()
            if tag in _HTML_HEADINGS:
                self._prefix = "#" * _HTML_HEADINGS[tag] + " "
            elif tag == "li":
                self._prefix = "- "
            return True
        else:
            return not tag.startswith("-")  # comments, doctype and the like carry no text
        return False

    def _flush(self) -> None:
        text = _collapse("".join(self._inline))
        self._inline.clear()
        if text:
            self._add(self._prefix + text)
            self._prefix = ""

    def _add(self, block: str) -> None:
        self.blocks.append(block)
        self._after_row = False

    def _add_row(self, row: str) -> None:
        if self._after_row:
            self.blocks[-1] += "\n" + row
        else:
            self.blocks.append(row)
        self._after_row = True

    @staticmethod
    def _row(row: LexborNode) -> str:
        cells = [cell for cell in row.iter() if cell.tag in ("td", "th")]
        return " | ".join(" ".join(_HtmlBlocks().walk(cell).blocks) for cell in cells)
