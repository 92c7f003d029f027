"""Errors on pages become pages: a signed-out visitor is sent to sign in, every other error is
rendered with its status and one sentence that says what happened and what to do next."""

from __future__ import annotations

import logging
from collections.abc import Callable
from urllib.parse import urlencode

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.response import Redirect
from litestar.types import ExceptionHandlersMap

from gateway import errors as api_errors
from gateway.web import session
from shared import errors

log = logging.getLogger(__name__)

TITLES = {400: "That address could not be read", 403: "You may not open this page",
          404: "Not found", 405: "Not available this way", 409: "That changed meanwhile",
          500: "Something went wrong", 503: "A service is unavailable"}
_HTTP_DETAILS = {
    400: "The address has a value this page cannot read; go back and use the page's links.",
    404: "There is no page at this address; use the menu to find what you were looking for.",
    405: "This page cannot be opened that way; go back and use its buttons.",
}
INTERNAL = ("Something went wrong on our side; reload the page, and tell an admin if it keeps "
            "happening.")

Render = Callable[..., Response]


def handlers(render: Render) -> ExceptionHandlersMap:
    def page(request: Request, status: int, detail: str) -> Response:
        return render(request, "error.html", status_code=status,
                      title=TITLES.get(status, "That did not work"), detail=detail)

    def app_error(request: Request, exc: errors.AppError) -> Response:
        if isinstance(exc, errors.Unauthorized):
            return _to_sign_in(request)
        status = api_errors.status_for(exc)
        if status >= 500:
            log.error("page failed", exc_info=exc)
        return page(request, status, exc.detail)

    def http_error(request: Request, exc: HTTPException) -> Response:
        status = exc.status_code
        if isinstance(exc, ValidationException):
            status = 400
        return page(request, status, _HTTP_DETAILS.get(status, INTERNAL if status >= 500
                                                       else str(exc.detail)))

    def internal_error(request: Request, exc: Exception) -> Response:
        log.error("unhandled error on a page", exc_info=exc)
        return page(request, 500, INTERNAL)

    return {errors.AppError: app_error, HTTPException: http_error, Exception: internal_error}


# Addresses of the JSON API, health checks, metrics and the API's docs: an unknown one there is
# answered in JSON whatever the client accepts, so scripts and probes never parse a page.
API_PREFIXES = ("/v1/", "/intake", "/api/", "/health", "/metrics", "/schema")
API_PATHS = ("/v1", "/api")


def unknown_address(render: Render,
                    api_handler: Callable[[Request, HTTPException], Response]
                    ) -> Callable[[Request, HTTPException], Response]:
    """An address no route has: a browser (Accept: text/html, outside the API) gets the HTML
    404 page, every other client the API's JSON answer."""
    def handler(request: Request, exc: HTTPException) -> Response:
        path = request.url.path
        is_api = path.startswith(API_PREFIXES) or path in API_PATHS
        if is_api or "text/html" not in request.headers.get("accept", ""):
            return api_handler(request, exc)
        return render(request, "error.html", status_code=exc.status_code,
                      title=TITLES.get(exc.status_code, "That did not work"),
                      detail=_HTTP_DETAILS.get(exc.status_code, INTERNAL))
    return handler


def _to_sign_in(request: Request) -> Response:
    """Back to the sign-in form, then back here; an expired cookie is dropped on the way."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    query = {"next": target} if request.method == "GET" else {}
    cookies = []
    if session.cookie_token(request):
        secure = session.secure(request, request.app.state.ctx.settings.session_cookie_secure)
        cookies.append(session.cleared_session_cookie(secure=secure))
        query["expired"] = "true"
    url = session.LOGIN_PATH + (f"?{urlencode(query)}" if query else "")
    return Redirect(url, status_code=303, cookies=cookies)
