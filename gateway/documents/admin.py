"""An admin stops serving a document, or serves it again: nothing is ever deleted.

An e-mail's attachment documents follow their message (docs/decisions/0250, the triggers of
migrations/0066): taking the message down takes them down, serving it again serves them again;
an attachment alone can be taken down, and served again only while its message is.

Deactivation takes down the active version. Reactivation serves the newest version again
(docs/decisions/0116); uploading the same bytes again also brings an upload back, and an S3
source's next change to the object makes a new active version. Both take the worker's
per-document lock, so neither interleaves with a version activation, and both are logged.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from uuid import UUID

from shared import db, errors

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("admin.sql"))


async def deactivate(pool: db.AsyncPool, *, tenant_id: UUID, doc_id: UUID) -> dict[str, Any]:
    keys = {"tenant_id": tenant_id, "doc_id": doc_id}
    with db.translate():
        async with pool.connection() as conn, conn.transaction():
            if await (await conn.execute(Q["lock_document"], keys)).fetchone() is None:
                raise errors.NotFound("No document with that id exists in your tenant.")
            row = await (await conn.execute(Q["deactivate_active_version"], keys)).fetchone()
    if row is None:
        raise errors.Conflict("This document has no active version, so there is nothing to "
                              "deactivate; reload the page to see its state.")
    log.info("document deactivated", extra={"tenant_id": str(tenant_id), "doc_id": str(doc_id),
                                             "doc_version_id": str(row["doc_version_id"])})
    return {"doc_id": doc_id, "status": "deactivated", "doc_version_id": row["doc_version_id"],
            "version_number": row["version_number"], "deactivated_at": row["deactivated_at"]}


async def reactivate(pool: db.AsyncPool, *, tenant_id: UUID, doc_id: UUID) -> dict[str, Any]:
    """Serve the newest version again; 409 when one is served, none exists, or the S3 object
    behind the document is gone."""
    keys = {"tenant_id": tenant_id, "doc_id": doc_id}
    with db.translate():
        async with pool.connection() as conn, conn.transaction():
            if await (await conn.execute(Q["lock_document"], keys)).fetchone() is None:
                raise errors.NotFound("No document with that id exists in your tenant.")
            if await (await conn.execute(Q["active_version"], keys)).fetchone() is not None:
                raise errors.Conflict("This document is already served; reload the page to "
                                      "see its state.")
            message = await (await conn.execute(Q["message_of_attachment"], keys)).fetchone()
            if message is not None and not message["served"]:
                raise errors.Conflict("This document is an attachment of an e-mail that is not "
                                      "served (deactivated, or replaced by a newer version); "
                                      "reactivate the e-mail to serve its attachments again.")
            gone = await (await conn.execute(Q["s3_object_gone"], keys)).fetchone()
            if gone is not None and gone["gone"]:
                raise errors.Conflict("The S3 object behind this document is no longer in its "
                                      "source (deleted from the bucket, or the source was "
                                      "deleted), so it cannot be served again; put the object "
                                      "back and sync.")
            row = await (await conn.execute(Q["reactivate_newest_version"], keys)).fetchone()
    if row is None:
        raise errors.Conflict("This document has no version to serve: its runs never finished; "
                              "open its run to see why, and retry it or upload the file again.")
    log.info("document reactivated", extra={"tenant_id": str(tenant_id), "doc_id": str(doc_id),
                                             "doc_version_id": str(row["doc_version_id"])})
    return {"doc_id": doc_id, "status": "reactivated", "doc_version_id": row["doc_version_id"],
            "version_number": row["version_number"], "reactivated_at": row["reactivated_at"]}
