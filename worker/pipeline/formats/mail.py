"""E-mail (EML, Outlook MSG): the headers people search by, the body, and its attachments.

The message is `# Subject`, a block of From/To/Cc/Date, the body (plain text, else the HTML
part without its markup), then its attachments in one of two ways (docs/decisions/0250):
- kept: each attachment's bytes go to ``keep``, which stores them so that the attachment
  becomes a child document of the message, and the message lists it under `## Attachments`
  (what a worker does with an uploaded message);
- read: `## Attachment: name` per attachment with that file's own text, read by the same
  readers and limits as an upload, its headings pushed two levels down (a message nested
  deeper than Limits.max_depth, and extraction without a store, e.g. the benches).
An attachment that cannot be read (unsupported type, damaged, no OCR engine) is named with the
reason and never fails the message; inline images (logos, signatures) are skipped.
"""

from __future__ import annotations

import codecs
import email
import email.policy
import logging
from collections.abc import Callable
from email.message import EmailMessage, MIMEPart
from pathlib import Path
from typing import Any

from shared import errors
from worker.pipeline.formats import common, html, rtf

# (file name, bytes, depth) -> the attachment's Markdown, or raises BadDocument / returns None
# when its type is not one we read.
ReadAttachment = Callable[[str, bytes, int], "str | None"]
# (file name, bytes) -> the list item that names the attachment in its message: the
# attachment is stored as a document of its own, or the item says why not.
KeepAttachment = Callable[[str, bytes], str]
_HEADERS = ("From", "To", "Cc", "Date")
_MSG_FIX = "save the message again from Outlook (File > Save As > Outlook Message) and upload it."

# extract_msg logs what it could not parse, sometimes with header values: never personal data.
logging.getLogger("extract_msg").setLevel(logging.CRITICAL)


class _Budget:
    """Parts and decoded bytes of one message, attachments' attachments included."""

    def __init__(self, limits: common.Limits) -> None:
        self.limits = limits
        self.parts = 0
        self.bytes = 0

    def take(self, size: int) -> None:
        self.parts += 1
        self.bytes += size
        if self.parts > self.limits.max_members:
            raise common.too_large("e-mail", self.limits.max_members, "parts and attachments")
        if self.bytes > self.limits.max_uncompressed_bytes:
            raise common.too_large("e-mail", self.limits.max_uncompressed_bytes,
                                   "bytes once its attachments are decoded")


def read_eml(data: bytes, limits: common.Limits, read_attachment: ReadAttachment,
             depth: int = 0, keep: KeepAttachment | None = None) -> common.Doc:
    message = email.message_from_bytes(data, policy=email.policy.default)
    if not isinstance(message, EmailMessage) or not message.keys():
        raise common.not_a("e-mail message (EML)", "export the message as .eml and upload it again.")
    return _eml(message, _Budget(limits), read_attachment, depth, keep)


def _eml(message: EmailMessage, budget: _Budget, read_attachment: ReadAttachment,
         depth: int, keep: KeepAttachment | None = None) -> common.Doc:
    doc = common.Doc(title=_header(message, "Subject") or None)
    doc.add(common.heading(1, doc.title or "(no subject)"))
    doc.add("\n".join(f"{name}: {value}" for name in _HEADERS
                      if (value := _header(message, name))))
    body = message.get_body(preferencelist=("plain", "html"))
    if body is not None:
        content = _text_of(body)
        budget.take(len(content))
        if body.get_content_subtype() == "html":
            doc.add(*html.read_text(content, main_content=False).blocks)
        else:
            doc.add(common.normalise(content).strip())
    listed: list[str] = []
    for number, part in enumerate(message.iter_attachments(), start=1):
        if part.get_content_maintype() == "image" and part.get_content_disposition() != "attachment":
            continue  # an inline logo or signature picture, not content
        name = part.get_filename() or f"attachment {number}"
        if part.get_content_type() == "message/rfc822":
            inner = part.get_content()
            payload = inner.as_bytes() if isinstance(inner, EmailMessage) else b""
            name = part.get_filename() or f"attachment {number}.eml"
        else:
            payload = _payload(part)
        budget.take(len(payload))
        if keep is not None:
            listed.append(keep(common.one_line(name), payload))
        else:
            doc.add(*_attachment(name, payload, read_attachment, depth, budget.limits.max_depth))
    _list(doc, listed)
    return doc


def _list(doc: common.Doc, listed: list[str]) -> None:
    """The message's kept attachments, one list item each, under one heading."""
    if listed:
        doc.add(common.heading(2, "Attachments"), *listed)


def _header(message: EmailMessage, name: str) -> str:
    try:
        value = message.get(name)
    except (ValueError, IndexError):  # a malformed header the policy cannot parse
        value = message.get_all(name, failobj=[""])[0] if name in message else ""
    return common.one_line(str(value)) if value else ""


def _text_of(part: MIMEPart) -> str:
    try:
        content = part.get_content()
    except (LookupError, UnicodeError):  # an unknown charset: read the bytes as we read text
        content = common.decode_text(_payload(part))
    return content if isinstance(content, str) else common.decode_text(bytes(content))


def _payload(part: MIMEPart) -> bytes:
    payload = part.get_payload(decode=True)
    return payload if isinstance(payload, bytes) else b""


