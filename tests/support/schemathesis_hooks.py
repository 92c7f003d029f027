"""What the upload forms' file parts hold, and JSON nested past the limit, for schemathesis
(SCHEMATHESIS_HOOKS names this module; tests/integration/test_openapi.py runs it).

/schema declares each upload's `file` part by media type (`encoding`), and the server takes a
part by its name's extension or, without one, by that Content-Type, then checks the bytes
(gateway/filetypes.py). A schema cannot say what the bytes of a PDF or a CSV look like, so
schemathesis would draw arbitrary binary for them and get a fair 415. These strategies are the
media types' contents: real files of each type, varied by a seed, so every file schemathesis
sends under a declared type is one of that type (ADR 0200). DOCX is left out: schemathesis
names a ZIP-signed part `file.zip`, a name no upload takes.
"""

from __future__ import annotations

import itertools
import json

import schemathesis
from hypothesis import strategies as st

from tests.support import documents, records


def _seeded(make):  # type: ignore[no-untyped-def]
    return st.integers(min_value=0, max_value=10_000).map(make)


def _jsonl(seed: int) -> bytes:
    rows = [{"case_number": f"2024-CV-{seed:05d}{i}", "plaintiff_name": "Acme Collections LLC",
             "defendant_name": "John Q. Public", "amount": "1250.00"} for i in range(3)]
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


schemathesis.openapi.media_type("text/csv", _seeded(
    lambda seed: records.judgments_csv(3, seed=str(seed))))
schemathesis.openapi.media_type("application/x-ndjson", _seeded(_jsonl))
schemathesis.openapi.media_type("text/plain", _seeded(
    lambda seed: documents.prose(40, seed=seed).encode()))
schemathesis.openapi.media_type("text/markdown", _seeded(
    lambda seed: f"# Note {seed}\n\n{documents.prose(40, seed=seed)}\n".encode()))
schemathesis.openapi.media_type("text/html", _seeded(
    lambda seed: documents.make_html(f"Page {seed}", [("Part", documents.prose(30, seed=seed))])))
schemathesis.openapi.media_type("application/pdf", _seeded(
    lambda seed: documents.make_pdf([documents.prose(30, seed=seed)])))


# ── JSON nested past the limit (issue 22) ───────────────────────────────────────────────────
# Every third request schemathesis sends with invalid JSON data gets, instead, a 2 KB body
# 1,000 levels deep: the checks then hold the gateway to a 400 `json_too_deep` that the
# document describes, on every operation with a JSON body (gateway/edge/json_depth.py).
DEEP = b"[" * 1000 + b"]" * 1000
_negatives = itertools.count()


@schemathesis.hook
def before_call(context, case, kwargs):  # type: ignore[no-untyped-def]
    _judge_edited_form(case)
    # The body is serialised from the case after this hook (kwargs are the transport's own:
    # timeouts, TLS), and a bytes body is sent as it is under its JSON media type.
    meta = case.meta
    if meta is None or not meta.generation.mode.is_negative:
        return
    if (case.media_type or "").split(";")[0].strip() != "application/json" or case.body is None:
        return
    if next(_negatives) % 3 == 0:
        case.body = DEEP


# ── a schemathesis bug, worked around ──────────────────────────────────────────────────────
# schemathesis 4.32's coverage phase builds one "positive" multipart body from the media-type
# strategies and fills every other required field with "" whatever its schema says
# (coverage/_operation.py, _generate_multipart_body_from_custom_strategies): the imports form's
# `contract` (an enum) came out empty, and a fair 400 was reported as a rejected valid
# request. The fill below takes the field's first allowed value instead; nothing else changes.
from schemathesis.core.jsonschema import make_validator  # noqa: E402
from schemathesis.core.parameters import ParameterLocation  # noqa: E402
from schemathesis.generation import GenerationMode  # noqa: E402
from schemathesis.generation.meta import ComponentInfo  # noqa: E402
from schemathesis.specs.openapi.coverage import _operation as _coverage  # noqa: E402

