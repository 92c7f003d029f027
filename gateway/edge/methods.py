"""OPTIONS and the Allow header: which methods a path takes, for anyone who asks.

Litestar answers OPTIONS with a handler it makes when a path's first handler registers, so its
Allow missed methods registered later (GET of /v1/api-keys, PATCH and DELETE of a source), and
the app-wide token guard applied to it. Here OPTIONS is answered before any guard, from the
app's own route table: every method of the matched path, the same list a 405 gives. It says
nothing a 405 does not already say, so it needs no token.
"""

from __future__ import annotations

from typing import Any

from litestar import Litestar
from litestar.routes import HTTPRoute
from litestar.types import ASGIApp, Receive, Scope, Send


def allowed(app: Litestar, path_template: str) -> str:
    """``GET, OPTIONS, POST``: the methods of the route with this template, sorted."""
    table: dict[str, str] | None = app.state.get("allow_by_template")
    if table is None:
        table = app.state["allow_by_template"] = {
            route.path_format: ", ".join(sorted(route.methods))
            for route in app.routes if isinstance(route, HTTPRoute)}
    return table.get(path_template, "OPTIONS")


def middleware(app: ASGIApp) -> ASGIApp:
    async def options(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "OPTIONS":
            await app(scope, receive, send)
            return
        allow = allowed(scope["app"], scope.get("path_template", ""))  # type: ignore[typeddict-item]
        start: Any = {"type": "http.response.start", "status": 204,
                      "headers": [(b"allow", allow.encode())]}
        await send(start)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return options
