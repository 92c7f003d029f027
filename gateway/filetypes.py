"""Which files we accept: by extension, confirmed by content.

The extension says what the user claims; the first bytes must agree, so a renamed binary is
refused at the door (415) instead of failing later in the worker.
"""

from __future__ import annotations

import codecs
import re

from shared import errors

CONTENT_TYPES = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "html": "text/html",
    "txt": "text/plain",
    "md": "text/markdown",
    # Records files (gateway/imports/): only routes that allow them accept them.
    "csv": "text/csv",
    "jsonl": "application/x-ndjson",
}
ALIASES = {"htm": "html", "markdown": "md", "ndjson": "jsonl"}
BY_CONTENT_TYPE = {content_type: ext for ext, content_type in CONTENT_TYPES.items()}


def media_types(allowed: tuple[str, ...]) -> list[str]:
    """The media types of these source types, as /schema names a file part's."""
    return [CONTENT_TYPES[ext] for ext in allowed if ext in CONTENT_TYPES]
# How much of the file the content check looks at.
SNIFF_BYTES = 8192

_HTML_START = re.compile(rb"^\s*(<!--.*?-->\s*)*<(!doctype\s+html|html|head|body|meta|title|div|p|h[1-6])\b",
                         re.IGNORECASE | re.DOTALL)


def source_type_for(filename: str, allowed: tuple[str, ...], content_type: str | None = None) -> str:
    """The source type for a filename's extension, or UnsupportedType. A name without one is
    typed by the part's Content-Type when that names an accepted type (`curl -F
    'file=@-;type=text/csv'`, and what /schema declares for the part)."""
    ext = filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
    if not ext and content_type:
        ext = BY_CONTENT_TYPE.get(content_type.split(";")[0].strip().lower(), "")
    ext = ALIASES.get(ext, ext)
    if ext not in allowed:
        shown = ", ".join(sorted(allowed))
        what = f"Files of type '.{ext}' are" if ext else "Files without an extension are"
        raise errors.UnsupportedType(f"{what} not supported; upload one of: {shown}.")
    return ext


def check_content(source_type: str, head: bytes, *, complete: bool) -> None:
    """Refuse a file whose first bytes contradict its extension.

    ``complete`` says whether ``head`` is the whole file (a text check may then be strict about
    the final bytes, which otherwise may end in the middle of a multi-byte character).
    """
    if not _looks_like(source_type, head, complete=complete):
        raise errors.UnsupportedType(
            f"The file's content is not {source_type.upper()} although its name ends in "
            f".{source_type}; check the file and upload it again.")


def _looks_like(source_type: str, head: bytes, *, complete: bool) -> bool:
    if source_type == "pdf":
        # The spec allows junk before the header within the first KiB.
        return b"%PDF-" in head[:1024]
    if source_type == "docx":
        return head.startswith(b"PK\x03\x04")
    if not _is_text(head, complete=complete):
        return False
    if source_type == "html":
        return bool(_HTML_START.match(head.removeprefix(codecs.BOM_UTF8)))
    return True


def _is_text(head: bytes, *, complete: bool) -> bool:
    if b"\x00" in head or head.startswith((b"%PDF-", b"PK\x03\x04")):
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=complete)
        return True
    except UnicodeDecodeError:
        # Not UTF-8: accept legacy single-byte text that has no control characters.
        return not re.search(rb"[\x01-\x08\x0e-\x1a\x1c-\x1f\x7f]", head)
