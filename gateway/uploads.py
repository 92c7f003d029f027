"""Receive a multipart upload: hash it and write it to the upload store in one streaming pass.

The body is parsed as it arrives (streaming-form-data); file bytes are batched, hashed and
written in a worker thread, so neither the whole file nor a second copy of it is ever held.
The size cap and the content check apply while streaming; any failure removes what was written.

The form is hostile until checked: exactly one file part, each text field once and within its
limit, no other field, and everything that is not file bytes (part headers, boundaries, text
values) within one small budget, so no part of the body is ever buffered without a bound.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

from streaming_form_data import StreamingFormDataParser
from streaming_form_data.parser import ParseFailedException, UnexpectedPartException
from streaming_form_data.targets import BaseTarget

from gateway import filenames, filetypes
from shared import errors, objectstore

# Bytes gathered before a write; big enough to amortise the thread hop, small enough for memory.
FLUSH_BYTES = 1024 * 1024
# Multipart framing and the text fields are small; a body beyond cap + this is too large.
FRAMING_SLACK = 64 * 1024
# The text fields the form may carry besides `file`, each at most once, with its limit in
# characters (as /schema declares it; the stream is cut at four bytes a character).
TEXT_FIELDS = {"title": 1024, "doc_id": 64}
# Everything in the body that is not file bytes, together: part headers (which the parser buffers
# whole), boundaries, preamble and text values. A real form needs a few hundred bytes.
NON_FILE_LIMIT = 16 * 1024
# After refusing a body we keep reading (and discarding) up to this much, so the client gets
# our 413/415 instead of a connection reset in the middle of its send.
DRAIN_LIMIT = 512 * 1024 * 1024
# An oversized field or header is no form a client means to send: it is answered at once and
# the rest is not read (uvicorn discards what still arrives, then closes the connection). The
# other refusals may be a client's honest mistake, so they are drained like 413/415.
_ANSWER_AT_ONCE = (errors.FieldTooLarge,)
_MALFORMED = ("The body is not valid multipart/form-data; send the file in a field named 'file' "
              "with a multipart boundary.")


@dataclass(frozen=True)
class ReceivedFile:
    upload_uri: str
    original_filename: str
    stored_filename: str
    source_type: str
    content_type: str
    size_bytes: int
    content_hash: str  # "sha256:<hex>"
    title: str | None
    doc_id: uuid.UUID | None  # the document this upload is a new version of, if named
    # Every text field the route accepts (``text_fields``), stripped, None when not sent.
    fields: Mapping[str, str | None] = field(default_factory=dict)


def too_large(max_bytes: int) -> errors.FileTooLarge:
    return errors.FileTooLarge(
        f"The file is larger than the {max_bytes / (1024 * 1024):g} MB upload limit; "
        "split or compress it and upload again.")


class _FileTarget(BaseTarget):
    """Collects the file part's bytes for the next flush, enforcing type and size as they come."""

    def __init__(self, max_bytes: int, allowed: tuple[str, ...]) -> None:
        super().__init__()
        self.max_bytes = max_bytes
        self.allowed = allowed
        self.started = False
        self.filename = ""
        self.source_type = ""
        self.size = 0
        # The parser's chunks, kept as they came: the event loop copies no file bytes.
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.head = bytearray()
        self.checked = False
        # Set when the part's closing boundary arrives: a body cut short never sets it.
        self.complete = False

    def on_start(self) -> None:
        # A second file part would be appended to the first under the second's name, after the
        # type check saw only the first: refuse it as soon as its headers arrive.
        if self.started:
            raise errors.MultipleFiles()
        self.started = True
        # Kept here: the parser overwrites multipart_filename with each later part's name.
        self.filename = self.multipart_filename or ""
        # The name arrives with the part's headers: refuse a bad extension before any bytes.
        # A name without one waits for the part's Content-Type, set just after this.
        if "." in self.filename:
            self.typed()

    def typed(self) -> None:
        if not self.source_type:
            self.source_type = filetypes.source_type_for(self.filename, self.allowed,
                                                         self.multipart_content_type)

    def on_data_received(self, chunk: bytes) -> None:
        self.typed()
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise too_large(self.max_bytes)
        if not self.checked:
            self.head += chunk[: filetypes.SNIFF_BYTES - len(self.head)]
            if len(self.head) >= filetypes.SNIFF_BYTES:
                self.check(complete=False)
        self.pending.append(chunk)
        self.pending_bytes += len(chunk)

    def on_finish(self) -> None:
        self.complete = True

    def check(self, *, complete: bool) -> None:
        filetypes.check_content(self.source_type, bytes(self.head), complete=complete)
        self.checked = True

    def take(self) -> list[bytes]:
        chunks, self.pending, self.pending_bytes = self.pending, [], 0
        return chunks


