"""Which files we accept: by extension, confirmed by content.

The extension says what the user claims; the first bytes must agree, so a renamed binary is
refused at the door (415) instead of failing later in the worker.
"""

from __future__ import annotations

import codecs
import re

from shared import errors, textcodecs

CONTENT_TYPES = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "html": "text/html",
    "txt": "text/plain",
    "md": "text/markdown",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "xls": "application/vnd.ms-excel",
    "eml": "message/rfc822",
    "msg": "application/vnd.ms-outlook",
    "epub": "application/epub+zip",
    "odt": "application/vnd.oasis.opendocument.text",
    "rtf": "application/rtf",
    "json": "application/json",
    "png": "image/png",
    "jpeg": "image/jpeg",
    "tiff": "image/tiff",
    "webp": "image/webp",
    # Records files (gateway/imports/): only routes that allow them accept them.
    "csv": "text/csv",
    "jsonl": "application/x-ndjson",
}
ALIASES = {"htm": "html", "markdown": "md", "ndjson": "jsonl", "jpg": "jpeg", "tif": "tiff"}
# Legacy binary Office formats no library on the package index reads without an office suite
# (python-calamine reads .xls, so that one is accepted): refused with how to convert them.
LEGACY = {
    "doc": "Legacy Word .doc files are not supported; open it in Word or LibreOffice Writer, "
           "save it as .docx (File > Save As > Word Document) and upload that.",
    "ppt": "Legacy PowerPoint .ppt files are not supported; open it in PowerPoint or LibreOffice "
           "Impress, save it as .pptx (File > Save As > PowerPoint Presentation) and upload that.",
}
# The first bytes each binary document type starts with (zip packages, OLE compound files,
# images); text types are checked as text below.
_ZIP = b"PK\x03\x04"
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_MAGIC = {
    "docx": (_ZIP,), "pptx": (_ZIP,), "xlsx": (_ZIP,), "epub": (_ZIP,), "odt": (_ZIP,),
    "xls": (_OLE,), "msg": (_OLE,),
    "png": (b"\x89PNG\r\n\x1a\n",), "jpeg": (b"\xff\xd8\xff",),
    "tiff": (b"II*\x00", b"MM\x00*"),
}
# An e-mail starts with a header field ("Received:", "From:", ...) or an mbox "From " line.
_EML_START = re.compile(rb"^(?:From |[!-9;-~]+:)")
BY_CONTENT_TYPE = {content_type: ext for ext, content_type in CONTENT_TYPES.items()}


def media_types(allowed: tuple[str, ...]) -> list[str]:
    """The media types of these source types, as /schema names a file part's."""
    return [CONTENT_TYPES[ext] for ext in allowed if ext in CONTENT_TYPES]


# How much of the file the content check looks at.
SNIFF_BYTES = 8192
# Records files (the import path only): spreadsheets save "Unicode text" and Google Ads its
# "Excel CSV" as UTF-16 with a byte-order mark, some tools as UTF-32 or UTF-16 without one.
# Their NUL bytes are text, not a binary's (docs/decisions/0170).
RECORDS_TYPES = ("csv", "jsonl")

_HTML_START = re.compile(rb"^\s*(<!--.*?-->\s*)*<(!doctype\s+html|html|head|body|meta|title|div|p|h[1-6])\b",
                         re.IGNORECASE | re.DOTALL)


def source_type_for(filename: str, allowed: tuple[str, ...], content_type: str | None = None) -> str:
    """The source type for a filename's extension, or UnsupportedType. A name without one is
    typed by the part's Content-Type when that names an accepted type (`curl -F
    'file=@-;type=text/csv'`, and what /schema declares for the part)."""
    given = filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
    if not given and content_type:
        given = BY_CONTENT_TYPE.get(content_type.split(";")[0].strip().lower(), "")
    ext = ALIASES.get(given, given)
    if ext in LEGACY and ext not in allowed:
        raise errors.UnsupportedType(LEGACY[ext])
    if ext not in allowed:
        shown = ", ".join(sorted(allowed))
        what = f"Files of type '.{given}' are" if given else "Files without an extension are"
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
    if source_type in RECORDS_TYPES and (codec := _wide_unicode(head)) is not None:
        return _is_wide_text(head, codec, complete=complete)
    if source_type in RECORDS_TYPES and _is_text_with_stray_nuls(head, complete=complete):
        return True  # a NUL in a cell is that row's error (worker), not a binary file
    if source_type in _MAGIC:
        return head.startswith(_MAGIC[source_type])
    if source_type == "webp":
        return head.startswith(b"RIFF") and head[8:12] == b"WEBP"
    if source_type == "rtf":
        return head.lstrip().startswith(b"{\\rtf")
    if not _is_text(head, complete=complete):
        return False
    text = head.removeprefix(codecs.BOM_UTF8)
    if source_type == "html":
        return bool(_HTML_START.match(text))
    if source_type == "json":
        return text.lstrip()[:1] in (b"{", b"[")
    if source_type == "eml":
        return bool(_EML_START.match(text.lstrip(b"\r\n")))
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


def _wide_unicode(head: bytes) -> str | None:
    """The codec of a UTF-16/32 text: by its byte-order mark, else UTF-16 recognisable by the
    NUL high bytes of mostly-Latin text; None for anything else (UTF-8 with a BOM included:
    the plain text check reads it)."""
    mark = textcodecs.bom(head)
    if mark is not None:
        return None if mark.codec == "utf-8-sig" else mark.codec
    return textcodecs.utf16_without_bom(head)


def _is_wide_text(head: bytes, codec: str, *, complete: bool) -> bool:
    """Whether the head decodes in ``codec`` into text without control characters (a NUL in
    the text itself is no text file). A head cut mid-character is fine unless complete."""
    try:
        text = codecs.getincrementaldecoder(codec)().decode(head, final=complete)
    except UnicodeDecodeError:
        return False
    return not re.search(r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]", text)


def _is_text_with_stray_nuls(head: bytes, *, complete: bool) -> bool:
    """UTF-8 text with a few NUL bytes (under 1 %): a records file with a bad cell. A binary
    (a PDF, a zip, an image) has far more, and is no valid UTF-8 besides."""
    nuls = head.count(b"\x00")
    if not nuls or nuls * 100 >= len(head) or head.startswith((b"%PDF-", b"PK\x03\x04")):
        return False
    return _is_text(head.replace(b"\x00", b""), complete=complete)
