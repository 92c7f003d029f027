"""The one place that knows HTTP: app errors become JSON {code, detail} with a status."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException

from gateway import openapi, paging
from gateway.edge import transport
from shared import db, errors

log = logging.getLogger(__name__)

STATUS: dict[type[errors.AppError], int] = {
    errors.InvalidRequest: 400,
    errors.EmptyFile: 400,
    errors.Unauthorized: 401,
    errors.Forbidden: 403,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.SyncInProgress: 409,
    errors.SourceDisabled: 409,
    errors.RunNotFailed: 409,
    errors.UploadExpired: 409,
    errors.AlreadyIngested: 409,
    errors.FileTooLarge: 413,
    errors.UnsupportedType: 415,
    transport.RequestTimeout: 408,
    errors.TooManyAttempts: 429,
    errors.ServiceUnavailable: 503,
    errors.DatabaseUnavailable: 503,
}
# Retry-After of a 503 whose error names no time of its own (a database or store outage).
UNAVAILABLE_RETRY_AFTER_S = 5
_HTTP_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 408: "request_timeout", 409: "conflict",
               413: "request_too_large",
               429: "rate_limited"}


def status_for(exc: errors.AppError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]  # type: ignore[index]
    return 500


def _body(code: str, detail: str) -> dict[str, str]:
    return {"code": code, "detail": detail}


def app_error(_: Request, exc: errors.AppError) -> Response:
    status = status_for(exc)
    # A refusal that ends by itself (429, a model still loading, a full server) says when to
    # come back; it is the gateway working as meant, not a failure with a traceback.
    retry_after = getattr(exc, "retry_after_s", None)
    if status >= 500 and retry_after is None:
        log.error("request failed", exc_info=exc)
    elif status >= 500:
        log.warning("request refused", extra={"code": exc.code, "status": status})
    if status == 503 and retry_after is None:
        retry_after = UNAVAILABLE_RETRY_AFTER_S  # a backing service: a client asks again
    # Some errors carry machine-readable extras (e.g. the running sync's id of a 409).
    extra = getattr(exc, "fields", None) or {}
    headers = dict(getattr(exc, "headers", None) or {})
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return Response({**_body(exc.code, exc.detail), **extra}, status_code=status,
                    headers=headers or None)


def http_error(request: Request, exc: HTTPException) -> Response:
    detail = exc.detail
    code = _HTTP_CODES.get(exc.status_code, "internal_error" if exc.status_code >= 500 else "error")
    if exc.status_code == 405 and exc.headers and exc.headers.get("Allow"):
        detail = (f"{request.method} is not a method of this path; it takes "
                  f"{exc.headers['Allow']}.")
    if isinstance(exc, ValidationException) and exc.extra:
        problems = exc.extra if isinstance(exc.extra, list) else [exc.extra]
        first = problems[0]
        if isinstance(first, dict):
            key = first.get("key", "request")
            # The rule the field declares, a sentence naming it (gateway/openapi.py), else
            # msgspec's words.
            rule = _declared_rule(request, key, first.get("source"))
            detail = rule.strip() if rule else f"{key}: {first.get('message', detail)}"
            code = _declared_code(request, key, str(first.get("message", ""))) or code
        # page/limit/cursor out of their declared bounds (gateway/paging.py).
        if all(isinstance(p, dict) and p.get("key") in paging.PARAMS for p in problems):
            if first.get("key") == "cursor":
                code, detail = paging.InvalidCursor.code, f"{detail}. {paging.InvalidCursor.__doc__}"
            else:  # a listing without cursors must not send the client after a next_cursor
                code, detail = paging.InvalidPaging.code, f"{detail}. {paging.advice(_route_deps(request))}"
    return Response(_body(code, detail), status_code=exc.status_code, headers=exc.headers)


def _declared_rule(request: Request, key: str, source: str | None) -> str | None:
    try:
        return openapi.field_rule(request.route_handler, key, source)
    except Exception:  # noqa: BLE001 - the generic message is still a fine answer
        return None


# Which declared constraint a msgspec message speaks of (JSON Schema's keyword for it).
_KEYWORDS = (("matching regex", "pattern"), ("of length >=", "minLength"),
             ("of length <=", "maxLength"), ("Invalid enum value", "enum"),
             ("unknown field", "additionalProperties"), ("issing required", "required"),
             (">=", "minimum"), ("<=", "maximum"))


def _declared_code(request: Request, key: str, message: str) -> str | None:
    """The code a handler declares for a field's refusal: ``opt={"error_codes": {"q":
    "query_empty"}}``, or per keyword ``{"q": {"pattern": "query_empty", "maxLength":
    "query_too_long"}}`` (codes clients already rely on survive the move into /schema)."""
    declared = (getattr(request.route_handler, "opt", None) or {}).get("error_codes", {})
    # Codes are declared by the names clients send. Litestar reports a query parameter by its
    # argument's name (?type= is file_type), and an item of a list field as "event_types[0]".
    field = key.split("[", 1)[0]
    codes = next((declared[name] for name in (key, field, _sent_name(request, field))
                  if name in declared), None)
    if isinstance(codes, str) or codes is None:
        return codes
    keyword = next((k for words, k in _KEYWORDS if words in message), None)
    return codes.get(keyword) or codes.get("*")


def _sent_name(request: Request, argument: str) -> str:
    """The name a handler's argument goes by in the request (QueryParameter(name=...))."""
    signature = getattr(request.route_handler, "parsed_fn_signature", None)
    field = signature.parameters.get(argument) if signature is not None else None
    kwarg = getattr(field, "kwarg_definition", None)
    return getattr(kwarg, "query", None) or getattr(kwarg, "name", None) or argument


def bad_value(_: Request, exc: Exception) -> Response:
    # JSON may carry lone surrogates ("\ud800") or NUL bytes, which no encoder, bcrypt or
    # Postgres accepts: the request's values are unusable, not our server broken.
    log.warning("request value refused: %s", type(exc).__name__)
    return Response(_body("invalid_value", "The request holds a value that cannot be stored "
                          "(a NUL byte, broken Unicode, a number out of range); fix it and "
                          "retry."), status_code=400)


def internal_error(_: Request, exc: Exception) -> Response:
    log.error("unhandled error", exc_info=exc)
    return Response(_body("internal_error", "Something went wrong on our side; retry, and "
                          "contact support if it keeps happening."), status_code=500)


HANDLERS = {errors.AppError: app_error, HTTPException: http_error, UnicodeError: bad_value,
            db.BAD_VALUE: bad_value, Exception: internal_error}


def _route_deps(request: Request) -> dict[str, Any] | None:
    try:
        return dict(request.route_handler.dependencies or {})
    except (AttributeError, KeyError):  # no route matched (a 400 before routing)
        return None
