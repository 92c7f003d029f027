"""An e-mail's attachments on their way to becoming child documents (docs/decisions/0250).

The worker never creates documents: it stores each attachment's bytes in the upload store,
under ``<tenant_id>/<attachment_id>/``, and records them in message_attachments in the
message version's content transaction (index.write). The gateway's relay then creates the
child document, its run (run_id = attachment_id, so the stored file is confined to that run
like any upload) and its job. Files are stored before that transaction so that a committed row
always has its file; if the run ends without committing, they are removed again here, and
what a killed worker leaves behind is an orphan that cleanup removes after its TTL. Each
attempt stores under fresh ids: a worker that lost its run to a takeover removes its own
files, never the new owner's.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from shared import jobs, objectstore, retry
from worker.pipeline import extract

log = logging.getLogger(__name__)
_BLOCK = 1 << 20

MESSAGE_TYPES = ("eml", "msg")


@dataclass(frozen=True)
class Stored:
    attachment_id: UUID
    ordinal: int
    filename: str
    source_type: str
    size_bytes: int
    content_hash: str
    upload_uri: str
    depth: int  # of the child: its message's depth + 1
    message_subject: str | None  # what hits and citations of the child show as its source


def keeps_attachments(job: jobs.IngestJob, max_depth: int) -> bool:
    """Whether this job's attachments become documents (else they are read as sections)."""
    return job.source_type in MESSAGE_TYPES and job.attachment_depth < max_depth


def store(found: Sequence[extract.Attachment], job: jobs.IngestJob, store_uri: str,
          s3: Any, subject: str | None = None) -> list[Stored]:
    """Copy each kept attachment into the upload store; on a failure, remove what was copied."""
    target = objectstore.open_store(store_uri, s3)
    stored: list[Stored] = []
    try:
        for attachment in found:
            aid = uuid.uuid4()
            # The stored name is ours (the type's extension); the user's name is in the row.
            key = f"{job.tenant_id}/{aid}/attachment.{attachment.source_type}"
            uri = retry.transient()(_copy)(target, key, attachment.path)
            stored.append(Stored(aid, attachment.ordinal, attachment.filename,
                                 attachment.source_type, attachment.size_bytes,
                                 attachment.content_hash, uri, job.attachment_depth + 1,
                                 subject))
    except BaseException:
        remove(stored, s3)
        raise
    return stored


def settle(stored: Sequence[Stored], version_number: int, s3: Any) -> None:
    """After the content transaction: a superseded run (version 0, ADR 0242) made no version and
    so recorded none of its attachments; their files go now rather than as orphans at cleanup."""
    if version_number == 0:
        remove(stored, s3)


def remove(stored: Sequence[Stored], s3: Any) -> None:
    """Best effort: files of attachments whose message version was never committed."""
    for item in stored:
        try:
            objectstore.delete(item.upload_uri, s3)
        except Exception as exc:  # noqa: BLE001 - cleanup removes orphans after its TTL
            log.warning("could not remove a stored attachment",
                        extra={"error_type": type(exc).__name__})


def _copy(target: objectstore.FileStore | objectstore.S3Store, key: str, path: str) -> str:
    writer = target.writer(key)
    try:
        with open(path, "rb") as source:
            while block := source.read(_BLOCK):
                writer.write(block)
        return writer.commit()
    except BaseException:
        writer.abort()
        raise
