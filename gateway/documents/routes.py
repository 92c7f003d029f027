from __future__ import annotations

from pathlib import Path
from typing import Annotated
from uuid import UUID

from litestar import Request, get, post
from litestar.params import FromPath, FromQuery, Parameter

from gateway import auth, openapi, paging, views
from gateway.context import Ctx
from gateway.documents import admin as document_admin
from gateway.documents import attachments
from gateway.documents import listing as documents
from shared import db, errors

Q = db.load_queries(Path(__file__).parents[1] / "queries.sql")


@get("/v1/documents", tags=["documents"], dependencies=paging.CURSORS,
     responses=openapi.errors(400), opt={"error_codes": {"status": "invalid_status"}})
async def list_documents(request: Request, ctx: Ctx, window: paging.Paged,
                         search: Annotated[str | None, Parameter(
                             max_length=documents.MAX_SEARCH_CHARS, pattern=openapi.NO_NUL)] = None,
                         status: FromQuery[documents.State | None] = None,
                         filename: Annotated[str | None, Parameter(
                             max_length=255, pattern=openapi.NO_NUL,
                             description="Only uploaded documents made from a file of exactly "
                                         "this name (at most 20, no paging).")] = None) -> dict:
    """Documents newest first, by `status`: `active` (default), `inactive` (deactivated),
    `failed` (no version: its run failed) or `all`. `search` finds words inside active
    documents (full-text over their chunks) and in titles, best match first (`rank`); follow
    `next_cursor` to read them all. `filename` finds the uploads of one file name instead."""
    principal = auth.current(request)
    if filename is not None:
        # The upload page's "new version of notes.md?" offer (docs/decisions/0102).
        async with ctx.pool.connection() as conn:
            found = await (await conn.execute(Q["find_upload_documents_by_filename"], {
                "tenant_id": principal.tenant_id, "filename": filename, "limit": 20})).fetchall()
        return {"items": [views.document(d) for d in found], "page": 1, "limit": 20,
                "total": len(found), "next_cursor": None}
    return await documents.list_page(
        ctx.pool, tenant_id=principal.tenant_id, window=window,
        state=documents.clean_state(status), search=documents.clean_search(search))


@get("/v1/documents/{doc_id:uuid}", tags=["documents"], responses=openapi.errors(404))
async def get_document(doc_id: FromPath[UUID], request: Request, ctx: Ctx) -> dict:
    """A document with its versions; for an e-mail, the documents its attachments became
    (`attachments`), and for one of those, the e-mail it came from (`parent`)."""
    principal = auth.current(request)
    keys = {"tenant_id": principal.tenant_id, "doc_id": doc_id}
    async with ctx.pool.connection() as conn:
        doc = await (await conn.execute(Q["get_document"], keys)).fetchone()
        if doc is None:
            raise errors.NotFound("No document with that id exists in your tenant.")
        versions = await (await conn.execute(Q["list_versions"], keys)).fetchall()
        family = await attachments.family(conn, **keys)
    # parent: the e-mail an attachment came from; attachments: the documents the newest
    # version's attachments became (docs/decisions/0250).
    return views.document(doc) | {"versions": versions} | family


@post("/v1/documents/{doc_id:uuid}/deactivate", guards=[auth.admin_only], status_code=200,
      tags=["documents"], responses=openapi.errors(404, 409))
async def deactivate_document(doc_id: FromPath[UUID], request: Request, ctx: Ctx) -> dict:
    """Stop serving a document (admins): its active version is deactivated, nothing deleted;
    409 when it has no active version."""
    principal = auth.current(request)
    return await document_admin.deactivate(ctx.pool, tenant_id=principal.tenant_id, doc_id=doc_id)


@post("/v1/documents/{doc_id:uuid}/reactivate", guards=[auth.admin_only], status_code=200,
      tags=["documents"], responses=openapi.errors(404, 409))
async def reactivate_document(doc_id: FromPath[UUID], request: Request, ctx: Ctx) -> dict:
    """Serve a deactivated document again (admins): its newest version becomes active; 409
    when a version is already active, none exists, or its S3 object is gone."""
    principal = auth.current(request)
    return await document_admin.reactivate(ctx.pool, tenant_id=principal.tenant_id,
                                           doc_id=doc_id)
