from __future__ import annotations

from pathlib import Path
from uuid import UUID

from litestar import Request, get, post

from gateway import auth, document_admin, views
from gateway.context import Context
from shared import db, errors

Q = db.load_queries(Path(__file__).parents[1] / "queries.sql")


def _like(search: str) -> str:
    escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


@get("/v1/documents", tags=["documents"])
async def list_documents(request: Request, ctx: Context, page: int = 1, limit: int = 20,
                         search: str | None = None) -> dict:
    """Documents with an active version, newest first; `search` matches the title."""
    principal = auth.current(request)
    lim, offset = views.page_params(page, limit)
    async with ctx.pool.connection() as conn:
        rows = await (await conn.execute(Q["list_documents"], {
            "tenant_id": principal.tenant_id, "limit": lim, "offset": offset,
            "search": _like(search) if search else None})).fetchall()
    return views.paged([views.document(r) for r in rows], rows, page, limit)


@get("/v1/documents/{doc_id:uuid}", tags=["documents"])
async def get_document(doc_id: UUID, request: Request, ctx: Context) -> dict:
    principal = auth.current(request)
    keys = {"tenant_id": principal.tenant_id, "doc_id": doc_id}
    async with ctx.pool.connection() as conn:
        doc = await (await conn.execute(Q["get_document"], keys)).fetchone()
        if doc is None:
            raise errors.NotFound("No document with that id exists in your tenant.")
        versions = await (await conn.execute(Q["list_versions"], keys)).fetchall()
    return views.document(doc) | {"versions": versions}


@post("/v1/documents/{doc_id:uuid}/deactivate", guards=[auth.admin_only], status_code=200,
      tags=["documents"])
async def deactivate_document(doc_id: UUID, request: Request, ctx: Context) -> dict:
    """Stop serving a document (admins): its active version is deactivated, nothing deleted;
    409 when it has no active version."""
    principal = auth.current(request)
    return await document_admin.deactivate(ctx.pool, tenant_id=principal.tenant_id, doc_id=doc_id)
