"""/schema describes the API as it answers (docs/decisions/0051-openapi-document.md).

Two pieces:
- ``errors(404, 409)`` is what a route declares: ``@get(..., responses=openapi.errors(404))``
  lists the errors it answers beyond the ones every route shares, each with the `{code, detail}`
  body of gateway/errors.py.
- ``complete(app)`` finishes the generated document once, at app creation, with what follows
  from each route's own declaration: the bearer scheme on every route that is not public, 401
  there, 403 where the admin guard sits, and Litestar's own 400 body replaced by ours.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from litestar import Litestar
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import (
    Components,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    Reference,
    RequestBody,
    Schema,
    SecurityScheme,
)
from litestar.routes import HTTPRoute

from gateway import auth

BEARER = "bearer"
ERROR = "ErrorBody"
DESCRIPTIONS = {
    400: "The request is malformed: a field, parameter or body the route cannot read.",
    401: "No valid bearer token (or session cookie) was sent; sign in again.",
    403: "The caller's role does not allow this.",
    404: "Nothing with that id exists in the caller's tenant.",
    405: "The path exists, but not with this method; `Allow` lists the ones it takes.",
    409: "The resource is in a state that does not allow this now.",
    413: "The body is larger than the limit.",
    415: "The file type or body content type is not accepted.",
    429: "Too many requests; retry after `Retry-After` seconds.",
    503: "A backing service is unreachable; retry in a minute.",
}


@dataclass
class ErrorBody:
    """Every error answer: a machine-readable code and one sentence for people. Some carry more
    (e.g. `sync_id` of a 409 `sync_in_progress`)."""

    code: str
    detail: str


def errors(*statuses: int) -> dict[int, ResponseSpec]:
    """The `responses=` of a route that answers these error statuses."""
    return {status: ResponseSpec(data_container=ErrorBody, generate_examples=False,
                                 description=_describe(status)) for status in statuses}


def form_body(required: tuple[str, ...], **fields: Schema) -> type[Operation]:
    """An `operation_class=` for a route that reads its multipart form by hand (a stream), so
    Litestar cannot see the body: the operation declares it."""
    body = RequestBody(required=True, content={"multipart/form-data": OpenAPIMediaType(schema=Schema(
        type=OpenAPIType.OBJECT, required=list(required), properties=dict(fields)))})

    @dataclass
    class FormOperation(Operation):
        def __post_init__(self) -> None:
            self.request_body = body

    return FormOperation


def complete(app: Litestar) -> None:
    """Finish the generated document (built now, then served as is by /schema)."""
    document = app.openapi_schema
    components = document.components if document.components else Components()
    document.components = components
    components.security_schemes = {**(components.security_schemes or {}), BEARER: SecurityScheme(
        type="http", scheme="bearer", bearer_format="JWT",
        description="`POST /v1/auth/login` answers the token; the web UI's session cookie works "
                    "too.")}
    components.schemas = {**(components.schemas or {}), ERROR: _error_schema()}
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            if not handler.resolve_include_in_schema():
                continue
            path = (document.paths or {}).get(route.path_format)
            for method in handler.http_methods:
                operation = getattr(path, method.lower(), None) if path else None
                if operation is not None:
                    _complete_operation(operation, handler, route.path_format)


def _complete_operation(operation: Operation, handler: Any, path: str) -> None:
    responses = operation.responses if operation.responses is not None else {}
    operation.responses = responses
    if "400" in responses:
        responses["400"] = _error_response(400)  # Litestar's own body is not what we answer
    if not handler.opt.get("public"):
        operation.security = [{BEARER: []}]
        responses.setdefault("401", _error_response(401))
    if auth.admin_only in handler.resolve_guards():
        responses.setdefault("403", _error_response(403))
    if "{" in path:
        # A path parameter of the wrong type matches no route: 404, like an unknown id.
        responses.setdefault("404", _error_response(404))


def _error_schema() -> Schema:
    return Schema(type=OpenAPIType.OBJECT, required=["code", "detail"], properties={
        "code": Schema(type=OpenAPIType.STRING, description="Machine-readable, e.g. `invalid_paging`."),
        "detail": Schema(type=OpenAPIType.STRING, description="What went wrong and what to do.")},
        description=inspect.cleandoc(ErrorBody.__doc__ or ""))


def _error_response(status: int) -> OpenAPIResponse:
    return OpenAPIResponse(description=_describe(status), content={
        "application/json": OpenAPIMediaType(schema=Reference(f"#/components/schemas/{ERROR}"))})


def _describe(status: int) -> str:
    return DESCRIPTIONS.get(status) or HTTPStatus(status).phrase