_generate = _coverage._generate_multipart_body_from_custom_strategies


def _generate_valid(body):  # type: ignore[no-untyped-def]
    made = _generate(body)
    if made is None:
        return None
    result, content_types = made
    for name, value in list(result.items()):
        schema = body.form_properties.get(name, {})
        allowed = schema.get("enum") or schema.get("examples") or (
            [schema["default"]] if "default" in schema else None)
        if value == "" and allowed:
            result[name] = allowed[0]
    return result, content_types


_coverage._generate_multipart_body_from_custom_strategies = _generate_valid


# ── two more: positive upload cases that break the form's own rules ─────────────────────────
# With the file part drawn from the media-type strategies above, schemathesis 4.32 draws the
# form's other fields one by one, so a "positive" case of POST /v1/imports may break the form's
# conditional (`platform` and `client_id` belong to ad_metrics only: `"platform": false` in the
# `else`), and the server's fair 400 `unexpected_ad_field` was reported as a rejected valid
# request. And now and then an upload's positive case carried an empty `file` part, which the
# strategies never make (400 `empty_file`). Such cases are dropped, not changed: a changed
# case confused schemathesis' own record of which component it made invalid. (Declaring
# `minLength: 1` on the binary part made it call real files schema-violating.)
@schemathesis.hook
def filter_case(context, case):  # type: ignore[no-untyped-def]
    meta = case.meta
    if case.operation.path not in ("/v1/imports", "/v1/ingest") or meta is None:
        return True
    if meta.generation.mode.is_negative:
        # And a stateful step's "negative" upload may be sent valid: a link overwrites the
        # field its mutation broke (a client's id from an earlier answer), and schemathesis
        # cannot re-judge a form holding bytes (the third workaround, below), so a fair 202
        # would be reported as an accepted invalid request (ST201). The coverage and fuzzing
        # phases still send these routes their invalid forms.
        return meta.phase.name != "stateful"
    if not isinstance(case.body, dict):
        return True
    body = case.body
    if body.get("file") in (b"", ""):
        return False
    return not (case.operation.path == "/v1/imports" and body.get("contract") != "ad_metrics"
                and ("platform" in body or "client_id" in body))


# ── and a third: a form a link edited is judged as if its file were not a string ────────────
# In the stateful phase a link writes a value taken from an earlier answer (a client's id) into
# an upload form drawn valid, and schemathesis 4.32 then re-judges the edited body against the
# schema; but a body holding bytes is judged invalid whatever the schema says (generation/
# case.py, _validate_component: `contains_binary(value)` answers False). A whole, valid
# ad_metrics form answered 202 was then reported as an invalid request accepted (ST201,
# "Invalid component: positive test case"), in one CI run of several. This judges such a form
# as the schema reads it, each bytes part being the string of format binary it declares.
BODY = ParameterLocation.BODY


def _judge_edited_form(case):  # type: ignore[no-untyped-def]
    meta = case.meta  # reading it re-judges an edited body first
    if (meta is None or BODY not in meta.components or meta.components[BODY].mode.is_positive
            or meta.phase.data.description != "Positive test case"  # drawn valid, then edited
            or not isinstance(case.body, dict)
            or not any(isinstance(value, bytes) for value in case.body.values())):
        return
    declared = case.operation.get_body_for_media_type(case.media_type)
    if declared is None:
        return
    as_text = {name: value.decode("latin-1") if isinstance(value, bytes) else value
               for name, value in case.body.items()}
    validator = make_validator(declared.validation_schema,
                               case.operation.schema.adapter.jsonschema_validator_cls)
    if not validator.is_valid(as_text):
        return
    meta.components[BODY] = ComponentInfo(mode=GenerationMode.POSITIVE)
    if all(info.mode.is_positive for info in meta.components.values()):
        meta.generation.mode = GenerationMode.POSITIVE