class _TextTarget(BaseTarget):
    """One short text field, kept in memory up to its limit and refused beyond it."""

    def __init__(self, name: str, limit: int) -> None:
        super().__init__()
        self.name = name
        self.limit = limit
        self.started = False
        self.value = bytearray()

    def on_start(self) -> None:
        if self.started:
            raise errors.DuplicateField(f"The form sends '{self.name}' more than once; send it once.")
        self.started = True

    def on_data_received(self, chunk: bytes) -> None:
        if len(self.value) + len(chunk) > 4 * self.limit:
            raise self.too_long()
        self.value += chunk

    def too_long(self) -> errors.FieldTooLarge:
        return errors.FieldTooLarge(
            f"The '{self.name}' field is longer than {self.limit} characters; shorten it.")

    def text(self) -> str | None:
        # Postgres text cannot hold NUL: drop it, keep the rest as sent.
        value = self.value.decode("utf-8", "replace")
        if len(value) > self.limit:
            raise self.too_long()
        return value.replace("\x00", "").strip() or None


class _Sink:
    """Hashes and writes batches off the event loop; opens the store writer on first use."""

    def __init__(self, open_writer: Callable[[], objectstore.Writer]) -> None:
        self.open_writer = open_writer
        self.writer: objectstore.Writer | None = None
        self.sha = hashlib.sha256()

    def _write(self, chunks: list[bytes]) -> None:
        if self.writer is None:
            self.writer = self.open_writer()
        for chunk in chunks:
            self.sha.update(chunk)
            self.writer.write(chunk)

    async def write(self, chunks: list[bytes]) -> None:
        await asyncio.to_thread(self._write, chunks)

    def _commit(self, tail: list[bytes]) -> str:
        self._write(tail)
        assert self.writer is not None
        return self.writer.commit()

    async def commit(self, tail: list[bytes]) -> str:
        # The last batch and the commit share one thread hop: a file smaller than a batch
        # (most uploads) costs one hop in all, and each hop from a busy loop waits for the GIL.
        return await asyncio.to_thread(self._commit, tail)

    async def abort(self) -> None:
        if self.writer is not None:
            await asyncio.to_thread(self.writer.abort)


