"""Paging of every listing: bounded `page`/`limit`, and keyset cursors for long lists.

A route declares its paging in one line, ``dependencies=paging.PAGES`` (page and limit) or
``dependencies=paging.CURSORS`` (page, limit and cursor), and takes ``window: paging.Paged``.
The bounds live in the parameters, so they are validated before the handler runs and shown in
/schema; an out-of-bounds value is a 400 `invalid_paging` (gateway/errors.py), never an OFFSET
that overflows Postgres' bigint (docs/decisions/0050-paging-and-cursors.md).

A cursor names the last row of a page, `<created_at in microseconds since 1970>-<id as 32 hex
digits>`: the next page is the rows before it in `(created_at, id)` order. Every string of
that shape is a position (a keyset is a WHERE clause, not a secret), so /schema can declare
the cursor exactly and the server takes every cursor the schema allows (ADR 0200, which
replaces 0050's signed cursors: the SQL filters by tenant, so a cursor of another tenant or
listing only says where to start in the caller's own rows).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias
from uuid import UUID

from litestar.di import NamedDependency, Provide
from litestar.params import Parameter

from shared import errors

MAX_PAGE = 1000  # beyond this, OFFSET reads too many rows to skip: follow next_cursor instead
MAX_LIMIT = 100
DEFAULT_LIMIT = 20
CURSOR_PATTERN = r"^[0-9]{1,16}-[0-9a-f]{32}$"
PARAMS = frozenset({"page", "limit", "cursor"})
_CURSOR = re.compile(CURSOR_PATTERN)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


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
    """The cursor is not a `next_cursor` of a listing; start again without a cursor."""

    code = "invalid_cursor"


PAGE = Parameter(int, ge=1, le=MAX_PAGE, default=1, required=False,
                 description=f"Page number, 1 to {MAX_PAGE}.")
LIMIT = Parameter(int, ge=1, le=MAX_LIMIT, default=DEFAULT_LIMIT, required=False,
                  description=f"Items per page, 1 to {MAX_LIMIT}.")
CURSOR = Parameter(str, pattern=CURSOR_PATTERN, default=None, required=False,
                   description="`next_cursor` of the previous page: the next page starts after "
                               "it, and `page` is not read.")


@dataclass(frozen=True)
class Window:
    """What the client asked for: a page number, or the position after a cursor."""

    page: int = 1
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None

    def params(self) -> dict[str, Any]:
        """SQL parameters; one row more than asked, so whether a next page exists is known."""
        after_at, after_id = _decode(self.cursor) if self.cursor else (None, None)
        offset = 0 if self.cursor else (self.page - 1) * self.limit
        return {"limit": self.limit + 1, "offset": offset, "after_at": after_at,
                "after_id": after_id}

    def result(self, rows: list[dict[str, Any]], view: Callable[[dict[str, Any]], dict[str, Any]],
               *, key: tuple[str, str] | None = None) -> dict[str, Any]:
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
            out["next_cursor"] = _encode(last[key[0]], last[key[1]]) if more and last else None
        return out


def _pages(page: int = PAGE, limit: int = LIMIT) -> Window:
    return Window(page, limit)


def _cursors(page: int = PAGE, limit: int = LIMIT, cursor: str | None = CURSOR) -> Window:
    # A cursor says where the page starts: `page` then has nothing left to say.
    return Window(1 if cursor else page, limit, cursor)


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
def _encode(at: datetime, row_id: object) -> str:
    return f"{(at - _EPOCH) // _MICROSECOND}-{UUID(str(row_id)).hex}"


def _decode(cursor: str) -> tuple[datetime, UUID]:
    """The (created_at, id) a cursor names; any cursor of the declared shape names one."""
    if not _CURSOR.match(cursor):
        raise InvalidCursor()
    micros, _, row_id = cursor.partition("-")
    return _EPOCH + int(micros) * _MICROSECOND, UUID(hex=row_id)
