"""A JSON body is read as JSON says it: a declared boolean is true or false, an integer is a
number, never a string that looks like one (ADR 0331).

Litestar converts a handler's arguments with msgspec's lax rules (``strict=False``) because
the same conversion serves query strings, where every value is text. Applied to a JSON body it
takes ``0`` and ``"1"`` as false and true and ``"5"`` as 5, which /schema does not promise: a
client that sends ``"dry_run": "false"`` to a mass action would have it run. This hook runs
after the guards (an unauthenticated caller still hears 401 first) and before Litestar's own
conversion, on the body Litestar decodes and caches anyway, and converts it strictly against
the type the handler declares. A refusal is Litestar's own ValidationException, so the answer
is the same 400 as any other body field's: the field's declared rule in words, its code.

Every route takes it from the application; a layer that sets its own ``before_request`` would
drop it, which tests/unit/test_strict_body.py checks for every route with a body.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec
from litestar import Request
from litestar.exceptions import ValidationException

# "Expected `bool`, got `int` - at `$.dry_run`" → the field's path as clients name it.
_WHERE = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_TYPES: dict[Any, Any] = {}  # route handler → its body's type (None: no body)
# msgspec's "Expected `bool`, got `int`" in the words of JSON, which is what the client wrote.
_EXPECTED = re.compile(r"^Expected `(?P<want>[^`]+)`, got `(?P<got>[^`]+)`$")
_JSON_WORDS = {"bool": "true or false", "int": "an integer", "float": "a number",
               "str": "a string", "array": "a list", "object": "an object", "null": "null"}


async def check(request: Request) -> None:
    """Refuse a body whose values only lax conversion would accept; return None to go on."""
    declared = body_type(request.route_handler)
    if declared is None or not await request.body():
        return  # no body: Litestar's own answer (a required body missing, or the default)
    try:
        body = await request.json()
    except Exception:  # noqa: BLE001 - not JSON at all: Litestar's own path answers 400
        return
    refused = problem(body, declared)
    if refused is not None:
        raise ValidationException(extra=[refused])


def problem(body: Any, declared: Any) -> dict[str, str] | None:
    """The field a strict conversion refuses, shaped as Litestar's own body errors, or None."""
    try:
        msgspec.convert(integral(body), declared, strict=True)
    except msgspec.ValidationError as exc:
        return _problem(str(exc))
    return None


def body_type(handler: Any) -> Any | None:
    """The type a handler declares for its ``data`` argument (with its constraints), or None."""
    if handler not in _TYPES:
        field = handler.parsed_fn_signature.parameters.get("data")
        _TYPES[handler] = None if field is None else _without_body_marker(field.raw)
    return _TYPES[handler]


def integral(value: Any) -> Any:
    """JSON's 60.0 is the integer 60 to JSON Schema (and to /schema's readers): say so."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral(v) for v in value]
    return value


def _without_body_marker(raw: Any) -> Any:
    """``JSONBody[T]`` is ``Annotated[T, Body(...)]``: keep T and msgspec's own constraints."""
    metadata = getattr(raw, "__metadata__", None)
    if metadata is None:
        return raw
    kept = tuple(m for m in metadata if isinstance(m, msgspec.Meta))
    inner = raw.__origin__
    return Annotated[(inner, *kept)] if kept else inner


def _problem(message: str) -> dict[str, str]:
    """The shape Litestar's signature model gives a body field's error (gateway/errors.py)."""
    where = _WHERE.search(message)
    text = message[:where.start()] if where else message
    key = where.group("path") if where and where.group("path") else "request"
    return {"message": _in_json_words(text), "key": key, "source": "body"}


def _in_json_words(text: str) -> str:
    """"Expected `bool`, got `int`" → "must be true or false, not a number"."""
    found = _EXPECTED.match(text)
    if not found:
        return text
    want = " or ".join(_JSON_WORDS.get(t.strip(), t.strip()) for t in found["want"].split("|"))
    got = "a number" if found["got"] in ("int", "float") else _JSON_WORDS.get(found["got"],
                                                                               found["got"])
    return f"must be {want}, not {got}"
