"""Every JSON body is converted strictly (gateway/edge/strict_body.py, ADR 0331): each route
that takes a body runs the check, and each declared boolean and integer field of each body
refuses what only Litestar's lax conversion would accept."""

from __future__ import annotations

import msgspec
import pytest

from gateway.app import create_app
from gateway.edge import strict_body
from shared.settings import GatewaySettings

# What lax conversion takes for each declared type, and strict refuses.
LAX = {msgspec.inspect.BoolType: (0, 1, "true"), msgspec.inspect.IntType: ("5",)}


@pytest.fixture(scope="module")
def handlers():
    settings = GatewaySettings(jwt_secret="k" * 48, metrics_token="m" * 24,
                               database_url="postgresql://nobody@127.0.0.1:1/none")
    app = create_app(settings)
    return [h for route in app.routes for h in getattr(route, "route_handlers", ())
            if strict_body.body_type(h) is not None]


def test_every_route_with_a_body_runs_the_check(handlers):
    assert len(handlers) >= 20  # the app really has its body routes
    # A layer with its own before_request would silently replace the application's.
    unchecked = [h.handler_name for h in handlers
                 if h.resolve_before_request() is not strict_body.check]
    assert unchecked == []


def test_every_switch_and_count_refuses_lax_values(handlers):
    checked = 0
    for handler in handlers:
        declared = strict_body.body_type(handler)
        for name, kind in _scalar_fields(declared):
            for lax in LAX[kind]:
                refused = strict_body.problem({name: lax}, declared)
                assert refused is not None and refused["key"] == name, (handler, name, lax)
                checked += 1
            # and a JSON value of the declared type passes (1.0 is an integer)
            assert strict_body.problem({name: True if kind is msgspec.inspect.BoolType
                                        else 1.0}, declared) in (None, _missing(declared))
    assert checked >= 10  # user active, DLQ all/dry_run/confirm, replay all, discard preview …


def test_a_refusal_names_the_field_like_litestars_own():
    assert strict_body._problem("Expected `bool`, got `int` - at `$.dry_run`") == {
        "message": "must be true or false, not a number", "key": "dry_run", "source": "body"}
    assert strict_body._problem("Expected `int | null`, got `str` - at `$.limit`")[
        "message"] == "must be an integer or null, not a string"
    assert strict_body._problem("Expected `object`, got `array`")["key"] == "request"


def test_whole_floats_are_integers_as_json_schema_says():
    assert strict_body.integral({"a": [60.0, 1.5], "b": True}) == {"a": [60, 1.5], "b": True}


def _missing(declared):
    """What a body holding only one field is refused for when others are required."""
    return strict_body.problem({}, declared)


def _scalar_fields(declared):
    info = msgspec.inspect.type_info(declared)
    while isinstance(info, (msgspec.inspect.UnionType, msgspec.inspect.Metadata)):
        info = (next(t for t in info.types if not isinstance(t, msgspec.inspect.NoneType))
                if isinstance(info, msgspec.inspect.UnionType) else info.type)
    for field in getattr(info, "fields", ()):
        kind = field.type
        while isinstance(kind, (msgspec.inspect.UnionType, msgspec.inspect.Metadata)):
            kind = (next((t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType)),
                         kind) if isinstance(kind, msgspec.inspect.UnionType) else kind.type)
            if isinstance(kind, msgspec.inspect.UnionType):
                break
        if type(kind) in LAX:
            yield field.encode_name, type(kind)
