"""/schema describes the API as it answers (docs/decisions/0051-openapi-document.md, 0200).

Two pieces:
- ``errors(404, 409)`` is what a route declares: ``@get(..., responses=openapi.errors(404))``
  lists the errors it answers beyond the ones every route shares, each with the `{code, detail}`
  body of gateway/errors.py.
- ``complete(app)`` finishes the generated document once, at app creation, with what follows
  from each route's own declaration: the bearer scheme on every route that is not public, 401
  there, 403 where the admin guard sits, and Litestar's own 400 body replaced by ours.

The schema is the contract (ADR 0200): every constraint the server enforces is declared where
the handler is declared, and the document is derived from that one declaration.
- A JSON body is a dataclass or msgspec Struct whose fields carry their constraints
  (``Annotated[str, Meta(min_length=1)]``, ``Literal[...]``, ``forbid_unknown_fields``). msgspec
  validates the body with them, and ``complete`` documents the body with msgspec's own JSON
  Schema of the same type: Litestar's generator drops constraints of optional fields and never
  says that unknown fields are refused.
- A query, path or header parameter is a string or absent, never JSON `null`: the optional
  parameters' `oneOf [X, null]` becomes X.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Annotated, Any

import msgspec
from litestar import Litestar
from litestar.enums import RequestEncodingType
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import (
    Components,
    Encoding,
    OpenAPIHeader,
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
from gateway.edge import query

BEARER = "bearer"
API_KEY = "apiKey"
ERROR = "ErrorBody"
_REF = "#/components/schemas/{name}"
_ANNOTATED: Any = Annotated  # subscripted with a tuple made at run time
# Text Postgres can store: no NUL character (ADR 0200). NON_BLANK: and one visible character.
NO_NUL = r"^[^\x00]*$"
NON_BLANK = r"^[^\x00]*[^\s\x00][^\x00]*$"

DESCRIPTIONS = {
    400: "The request is malformed: a field, parameter or body the route cannot read.",
    401: "No valid bearer token (or session cookie) was sent; sign in again.",
    403: "The caller's role does not allow this.",
    404: "Nothing with that id exists in the caller's tenant.",
    405: "The path exists, but not with this method; `Allow` lists the ones it takes.",
    409: "The resource is in a state that does not allow this now.",
    413: "The body is larger than the limit.",
    415: "The file type or body content type is not accepted.",
    408: "The request's headers or body arrived too slowly; send it again at a normal pace.",
    429: "Too many requests (or connections) from this client, or too many attempts; retry "
         "after `Retry-After` seconds.",
    503: "The server is full, not ready yet (e.g. `model_loading`), or a backing service is "
         "unreachable; retry after `Retry-After` seconds.",
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


def form_body(required: tuple[str, ...], *, file_types: Sequence[str],
              rules: dict[str, Any] | None = None, **fields: Schema) -> type[Operation]:
    """An `operation_class=` for a route that reads its multipart form by hand (a stream), so
    Litestar cannot see the body: the operation declares it. The server refuses any other
    field (uploads.py), and takes the `file` part as one of ``file_types`` (media types): by
    its name's extension, or by the part's Content-Type when the name has none. ``rules``:
    JSON Schema keywords over several fields (if/then/else), as the handler checks them."""
    form = Schema(type=OpenAPIType.OBJECT, required=list(required), properties=dict(fields),
                  additional_properties=False).to_schema()
    body = RequestBody(required=True, content={"multipart/form-data": OpenAPIMediaType(
        schema={**form, **(rules or {})},  # type: ignore[arg-type]
        encoding={"file": Encoding(content_type=", ".join(file_types))})})

    @dataclass
    class FormOperation(Operation):
        def __post_init__(self) -> None:
            self.request_body = body

    return FormOperation


def json_body(schema: dict[str, Any], description: str) -> type[Operation]:
    """An `operation_class=` for a route that reads a JSON body by hand (a stream)."""
    body = RequestBody(required=True, description=description, content={
        "application/json": OpenAPIMediaType(schema=schema)})  # type: ignore[arg-type]

    @dataclass
    class JsonOperation(Operation):
        def __post_init__(self) -> None:
            self.request_body = body

    return JsonOperation


def complete(app: Litestar) -> None:
    """Finish the generated document (built now, then served as is by /schema)."""
    document = app.openapi_schema
    components = document.components if document.components else Components()
    document.components = components
    components.security_schemes = {**(components.security_schemes or {}), BEARER: SecurityScheme(
        type="http", scheme="bearer", bearer_format="JWT",
        description="`POST /v1/auth/login` answers the token; the web UI's session cookie works "
                    "too."), API_KEY: SecurityScheme(
        type="apiKey", name="X-Api-Key", security_scheme_in="header",
        description="A tenant's API key (`POST /v1/api-keys`): event intake and its cursor "
                    "only.")}
    components.schemas = {**(components.schemas or {}), ERROR: _error_schema()}
    bodies: dict[str, Any] = {}
    query_kinds: dict[tuple[str, str], dict[str, str]] = {}
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
                    _declare_body(operation, handler, bodies)
                    _declare_parameters(operation)
                    query_kinds[(method, route.path_format)] = _query_kinds(operation)
    components.schemas.update(bodies)  # type: ignore[arg-type]
    app.state["query_kinds"] = query_kinds  # gateway/edge/query.py holds requests to them


def _complete_operation(operation: Operation, handler: Any, path: str) -> None:
    responses = operation.responses if operation.responses is not None else {}
    operation.responses = responses
    if "400" in responses:
        responses["400"] = _error_response(400)  # Litestar's own body is not what we answer
    if not handler.opt.get("public"):
        # An API key opens only routes that say so (gateway/auth _api_key), alone or beside
        # a signed-in user.
        keys = handler.opt.get("api_key")
        operation.security = ([{API_KEY: []}] if keys == "only" else
                              [{BEARER: []}, {API_KEY: []}] if keys == "also" else [{BEARER: []}])
        responses.setdefault("401", _error_response(401))
    if {auth.admin_only, auth.operator_only} & set(handler.resolve_guards()):
        responses.setdefault("403", _error_response(403))
    if "{" in path:
        # A path parameter of the wrong type matches no route: 404, like an unknown id.
        responses.setdefault("404", _error_response(404))
    # The edge answers these before any route runs (gateway/edge, ADR 0320 and 0323): a
    # request too slow to arrive, a client over its share, a full or not yet ready server.
    responses.setdefault("408", _error_response(408))
    for status in ("429", "503"):
        responses[status] = _error_response(int(status), retry_after=True)


def _declare_body(operation: Operation, handler: Any, components: dict[str, Any]) -> None:
    """A JSON body's schema is msgspec's schema of the type the handler decodes it into, or
    of the type it checks a plain dict against (``opt={"body": SourceFields}``)."""
    field = handler.parsed_fn_signature.parameters.get("data")
    kwarg = field.kwarg_definition if field is not None else None
    if field is None or getattr(kwarg, "media_type", None) != RequestEncodingType.JSON:
        return
    # The body's type with the rules it carries (Annotated[T, Meta(extra_json_schema=...)]).
    metas = tuple(m for m in field.metadata if isinstance(m, msgspec.Meta))
    declared = handler.opt.get("body") or (
        _ANNOTATED[(field.annotation, *metas)] if metas else field.annotation)
    (schema,), named = msgspec.json.schema_components([declared], ref_template=_REF)
    if "$ref" in schema and len(schema) > 1:
        # A body's own rule beside its type (Meta(extra_json_schema=...)): OpenAPI 3.0 tools
        # ignore what sits beside a $ref, so both go under allOf.
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {"allOf": [{"$ref": schema["$ref"]}, rest]}
    for name, component in named.items():
        if components.setdefault(name, component) != component:
            raise TypeError(f"two request bodies are named {name}; rename one")
    body = operation.request_body
    required = not field.is_optional
    operation.request_body = RequestBody(
        required=required, description=body.description if isinstance(body, RequestBody) else None,
        content={"application/json": OpenAPIMediaType(schema=schema)})  # type: ignore[arg-type]


def _declare_parameters(operation: Operation) -> None:
    """A query string or header carries a string or nothing: `null` is not a value there."""
    for parameter in operation.parameters or ():
        if isinstance(parameter, Reference):
            continue
        schema = parameter.schema
        if isinstance(schema, Schema) and schema.one_of:
            kept = [s for s in schema.one_of
                    if not (isinstance(s, Schema) and s.type == OpenAPIType.NULL)]
            if len(kept) == 1 and isinstance(kept[0], Schema):
                parameter.schema = schema = _merged(kept[0], schema)
        if isinstance(schema, Schema) and schema.enum and None in schema.enum:
            schema.enum = [v for v in schema.enum if v is not None]  # Literal[...] | None


def _query_kinds(operation: Operation) -> dict[str, str]:
    return {p.name: query.kind(p.schema.to_schema()) for p in operation.parameters or ()
            if not isinstance(p, Reference) and p.param_in == "query"
            and isinstance(p.schema, Schema)}


def _merged(inner: Schema, outer: Schema) -> Schema:
    """``inner`` with the keywords Litestar put beside the oneOf (bounds, pattern, docs)."""
    for name in ("max_length", "min_length", "pattern", "maximum", "minimum", "description",
                 "default", "examples", "enum", "format"):
        value = getattr(outer, name, None)
        if value is not None and getattr(inner, name, None) is None:
            setattr(inner, name, value)
    return inner


def field_rule(handler: Any, key: str, source: str | None) -> str | None:
    """The description a parameter or body field declares, for the 400 it caused: the rule in
    words rather than a regular expression."""
    parameters = handler.parsed_fn_signature.parameters
    if source == "body":
        field = parameters.get("data")
        return _body_field_description(field.annotation, key) if field is not None else None
    field = parameters.get(key) or next(
        (f for f in parameters.values() if getattr(f.kwarg_definition, "query", None) == key
         or getattr(f.kwarg_definition, "header", None) == key), None)
    return getattr(field.kwarg_definition, "description", None) if field is not None else None


def _body_field_description(annotation: Any, key: str) -> str | None:
    try:
        info: Any = msgspec.inspect.type_info(annotation)
    except TypeError:
        return None
    while isinstance(info, msgspec.inspect.UnionType):
        info = next((t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)), None)
    for field in getattr(info, "fields", ()):
        if field.encode_name == key:
            return _description(field.type)
    return None


def _description(info: Any) -> str | None:
    if isinstance(info, msgspec.inspect.UnionType):
        return next(filter(None, (_description(t) for t in info.types)), None)
    if isinstance(info, msgspec.inspect.Metadata):
        return (info.extra_json_schema or {}).get("description")
    return None


def _error_schema() -> Schema:
    return Schema(type=OpenAPIType.OBJECT, required=["code", "detail"], properties={
        "code": Schema(type=OpenAPIType.STRING, description="Machine-readable, e.g. `invalid_paging`."),
        "detail": Schema(type=OpenAPIType.STRING, description="What went wrong and what to do.")},
        description=inspect.cleandoc(ErrorBody.__doc__ or ""))


def _error_response(status: int, *, retry_after: bool = False) -> OpenAPIResponse:
    headers: dict[str, OpenAPIHeader | Reference] | None = {"Retry-After": OpenAPIHeader(
        schema=Schema(type=OpenAPIType.INTEGER, minimum=1), required=True,
        description="Seconds to wait before sending the request again.")} if retry_after else None
    return OpenAPIResponse(description=_describe(status), headers=headers, content={
        "application/json": OpenAPIMediaType(schema=Reference(f"#/components/schemas/{ERROR}"))})


def _describe(status: int) -> str:
    return DESCRIPTIONS.get(status) or HTTPStatus(status).phrase
