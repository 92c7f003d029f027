"""What every format reader shares: the result shape, the limits, text and Markdown helpers.

Anything wrong with the file itself becomes a `BadDocument` subclass whose one sentence tells
the user what to do; nothing here retries, because retrying cannot fix a bad file.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shared import errors, textcodecs

STAGE = "extract"


class DocumentTooLarge(errors.BadDocument):
    """The file holds more than a document may: pages, members, rows or inflated bytes."""

    code = "document_too_large"


class OcrUnavailable(errors.ExtractionError):
    """A page needs OCR and this worker has no OCR engine installed."""

    code = "ocr_unavailable"


@dataclass(frozen=True)
class Limits:
    """What one document may hold, checked before a reader inflates or renders it.

    Every container format (zip packages, e-mail, TIFF frames, PDFs) is bounded on each axis, so
    a small crafted file cannot make the parser child allocate or loop without end; the child's
    memory and time limits (parsers.py) are the backstop, not the rule.
    """

    max_uncompressed_bytes: int = 200 * 1024 * 1024
    max_pages: int = 2000  # PDF pages, slides, image frames
    max_members: int = 10_000  # zip entries, e-mail parts and attachments
    max_cells: int = 2_000_000  # spreadsheet and CSV cells, all sheets together
    max_ocr_pages: int = 300  # pages OCR may read in one document
    max_image_pixels: int = 150_000_000  # one image or page as rendered for OCR
    max_depth: int = 3  # attachments inside attachments


@dataclass
class Doc:
    """A document being built: Markdown blocks, and where each page starts (paged formats)."""

    blocks: list[str] = field(default_factory=list)
    page_block: list[int] = field(default_factory=list)  # index of each page's first block
    title: str | None = None
    url: str | None = None

    def page(self) -> None:
        """Start a new page: the blocks added next belong to it."""
        self.page_block.append(len(self.blocks))

    def add(self, *blocks: str) -> None:
        self.blocks.extend(b for b in blocks if b.strip())


def too_large(what: str, limit: int, unit: str) -> DocumentTooLarge:
    return DocumentTooLarge(
        f"extract: the {what} holds more than {limit:,} {unit}, the most one document may; "
        "split it into smaller files and upload those.", stage=STAGE)


def damaged(kind: str, fix: str) -> errors.ExtractionError:
    return errors.ExtractionError(
        f"extract: the {kind} is damaged and its text could not be read; {fix}", stage=STAGE)


# ── text ───────────────────────────────────────────────────────────────────────────────────
_NEWLINES = re.compile(r"\r\n?|[\f\v\x85\u2028\u2029]")
_BLANK_RUNS = re.compile(r"\n{3,}")
_SPACES = re.compile(r"[^\S\n]+")
_SPACE_AROUND_NEWLINE = re.compile(r" ?\n ?")


_SURROGATE = re.compile("[\ud800-\udfff]")


def normalise(text: str) -> str:
    """One newline convention (blank lines mark blocks), no NULs (Postgres text refuses them)
    and no lone surrogates (UTF-8 cannot encode them: the chunker and Postgres would fail)."""
    return paired(_NEWLINES.sub("\n", text).replace("\x00", ""))


def paired(text: str) -> str:
    """``text`` with UTF-16 surrogate pairs joined into their character and lone halves as
    U+FFFD. RTF writes a character above U+FFFF as two \\uN escapes, JSON as two \\uXXXX,
    and readers decode each half on its own; every extracted text passes here (normalise)."""
    if _SURROGATE.search(text) is None:  # the common case costs one scan
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def collapse(text: str) -> str:
    """Collapse layout whitespace the way a browser renders it, keeping explicit line breaks."""
    return _SPACE_AROUND_NEWLINE.sub("\n", _SPACES.sub(" ", text)).strip()


def one_line(text: str) -> str:
    return " ".join(text.split())


def join_blocks(blocks: Iterable[str]) -> str:
    """Blank lines between blocks, except between list items, which stay one Markdown list."""
    parts: list[str] = []
    for block in blocks:
        if not block.strip():
            continue
        if parts and block.startswith(("- ", "  ")) and parts[-1].lstrip().startswith("- "):
            parts.append("\n")
        elif parts:
            parts.append("\n\n")
        parts.append(block)
    return _BLANK_RUNS.sub("\n\n", "".join(parts))


def bom_encoding(data: bytes) -> str | None:
    mark = textcodecs.bom(data)
    return None if mark is None else mark.codec


def decode_text(data: bytes) -> str:
    """Plain text has no declared charset: a BOM decides, then UTF-8, then Windows' cp1252."""
    encoding = bom_encoding(data)
    if encoding:
        return data.decode(encoding, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        # cp1252 leaves five bytes undefined; replacing them beats refusing the whole file.
        return data.decode("cp1252", errors="replace")


# ── Markdown ───────────────────────────────────────────────────────────────────────────────
def heading(level: int, text: str) -> str:
    text = one_line(text)
    return f"{'#' * max(1, min(level, 6))} {text}" if text else ""


def demote(markdown: str, levels: int) -> str:
    """Push every heading of ``markdown`` down ``levels`` levels (an attachment under its message)."""
    return re.sub(r"(?m)^(#{1,6}) ", lambda m: "#" * min(6, len(m.group(1)) + levels) + " ",
                  markdown)


def _cell(value: object) -> str:
    text = one_line("" if value is None else str(value))
    return text.replace("|", "\\|")


def table(rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table, the first row as its header; ragged rows are padded."""
    cells = [[_cell(v) for v in row] for row in rows]
    cells = [row for row in cells if any(row)]
    if not cells:
        return ""
    width = max(len(row) for row in cells)
    lines = ["| " + " | ".join(row + [""] * (width - len(row))) + " |" for row in cells]
    lines.insert(1, "|" + " --- |" * width)
    return "\n".join(lines)


# ── zip packages (DOCX, PPTX, XLSX, EPUB, ODT) ─────────────────────────────────────────────
_BOMB_RATIO = 200
_BOMB_MIN_MEMBER_BYTES = 10 * 1024 * 1024


def check_zip(path: Path, kind: str, required: str, limits: Limits, fix: str) -> list[str]:
    """Refuse a package that is not one, or a zip bomb, before a library inflates it.

    Returns the member names. ``required`` is the member that makes the zip this kind of file.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise not_a(kind, fix) from exc
    names = [m.filename for m in members]
    if required not in names:
        raise not_a(kind, fix)
    if len(members) > limits.max_members:
        raise too_large(kind, limits.max_members, "files in its package")
    if sum(m.file_size for m in members) > limits.max_uncompressed_bytes or any(
        _is_bomb_member(m) for m in members
    ):
        raise errors.BadDocument(
            f"extract: the {kind} looks like a zip bomb (it would inflate to far more than its "
            "size); remove embedded media or upload the text as a smaller file.", stage=STAGE)
    return names


def _is_bomb_member(member: zipfile.ZipInfo) -> bool:
    ratio = member.file_size / max(member.compress_size, 1)
    return member.file_size > _BOMB_MIN_MEMBER_BYTES and ratio > _BOMB_RATIO


def not_a(kind: str, fix: str) -> errors.ExtractionError:
    return errors.ExtractionError(
        f"extract: the file is not a valid {kind}; {fix}", stage=STAGE)


OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def is_ole(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(len(OLE_MAGIC)) == OLE_MAGIC
