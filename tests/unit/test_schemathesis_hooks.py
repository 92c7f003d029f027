"""The suite's schemathesis workarounds (tests/support/schemathesis_hooks.py) against the
schemathesis installed: each test fails if its bug is gone or the workaround stops working."""

from __future__ import annotations

import uuid
import warnings

import pytest
import schemathesis
from hypothesis.errors import NonInteractiveExampleWarning
from schemathesis.generation.meta import TestPhase

from tests.support import schemathesis_hooks as hooks

# An upload form as /schema declares POST /v1/imports: a file part of a declared media type
# (drawn by the hooks' strategies as real CSV bytes), the contract, an optional client id.
SCHEMA = {"openapi": "3.1.0", "info": {"title": "imports", "version": "1"}, "paths": {
    "/v1/imports": {"post": {
        "requestBody": {"required": True, "content": {"multipart/form-data": {
            "schema": {"type": "object", "required": ["file", "contract"], "properties": {
                "file": {"type": "string", "format": "binary"},
                "contract": {"type": "string", "enum": ["judgments", "ad_metrics"]},
                "client_id": {"type": "string"}}},
            "encoding": {"file": {"contentType": "text/csv"}}}}},
        "responses": {"202": {"description": "accepted"}}}}}}


def _stateful_upload():  # type: ignore[no-untyped-def]
    operation = schemathesis.openapi.from_dict(SCHEMA)["/v1/imports"]["POST"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonInteractiveExampleWarning)
        case = operation.as_strategy(phase=TestPhase.STATEFUL).example()
    assert isinstance(case.body["file"], bytes) and case.meta.generation.mode.is_positive
    return case


def test_a_valid_form_a_link_edited_stays_valid():
    # Given an upload form drawn valid in the stateful phase, and a link that writes the client
    # id an earlier answer gave into it
    case = _stateful_upload()
    case.body["client_id"] = str(uuid.uuid4())
    # (schemathesis 4.32 alone now calls it invalid: it cannot judge a body holding bytes)
    assert case.meta.generation.mode.is_negative
    # When the suite's hook runs before the call
    hooks.before_call(None, case, {})
    # Then the form is judged as the schema reads it: valid, so a 202 is no failure
    assert case.meta.generation.mode.is_positive


@pytest.mark.parametrize("written", [5, None, ["a"]])
def test_a_form_a_link_made_invalid_stays_invalid(written):
    # Given a valid form whose client id a link replaced with a value the schema refuses
    case = _stateful_upload()
    case.body["client_id"] = written
    # When the hook runs
    hooks.before_call(None, case, {})
    # Then it is still an invalid request, which the gateway must refuse
    assert case.meta.generation.mode.is_negative
