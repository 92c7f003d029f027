"""The one place that knows HTTP: app errors become JSON {code, detail} with a status."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException

from gateway import paging
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
    errors.TooManyAttempts: 429,
    errors.ServiceUnavailable: 503,
    errors.DatabaseUnavailable: 503,
}
_HTTP_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 409: "conflict", 413: "request_too_large",
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
    if status >= 500:
        log.error("request failed", exc_info=exc)
    # Some errors carry machine-readable extras (e.g. the running sync's id of a 409).
    extra = getattr(exc, "fields", None) or {}
    # A refusal that ends by itself (429) says when to come back.
    retry_after = getattr(exc, "retry_after_s", None)
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return Response({**_body(exc.code, exc.detail), **extra}, status_code=status, headers=headers)


def http_error(request: Request, exc: HTTPException) -> Response:
    detail = exc.detail
    code = _HTTP_CODES.get(exc.status_code, "internal_error" if exc.status_code >= 500 else "error")
    if isinstance(exc, ValidationException) and exc.extra:
        problems = exc.extra if isinstance(exc.extra, list) else [exc.extra]
        first = problems[0]
        if isinstance(first, dict):
            detail = f"{first.get('key', 'request')}: {first.get('message', detail)}"
        # page/limit/cursor out of their declared bounds (gateway/paging.py).
        if all(isinstance(p, dict) and p.get("key") in paging.PARAMS for p in problems):
            # A listing without cursors must not send the client after a next_cursor.
            code, detail = paging.InvalidPaging.code, f"{detail}. {paging.advice(_route_deps(request))}"
    return Response(_body(code, detail), status_code=exc.status_code, headers=exc.headers)


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
