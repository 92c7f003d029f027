"""Paging of every listing: bounded `page`/`limit`, and signed keyset cursors for long lists.

A route declares its paging in one line, ``dependencies=paging.PAGES`` (page and limit) or
``dependencies=paging.CURSORS`` (page, limit and cursor), and takes ``window: paging.Paged``.
The bounds live in the parameters, so they are validated before the handler runs and shown in
/schema; an out-of-bounds value is a 400 `invalid_paging` (gateway/errors.py), never an OFFSET
that overflows Postgres' bigint (docs/decisions/0050-paging-and-cursors.md).

A cursor names the last row of a page, (created_at, id), plus the listing, tenant and filters it
belongs to, signed with an HMAC of the JWT secret: a client cannot forge a position, or carry a
cursor into another tenant's or another filter's listing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias
from uuid import UUID

from litestar.di import NamedDependency, Provide
from litestar.params import Parameter

from shared import errors

MAX_PAGE = 1000  # beyond this, OFFSET reads too many rows to skip: follow next_cursor instead
MAX_LIMIT = 100
DEFAULT_LIMIT = 20
MAX_CURSOR_CHARS = 512
PARAMS = frozenset({"page", "limit", "cursor"})
_VERSION = "c1"


class InvalidPaging(errors.InvalidRequest):
    """page must be 1 to 1000 and limit 1 to 100."""

    code = "invalid_paging"


# What a listing with cursors adds to that advice; a listing of pages only has none to follow.
CURSOR_ADVICE = "follow next_cursor to read further"


def advice(route_dependencies: dict[str, Any] | None) -> str:
    """The sentence a 400 for out-of-bounds paging ends with, for the route that refused it:
    only a listing that issues cursors says to follow them."""
    base = (InvalidPaging.__doc__ or "").strip().rstrip(".")
    window = (route_dependencies or {}).get("window")
    if window is not None and window is CURSORS["window"]:
        return f"{base}; {CURSOR_ADVICE}."
    return f"{base}."


class InvalidCursor(InvalidPaging):
    """The cursor is not one this listing issued; start again without a cursor."""

    code = "invalid_cursor"


PAGE = Parameter(int, ge=1, le=MAX_PAGE, default=1, required=False,
                 description=f"Page number, 1 to {MAX_PAGE}.")
LIMIT = Parameter(int, ge=1, le=MAX_LIMIT, default=DEFAULT_LIMIT, required=False,
                  description=f"Items per page, 1 to {MAX_LIMIT}.")
CURSOR = Parameter(str, min_length=1, max_length=MAX_CURSOR_CHARS, default=None, required=False,
                   description="Opaque `next_cursor` of the previous page; replaces `page`.")


@dataclass(frozen=True)
class Window:
    """What the client asked for: a page number, or the position after a cursor."""

    page: int = 1
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None

    def params(self, secret: str, scope: Sequence[object]) -> dict[str, Any]:
        """SQL parameters; one row more than asked, so whether a next page exists is known."""
        after_at, after_id = _decode(self.cursor, secret, scope) if self.cursor else (None, None)
        offset = 0 if self.cursor else (self.page - 1) * self.limit
        return {"limit": self.limit + 1, "offset": offset, "after_at": after_at,
                "after_id": after_id}

    def result(self, rows: list[dict[str, Any]], view: Callable[[dict[str, Any]], dict[str, Any]],
               *, secret: str | None = None, scope: Sequence[object] = (),
               key: tuple[str, str] | None = None) -> dict[str, Any]:
        """The page as the API returns it; with `key` (the rows' created_at and id columns),
        also the cursor of the next page, null on the last one."""
        shown = rows[:self.limit]
        out: dict[str, Any] = {
            "items": [view(r) for r in shown],
            "page": None if self.cursor else self.page, "limit": self.limit,
            "total": shown[0]["total"] if shown else 0}
        if key is not None:
            more = len(rows) > self.limit
            last = shown[-1] if shown else None
            out["next_cursor"] = (_encode(secret or "", scope, last[key[0]], last[key[1]])
                                  if more and last else None)
        return out


def _pages(page: int = PAGE, limit: int = LIMIT) -> Window:
    return Window(page, limit)


def _cursors(page: int = PAGE, limit: int = LIMIT, cursor: str | None = CURSOR) -> Window:
    if cursor is not None and page != 1:
        raise InvalidPaging("Send either page or cursor, not both.")
    return Window(page, limit, cursor)


# The one-liners routes declare: `dependencies=paging.PAGES` and a `window: paging.Paged` arg,
# the window injected by name (Litestar 3 drops dependencies inferred from a bare type).
Paged: TypeAlias = NamedDependency[Window]
PAGES = {"window": Provide(_pages, sync_to_thread=False)}
CURSORS = {"window": Provide(_cursors, sync_to_thread=False)}


def check_page(page: int, limit: int = DEFAULT_LIMIT) -> None:
    """For callers that take page/limit by hand (gateway/views.py's page_params)."""
    if not (1 <= page <= MAX_PAGE and 1 <= limit <= MAX_LIMIT):
        raise InvalidPaging()


# ── cursors ─────────────────────────────────────────────────────────────────────────────────
def _key(secret: str) -> bytes:
    # A key of its own, derived from the JWT secret: a cursor's MAC can never pass as a token's.
    return hmac.new(secret.encode(), b"dragonfly paging cursor", hashlib.sha256).digest()


def _mac(secret: str, body: bytes) -> str:
    digest = hmac.new(_key(secret), body, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _scope(scope: Sequence[object]) -> list[str]:
    return ["" if part is None else str(part) for part in scope]


def _encode(secret: str, scope: Sequence[object], at: datetime, row_id: object) -> str:
    body = json.dumps([_VERSION, _scope(scope), at.isoformat(), str(row_id)],
                      separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(body).rstrip(b"=").decode() + "." + _mac(secret, body)


def _decode(cursor: str, secret: str, scope: Sequence[object]) -> tuple[datetime, UUID]:
    """The (created_at, id) a cursor names, or InvalidCursor: it is hostile until proven ours."""
    try:
        encoded, _, mac = cursor.partition(".")
        body = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        if not hmac.compare_digest(mac.encode(), _mac(secret, body).encode()):
            raise InvalidCursor()
        version, cursor_scope, at, row_id = json.loads(body)
        if version != _VERSION or cursor_scope != _scope(scope):
            raise InvalidCursor("This cursor belongs to another listing or filter; start again "
                                "without a cursor.")
        return datetime.fromisoformat(at), UUID(row_id)
    except InvalidCursor:
        raise
    except (ValueError, TypeError, UnicodeError) as exc:
        raise InvalidCursor() from exc
