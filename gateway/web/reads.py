"""What the pages show about runs and documents: tenant-scoped reads, shaped like the JSON API.

The listing and detail queries are the API's own (gateway/queries.sql), so a page and the JSON
its script polls can never disagree; the preview queries are the UI's (web/queries.sql).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from gateway import auth, paging, views
from gateway.documents import attachments
from gateway.documents import listing as documents
from gateway.imports import batches
from gateway.runs import routes as runs_routes
from shared import db, errors

API = db.load_queries(Path(__file__).parents[1] / "queries.sql")
Q = db.load_queries(Path(__file__).with_name("queries.sql"))
RUN_STATUSES = ("queued", "running", "succeeded", "failed")
PAGE_SIZE = 20
CHUNKS_PER_PAGE = 20


async def runs_page(pool: db.AsyncPool, *, tenant_id: UUID, status: str | None,
                    page: int, filename: str | None = None,
                    source_id: str | None = None) -> dict[str, Any]:
    if status not in (None, *RUN_STATUSES):
        status = None  # an unknown filter in a hand-edited URL shows everything
    filename = (filename or "").strip()[:255] or None
    source = _uuid_or_none(source_id)
    window = paging.Window(page, PAGE_SIZE)
    async with pool.connection() as conn:
        rows = await (await conn.execute(API["list_runs"], {
            "tenant_id": tenant_id, **runs_routes.filters(status, filename, source),
            **window.params()})).fetchall()
        sources = await (await conn.execute(API["run_sources"], {"tenant_id": tenant_id})).fetchall()
    return window.result(rows, views.run) | {"status": status, "filename": filename or "",
                                             "source_id": str(source) if source else "",
                                             "sources": sources}


def _uuid_or_none(value: str | None) -> UUID | None:
    try:
        return UUID(value) if value else None
    except ValueError:
        return None  # as an unknown status: a hand-edited URL shows everything


async def run(pool: db.AsyncPool, *, tenant_id: UUID, run_id: UUID) -> dict[str, Any]:
    async with pool.connection() as conn:
        row = await (await conn.execute(
            API["get_run"], {"tenant_id": tenant_id, "run_id": run_id})).fetchone()
        attempts = await (await conn.execute(
            API["list_run_attempts"], {"tenant_id": tenant_id, "run_id": run_id})).fetchall()
    if row is None:
        raise errors.NotFound("No ingestion run with that id exists in your tenant; "
                              "pick one from the list of runs.")
    return views.run(row) | {"attempts": [views.attempt(a) for a in attempts]}


async def documents_page(pool: db.AsyncPool, *, tenant_id: UUID, search: str | None,
                         state: str, page: int) -> dict[str, Any]:
    """The API's own listing (gateway/documents/listing.py), by page number."""
    return await documents.list_page(pool, tenant_id=tenant_id, state=state, search=search,
                                     window=paging.Window(page, PAGE_SIZE))


async def document(pool: db.AsyncPool, *, tenant_id: UUID, doc_id: UUID,
                   chunk_page: int = 1) -> dict[str, Any]:
    """The document with its state, where it came from, its versions (newest first), its runs
    and one page of the active version's chunks."""
    keys = {"tenant_id": tenant_id, "doc_id": doc_id}
    async with pool.connection() as conn:
        doc = await (await conn.execute(API["get_document"], keys)).fetchone()
        if doc is None:
            raise errors.NotFound("No document with that id exists in your tenant; "
                                  "pick one from the list of documents.")
        state = await documents.state(conn, **keys)
        versions = await (await conn.execute(API["list_versions"], keys)).fetchall()
        chunks = await documents.chunks_page(conn, **keys, page=chunk_page,
                                             limit=CHUNKS_PER_PAGE)
        runs = await (await conn.execute(Q["document_runs"], {**keys, "limit": 10})).fetchall()
        family = await attachments.family(conn, **keys)
    active = next((v for v in versions if v["is_active"]), None)
    chunk_total = active["chunk_count"] if active else 0
    return views.document(doc) | family | {
        "versions": versions, "active": active, "runs": runs, "state": state,
        "chunks": {"items": chunks, "page": chunk_page, "limit": CHUNKS_PER_PAGE,
                   "total": chunk_total}}


async def signed_in_email(pool: db.AsyncPool, *, tenant_id: UUID, user_id: UUID) -> str | None:
    async with pool.connection() as conn:
        row = await (await conn.execute(Q["signed_in_email"], {
            "tenant_id": tenant_id, "user_id": user_id})).fetchone()
    return row["email"] if row else None


# ── records imports (docs/decisions/0125) ───────────────────────────────────────────────────
BATCH_ACTIVE = ("pending", "processing", "staging_complete", "promoting")
ERRORS_PER_PAGE = 50


def batch_view(row: dict[str, Any]) -> dict[str, Any]:
    """The API's BatchStatusResult plus what the pages also show: the contract, the split of
    accepted rows and whether the batch is still moving."""
    return batches.batch_status(row) | {
        "contract": row["contract"], "rowsValid": row["rows_valid"],
        "rowsNew": row["rows_inserted"], "rowsUpdated": row["rows_updated"],
        "rowsUnchanged": row["rows_unchanged"], "forcePartial": row["force_partial"],
        "active": row["status"] in BATCH_ACTIVE}


async def my_imports(pool: db.AsyncPool, *, tenant_id: UUID, user_id: UUID,
                     limit: int = 10) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        rows = await (await conn.execute(Q["my_batches"], {
            "tenant_id": tenant_id, "user_id": user_id, "limit": limit})).fetchall()
    return [batch_view(r) for r in rows]


async def batch(pool: db.AsyncPool, *, principal: auth.Principal, batch_id: UUID,
                code: str | None, page: int) -> dict[str, Any]:
    """A batch with its error codes and one page of its errors, through the API's own queries;
    raw rows only where the API shows them (docs/decisions/0092)."""
    keys: dict[str, Any] = {"tenant_id": principal.tenant_id, "batch_id": batch_id}
    window = paging.Window(page, ERRORS_PER_PAGE)
    suffix = "_by_code" if code else ""
    async with pool.connection() as conn:
        row = await (await conn.execute(batches.Q["get_batch"], keys)).fetchone()
        if row is None:
            raise errors.NotFound(batches.NOT_FOUND + " Pick one from your imports.")
        codes = await (await conn.execute(Q["batch_error_codes"], keys)).fetchall()
        if code:
            keys["code"] = code
        total = await (await conn.execute(batches.Q["count_errors" + suffix], keys)).fetchone()
        found = await (await conn.execute(batches.Q["page_errors" + suffix], {
            **keys, "limit": window.limit, "offset": (window.page - 1) * window.limit,
        })).fetchall()
    with_raw = batches.sees_raw(principal, row)
    items = [{**e, "raw": e["raw"] if with_raw else None} for e in found]
    return batch_view(row) | {
        "runId": str(row["run_id"]) if row["run_id"] else None, "codes": codes,
        "withRaw": with_raw, "errors": {"items": items, "page": window.page,
                                        "limit": window.limit, "total": total["n"] if total else 0,
                                        "code": code or ""}}
