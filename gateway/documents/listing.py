"""A tenant's documents as people look for them: by state, and by the words inside them.

One query serves the API (GET /v1/documents) and the Documents page, so both always agree.
Search is full-text over the chunks of active versions, using the tsvectors the worker stores
in chunk_fts, plus a substring match on the title; results are ranked (docs/decisions/0115).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from uuid import UUID

from gateway import paging, views
from shared import db, errors

Q = db.load_queries(Path(__file__).with_name("listing.sql"))
STATES = ("active", "inactive", "failed", "all")
State = Literal["active", "inactive", "failed", "all"]  # STATES, an enum in /schema
MAX_SEARCH_CHARS = 200


class InvalidState(errors.InvalidRequest):
    """status must be one of active, inactive, failed or all."""

    code = "invalid_status"


def clean_search(search: str | None) -> str | None:
    text = (search or "").strip()
    if len(text) > MAX_SEARCH_CHARS or "\x00" in text:
        raise errors.InvalidRequest(f"search must be at most {MAX_SEARCH_CHARS} characters.")
    return text or None


def clean_state(state: str | None) -> str:
    if state is None or state == "":
        return "active"
    if state not in STATES:
        raise InvalidState()
    return state


async def list_page(pool: db.AsyncPool, *, tenant_id: UUID, window: paging.Window,
                    state: str, search: str | None) -> dict[str, Any]:
    params = {"tenant_id": tenant_id, "state": state, "query": search,
              "like": _like(search) if search else None,
              **window.params()}
    async with pool.connection() as conn:
        rows = await (await conn.execute(Q["list_documents"], params)).fetchall()
    out = window.result(rows, view, key=("created_at", "doc_id"))
    return out | {"status": state, "search": search}


def view(row: dict[str, Any]) -> dict[str, Any]:
    out = views.document(row)
    if row["doc_version_id"] is None:
        out["active_version"] = None
    out["state"] = row["state"]
    out["last_run"] = None if row["last_run_id"] is None else {
        "run_id": row["last_run_id"], "status": row["last_run_status"]}
    if row["rank"]:
        out["rank"] = round(float(row["rank"]), 6)
    return out


async def state(conn: db.AsyncConn, *, tenant_id: UUID, doc_id: UUID) -> dict[str, Any]:
    row = await (await conn.execute(Q["document_state"], {
        "tenant_id": tenant_id, "doc_id": doc_id})).fetchone()
    if row is None:
        raise errors.NotFound("No document with that id exists in your tenant.")
    state = ("active" if row["active"] else "failed" if row["last_run_status"] == "failed"
             else "inactive" if row["has_versions"] else "pending")
    return row | {"state": state}


async def chunks_page(conn: db.AsyncConn, *, tenant_id: UUID, doc_id: UUID, page: int,
                      limit: int) -> list[dict[str, Any]]:
    return await (await conn.execute(Q["chunks_page"], {
        "tenant_id": tenant_id, "doc_id": doc_id, "limit": limit,
        "offset": (page - 1) * limit})).fetchall()


def _like(search: str) -> str:
    escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"
