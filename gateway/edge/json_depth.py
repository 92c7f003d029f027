"""Every JSON body the gateway reads is at most MAX_DEPTH arrays/objects deep (ADR 0201).

Parsers recurse: msgspec, the stdlib and orjson each stop somewhere near 1,000 (or 255) levels
with a RecursionError, so a 2 KB body of brackets was a 500 on every JSON route, the public
sign-in included. The check sits in one place, in front of every handler: an ASGI middleware
that watches the body as the handler reads it (whichever parser the handler then uses) and
refuses it with 400 `json_too_deep` when the last piece arrives. Multipart and form bodies are
not JSON and pass untouched.

The depth is counted on the brackets outside strings, in C-speed passes (a regex drops escapes
where there are any, ``bytes.translate`` keeps the quotes and brackets, numpy counts them): a
4 MiB event batch costs milliseconds, and a body with fewer brackets than the limit is not
looked at twice.
"""

from __future__ import annotations

import re
from typing import Any

from litestar.types import ASGIApp, Receive, Scope, Send

from shared import errors

MAX_DEPTH = 64
# An escape: a backslash and the character it escapes (an escaped quote does not end a string).
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_MARKS = b'"[]{}'
_NOT_MARKS = bytes(b for b in range(256) if b not in _MARKS)
# Forms, whose bodies are not JSON: never scanned. Only a real multipart body (one with a
# boundary): a JSON route reads any other body as JSON whatever its Content-Type says, and a
# 1,000-level body sent as `multipart/form-data` without a boundary was a RecursionError, 500
# (found by the suite's schemathesis run). Raw uploads do not exist: files come as multipart.
_FORMS = (b"multipart/", b"application/x-www-form-urlencoded")


class TooDeep(errors.InvalidRequest):
    """The JSON body is nested more than 64 levels deep; flatten it and send it again."""

    code = "json_too_deep"


def depth_exceeds(body: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether any point of ``body`` lies inside more than ``limit`` arrays or objects.

    Malformed JSON is left to the parser, which answers its own 400."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False  # cannot be deeper than the number of openers
    if b"\\" in body:
        body = _ESCAPE.sub(b"", body)
    # Quotes and brackets only: with escapes gone, every quote opens or closes a string, so a
    # bracket lies outside strings where the quotes before it are even (ADR 0287: an event
    # batch's ~1,300 strings made a regex that strips them the gateway's costliest pass).
    import numpy as np  # only for bodies with many brackets (the gateway has it through torch)

    marks = np.frombuffer(body.translate(None, _NOT_MARKS), dtype=np.uint8)
    outside = (np.cumsum(marks == ord('"')) & 1) == 0
    steps = ((marks == ord("[")) | (marks == ord("{"))).astype(np.int32) \
        - ((marks == ord("]")) | (marks == ord("}")))
    return bool(steps.size and np.cumsum(steps * outside).max() > limit)


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers") or ():
        if name == b"content-type":
            value = value.lower().lstrip()
            form = value.startswith(_FORMS)
            return not form or (value.startswith(b"multipart/") and b"boundary=" not in value)
    return True  # no content type: a handler may still read it as JSON


def middleware(app: ASGIApp) -> ASGIApp:
    """Refuse a too-deep JSON body while the handler reads it (raised from ``receive``, so the
    app's error handlers answer it like any other AppError)."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _is_json(scope):
            await app(scope, receive, send)
            return
        pieces: list[bytes] = []

        async def watched() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                pieces.append(message.get("body", b""))
                if not message.get("more_body", False) and depth_exceeds(b"".join(pieces)):
                    raise TooDeep()
            return message

        await app(scope, watched, send)  # type: ignore[arg-type]

    return guarded
