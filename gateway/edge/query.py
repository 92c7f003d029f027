"""A query string says each parameter once, and a typed parameter says a value of its type.

Litestar reads `?tenant_id=A&tenant_id=B` as one of them and `?tenant_id=null` as no tenant:
requests /schema calls invalid (an array where one value goes, the word null where a uuid
goes) were answered 200. Here, in one place for every route, a parameter /schema declares as
one value is refused with 400 when it appears twice, and one declared with a type (a uuid, a
date, a number, a boolean, one of an enum) when it is the word `null` (ADR 0200). The table comes from the
document itself (``openapi.complete``), so it cannot drift from the declarations.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from litestar.types import ASGIApp, Receive, Scope, Send

from shared import errors

# {(METHOD, path template): {parameter: "array" | "typed" | "text"}}
Kinds = dict[tuple[str, str], dict[str, str]]


class QueryRefused(errors.InvalidRequest):
    """A query parameter appears twice, or a typed one says null; send each once, with a value."""


def kind(schema: dict[str, Any]) -> str:
    if schema.get("type") == "array":
        return "array"
    # An enum is typed too: the word null is none of its values (Litestar read it as none).
    if schema.get("format") or schema.get("enum") or \
            schema.get("type") in ("integer", "number", "boolean"):
        return "typed"
    return "text"


def refusal(kinds: dict[str, str], query_string: bytes) -> str | None:
    """Why this query string breaks its declaration, or None."""
    seen: set[str] = set()
    for name, value in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True):
        declared = kinds.get(name)
        if declared is None or declared == "array":
            continue
        if name in seen:
            return f"The query parameter {name!r} appears more than once; send it once."
        seen.add(name)
        if declared == "typed" and value == "null":
            return f"{name} is not a value of its type; leave it out to mean none."
    return None


def middleware(app: ASGIApp) -> ASGIApp:
    async def checked(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("query_string"):
            table: Kinds = scope["app"].state.get("query_kinds") or {}
            where: Any = (scope.get("method", ""), scope.get("path_template", ""))
            kinds = table.get(where)
            why = refusal(kinds, scope["query_string"]) if kinds else None
            if why:
                raise QueryRefused(why)
        await app(scope, receive, send)

    return checked
