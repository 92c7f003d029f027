"""Advertiser clients: the accounts a tenant's ad-metrics imports belong to (issue 13,
docs/decisions/0147). Tenant admins create them; every member lists them (the import form
offers them). An upload's ``client_id`` is checked against this table, tenant by tenant."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

from litestar import Request, Response, get, post
from litestar.params import JSONBody
from msgspec import Meta

from gateway import auth, openapi
from gateway.context import Ctx
from shared import db, errors

Q = db.load_queries(Path(__file__).with_name("clients.sql"))
MAX_NAME = 200  # ad_clients checks the same bound
# Text with something visible, and none of: control characters (Unicode's Cc: C0, DEL, C1),
# the bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069) that make a name
# read as another in a list ("Acme\u202eseohS" shows as "AcmeShoes"). A list a pattern can
# state, unlike Unicode's other invisible characters.
_NOT_IN_NAMES = r"\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
NAME_PATTERN = rf"^[^{_NOT_IN_NAMES}]*[^\s{_NOT_IN_NAMES}][^{_NOT_IN_NAMES}]*$"
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


class ClientExists(errors.Conflict):
    """Your tenant already has a client of that name; pick another name."""

    code = "client_exists"


class InvalidClientName(errors.InvalidRequest):
    """name must be 1 to 200 characters of text, e.g. 'Acme Shoes'."""

    code = "invalid_client_name"


def clean_name(name: str) -> str:
    """Trimmed, inner whitespace collapsed; control characters and bidirectional overrides
    refused (they are never part of a name and would hide one client behind another in a
    list). Unicode's other "C" characters (format, private use, unassigned) a pattern in
    /schema cannot list: kept."""
    cleaned = " ".join(name.split())
    if not 1 <= len(cleaned) <= MAX_NAME or any(
            unicodedata.category(ch) == "Cc" or ch in _BIDI for ch in cleaned):
        raise InvalidClientName()
    return cleaned


@dataclass
class NewClient:
    # clean_name's rule as /schema declares it: some text, no control character.
    name: Annotated[str, Meta(max_length=MAX_NAME, pattern=NAME_PATTERN,
                              description=InvalidClientName.__doc__)]


@post("/v1/clients", status_code=201, guards=[auth.admin_only], tags=["imports"],
      responses=openapi.errors(400, 409), opt={"error_codes": {"name": "invalid_client_name"}})
async def create_client(data: JSONBody[NewClient], request: Request, ctx: Ctx) -> Response:
    """A new advertiser client of this tenant (admins): `{"name"}` → the client."""
    principal = auth.current(request)
    name = clean_name(data.name)
    async with ctx.pool.connection() as conn:
        row = await (await conn.execute(Q["insert_client"], {
            "tenant_id": principal.tenant_id, "name": name,
            "created_by": principal.user_id})).fetchone()
    if row is None:
        raise ClientExists()
    return Response(_view(row), status_code=201)


@get("/v1/clients", tags=["imports"])
async def list_clients(request: Request, ctx: Ctx) -> dict:
    """This tenant's advertiser clients, by name."""
    items = await listing(ctx.pool, auth.current(request).tenant_id)
    return {"items": items, "total": len(items)}


async def listing(pool: db.AsyncPool, tenant_id: UUID) -> list[dict[str, Any]]:
    """The tenant's clients as the API shows them (the Imports page offers them too)."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(Q["list_clients"], {"tenant_id": tenant_id})).fetchall()
    return [_view(r) for r in rows]


def _view(row: dict[str, Any]) -> dict[str, Any]:
    return {"client_id": str(row["client_id"]), "name": row["name"],
            "created_by": str(row["created_by"]) if row["created_by"] else None,
            "created_at": row["created_at"].isoformat()}


ROUTES = [create_client, list_clients]