def _attachment(name: str, payload: bytes, read_attachment: ReadAttachment, depth: int,
                max_depth: int) -> list[str]:
    name = common.one_line(name)
    heading = common.heading(2, f"Attachment: {name}")
    if depth + 1 > max_depth:
        return [heading, "(not read: attachments nest too deeply)"]
    try:
        text = read_attachment(name, payload, depth + 1)
    except errors.BadDocument as exc:
        return [heading, f"(not read: {exc.detail.removeprefix('extract: ')})"]
    if text is None:
        return [heading, "(not read: this type of file is not supported)"]
    return [heading, common.demote(text, 2)]


# ── Outlook MSG ────────────────────────────────────────────────────────────────────────────
def read_msg(path: Path, limits: common.Limits, read_attachment: ReadAttachment,
             depth: int = 0, keep: KeepAttachment | None = None) -> common.Doc:
    if not common.is_ole(path):
        raise common.not_a("Outlook message (MSG)", _MSG_FIX)
    import extract_msg  # noqa: PLC0415 - a heavy import only messages need

    try:
        message = extract_msg.openMsg(str(path), delayAttachments=False)
        encoding = _declared_encoding(message)
        if encoding is not None:  # strings are 8-bit in a code page extract_msg did not see
            message.close()
            message = extract_msg.openMsg(str(path), delayAttachments=False,
                                          overrideEncoding=encoding)
    except Exception as exc:  # extract_msg raises its own errors and olefile's on bad files
        raise common.damaged("Outlook message (MSG)", _MSG_FIX) from exc
    try:
        return _msg(message, _Budget(limits), read_attachment, depth, keep)
    except (common.DocumentTooLarge, errors.BadDocument):
        raise
    except Exception as exc:
        raise common.damaged("Outlook message (MSG)", _MSG_FIX) from exc
    finally:
        message.close()


# PR_MESSAGE_CODEPAGE, which extract_msg reads; PR_INTERNET_CPID, which it does not.
_MESSAGE_CODEPAGE, _INTERNET_CPID = "3FFD0003", "3FDE0003"


def _declared_encoding(message: Any) -> str | None:
    """The codec of a non-Unicode message's strings when only PR_INTERNET_CPID declares it.

    Outlook stores 8-bit strings in the sender's code page; without PR_MESSAGE_CODEPAGE
    extract_msg assumes ISO-8859-15, and a Big5 message (code page 950) became mojibake in its
    subject and body (issue 33). Unicode messages, and those that declare PR_MESSAGE_CODEPAGE,
    are decoded right already: None.
    """
    from extract_msg.encoding import lookupCodePage  # noqa: PLC0415 - with extract_msg

    props = message.props
    if message.areStringsUnicode or _MESSAGE_CODEPAGE in props or _INTERNET_CPID not in props:
        return None
    try:
        encoding = lookupCodePage(int(props.get(_INTERNET_CPID).value))
        codecs.lookup(encoding)
    except (LookupError, KeyError, ValueError, TypeError):
        return None  # a code page Python cannot decode: keep extract_msg's default
    return encoding


def _msg_body(message: Any) -> list[str]:
    """The plain body; else the HTML body; else the RTF body (Outlook often keeps only that),
    read by the RTF reader, which honours the body's own \\ansicpg and font charsets."""
    body = message.body
    if body:
        return [common.normalise(body).strip()]
    try:
        markup = message.htmlBody  # de-encapsulated from RTF by RTFDE when the message has none
    except Exception:  # noqa: BLE001 - RTFDE fails on some code pages; the RTF is still there
        markup = None
    if markup:
        return html.read_text(html.decode(markup) if isinstance(markup, bytes) else markup,
                              main_content=False).blocks
    data = message.rtfBody
    return rtf.read(data, common.Limits()).blocks if data else []


def _msg(message: Any, budget: _Budget, read_attachment: ReadAttachment, depth: int,
         keep: KeepAttachment | None = None) -> common.Doc:
    subject = common.one_line(getattr(message, "subject", None) or "")
    doc = common.Doc(title=subject or None)
    doc.add(common.heading(1, subject or "(no subject)"))
    headers = {"From": message.sender, "To": message.to, "Cc": message.cc, "Date": message.date}
    doc.add("\n".join(f"{k}: {common.one_line(str(v))}" for k, v in headers.items() if v))
    body = _msg_body(message)
    budget.take(sum(map(len, body)))
    doc.add(*body)
    listed: list[str] = []
    for number, attachment in enumerate(message.attachments, start=1):
        name = attachment.longFilename or attachment.shortFilename or f"attachment {number}"
        data = attachment.data
        if data is not None and not isinstance(data, bytes):  # an embedded message
            name = f"{name}.msg" if not str(name).lower().endswith(".msg") else name
            if keep is not None and (exported := _exported(data)) is not None:
                budget.take(len(exported))
                listed.append(keep(common.one_line(str(name)), exported))
                continue
            doc.add(common.heading(2, f"Attachment: {common.one_line(str(name))}"))
            budget.take(0)
            if depth + 1 <= budget.limits.max_depth:
                doc.add(common.demote(common.join_blocks(_msg(data, budget, read_attachment,
                                                              depth + 1).blocks), 2))
            continue
        budget.take(len(data or b""))
        if keep is not None:
            listed.append(keep(common.one_line(str(name)), data or b""))
        else:
            doc.add(*_attachment(str(name), data or b"", read_attachment, depth,
                                 budget.limits.max_depth))
    _list(doc, listed)
    return doc


def _exported(embedded: Any) -> bytes | None:
    """An embedded message as a .msg file of its own, or None when extract_msg cannot write
    it (then it is read as a section of its message instead)."""
    try:
        data = embedded.exportBytes()
    except Exception:  # noqa: BLE001 - extract_msg's writer raises many kinds; fall back
        return None
    return bytes(data) if data else None