async def receive(
    *,
    content_type: str,
    content_length: int | None,
    body: AsyncIterator[bytes],
    store: objectstore.FileStore | objectstore.S3Store,
    key_prefix: str,
    max_bytes: int,
    allowed: tuple[str, ...],
    text_fields: Mapping[str, int] = TEXT_FIELDS,
) -> ReceivedFile:
    """Stream the ``file`` field of a multipart body into the store; read the text fields
    (``text_fields``: name → limit in bytes; a document upload's ``title``/``doc_id``)."""
    if not content_type.lower().startswith("multipart/form-data"):
        raise errors.InvalidRequest("Send the file as multipart/form-data in a field named 'file'.")
    target = _FileTarget(max_bytes, allowed)
    texts = {name: _TextTarget(name, limit) for name, limit in text_fields.items()}
    try:
        # strict: a field that is not registered is refused at its headers, never buffered.
        parser = StreamingFormDataParser(headers={"Content-Type": content_type}, strict=True)
    except ParseFailedException as exc:
        raise errors.InvalidRequest(_MALFORMED) from exc
    parser.register("file", target)
    for name, text in texts.items():
        parser.register(name, text)

    def open_writer() -> objectstore.Writer:
        return store.writer(f"{key_prefix}/{filenames.safe_filename(target.filename)}")

    sink = _Sink(open_writer)
    try:
        if content_length is not None and content_length > max_bytes + FRAMING_SLACK:
            raise too_large(max_bytes)
        received = 0
        async for chunk in body:
            received += len(chunk)
            _feed(parser, chunk, texts)
            # Checked per chunk, so a part's headers (buffered by the parser) stay bounded.
            if received - target.size > NON_FILE_LIMIT:
                raise errors.FieldTooLarge(
                    f"The form's fields and headers besides the file exceed {NON_FILE_LIMIT} "
                    f"bytes; send only file and {_names(texts, 'and')}.")
            if target.pending_bytes >= FLUSH_BYTES:
                await sink.write(target.take())
        return await _finish(target, texts, sink)
    except BaseException as exc:
        await sink.abort()
        if isinstance(exc, errors.AppError) and not isinstance(exc, _ANSWER_AT_ONCE):
            await _drain(body)
        raise


def _names(texts: Mapping[str, object], joiner: str) -> str:
    """The accepted text fields for a message: 'title' or 'doc_id'."""
    quoted = [repr(name) for name in texts]
    return ", ".join(quoted[:-1]) + f" {joiner} " + quoted[-1] if len(quoted) > 1 else "".join(quoted)


def _feed(parser: StreamingFormDataParser, chunk: bytes, texts: Mapping[str, object]) -> None:
    try:
        parser.data_received(chunk)
    except UnexpectedPartException as exc:
        name = (exc.part_name or "")[:40]
        raise errors.UnknownField(
            f"The form field {name!r} is not accepted; send the file in 'file' "
            f"and nothing else but {_names(texts, 'or')}.") from exc
    except ParseFailedException as exc:
        raise errors.InvalidRequest(_MALFORMED) from exc


async def _finish(target: _FileTarget, texts: dict[str, _TextTarget], sink: _Sink) -> ReceivedFile:
    if not target.started:
        raise errors.InvalidRequest("The form has no file; send it in a field named 'file'.")
    target.typed()  # an empty part without an extension has not been typed yet
    if not target.complete:
        raise errors.InvalidRequest("The upload ended before the end of the file; upload it again.")
    if target.size == 0:
        raise errors.EmptyFile()
    if not target.checked:
        target.check(complete=True)
    # Read (and bounded) before the commit: a refusal then leaves nothing stored.
    fields = {name: text.text() for name, text in texts.items()}
    doc_id = _doc_id(fields["doc_id"]) if "doc_id" in texts else None
    uri = await sink.commit(target.take())
    return ReceivedFile(
        upload_uri=uri,
        # Postgres text cannot hold NUL: drop it from what we keep for display.
        original_filename=target.filename.replace("\x00", ""),
        stored_filename=uri.rsplit("/", 1)[-1],
        source_type=target.source_type,
        content_type=filetypes.CONTENT_TYPES[target.source_type],
        size_bytes=target.size,
        content_hash=f"sha256:{sink.sha.hexdigest()}",
        title=fields.get("title"),
        doc_id=doc_id,
        fields=fields,
    )


def _doc_id(value: str | None) -> uuid.UUID | None:
    if value is None:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        raise errors.InvalidRequest(
            "doc_id is not a document id; send the doc_id of one of your documents.") from None


async def _drain(body: AsyncIterator[bytes]) -> None:
    drained = 0
    try:
        async for chunk in body:
            drained += len(chunk)
            if drained > DRAIN_LIMIT:
                return
    except Exception:  # noqa: BLE001 - the client may already be gone; nothing to do then
        return
