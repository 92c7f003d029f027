"""An admin stops serving a document: its active version is deactivated, nothing is deleted.

Uploading the same bytes again brings it back (intake finds no active version and queues a
run), and an S3 source's next change to the object makes a new active version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from shared import db, errors

Q = db.load_queries(Path(__file__).with_name("document_admin.sql"))


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
    return {"doc_id": doc_id, "status": "deactivated", "doc_version_id": row["doc_version_id"],
            "version_number": row["version_number"], "deactivated_at": row["deactivated_at"]}
