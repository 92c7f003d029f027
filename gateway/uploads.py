"""Receive a multipart upload: hash it and write it to the upload store in one streaming pass.

The body is parsed as it arrives (streaming-form-data); file bytes are batched, hashed and
written in a worker thread, so neither the whole file nor a second copy of it is ever held.
The size cap and the content check apply while streaming; any failure removes what was written.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from streaming_form_data import StreamingFormDataParser
from streaming_form_data.parser import ParseFailedException
from streaming_form_data.targets import BaseTarget, ValueTarget

from gateway import filenames, filetypes
from shared import errors, objectstore

# Bytes gathered before a write; big enough to amortise the thread hop, small enough for memory.
FLUSH_BYTES = 1024 * 1024
# Multipart framing and the title field are small; a body beyond cap + this is too large.
FRAMING_SLACK = 64 * 1024
# After refusing a body we keep reading (and discarding) up to this much, so the client gets
# our 413/415 instead of a connection reset in the middle of its send.
DRAIN_LIMIT = 512 * 1024 * 1024
MAX_TITLE_CHARS = 500
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
        # The name arrives with the part's headers: refuse a bad extension before any bytes.
        self.source_type = filetypes.source_type_for(self.multipart_filename or "", self.allowed)

    def on_data_received(self, chunk: bytes) -> None:
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
) -> ReceivedFile:
    """Stream the ``file`` (and optional ``title``) fields of a multipart body into the store."""
    if not content_type.lower().startswith("multipart/form-data"):
        raise errors.InvalidRequest("Send the file as multipart/form-data in a field named 'file'.")
    target = _FileTarget(max_bytes, allowed)
    title = ValueTarget()
    try:
        parser = StreamingFormDataParser(headers={"Content-Type": content_type})
    except ParseFailedException as exc:
        raise errors.InvalidRequest(_MALFORMED) from exc
    parser.register("file", target)
    parser.register("title", title)

    def open_writer() -> objectstore.Writer:
        name = filenames.safe_filename(target.multipart_filename or "")
        return store.writer(f"{key_prefix}/{name}")

    sink = _Sink(open_writer)
    try:
        if content_length is not None and content_length > max_bytes + FRAMING_SLACK:
            raise too_large(max_bytes)
        async for chunk in body:
            try:
                parser.data_received(chunk)
            except ParseFailedException as exc:
                raise errors.InvalidRequest(_MALFORMED) from exc
            if target.pending_bytes >= FLUSH_BYTES:
                await sink.write(target.take())
        return await _finish(target, title, sink)
    except BaseException as exc:
        await sink.abort()
        if isinstance(exc, errors.AppError):
            await _drain(body)
        raise


async def _finish(target: _FileTarget, title: ValueTarget, sink: _Sink) -> ReceivedFile:
    if not target.source_type:
        raise errors.InvalidRequest("The form has no file; send it in a field named 'file'.")
    if not target.complete:
        raise errors.InvalidRequest("The upload ended before the end of the file; upload it again.")
    if target.size == 0:
        raise errors.EmptyFile()
    if not target.checked:
        target.check(complete=True)
    uri = await sink.commit(target.take())
    # Postgres text cannot hold NUL: drop it from what we keep for display, keep the rest as sent.
    original = (target.multipart_filename or "").replace("\x00", "")
    title_text = (title.value.decode("utf-8", "replace").replace("\x00", "").strip()
                  [:MAX_TITLE_CHARS] or None)
    return ReceivedFile(
        upload_uri=uri,
        original_filename=original,
        stored_filename=uri.rsplit("/", 1)[-1],
        source_type=target.source_type,
        content_type=filetypes.CONTENT_TYPES[target.source_type],
        size_bytes=target.size,
        content_hash=f"sha256:{sink.sha.hexdigest()}",
        title=title_text,
    )


async def _drain(body: AsyncIterator[bytes]) -> None:
    drained = 0
    try:
        async for chunk in body:
            drained += len(chunk)
            if drained > DRAIN_LIMIT:
                return
    except Exception:  # noqa: BLE001 - the client may already be gone; nothing to do then
        return
