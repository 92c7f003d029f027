"""Checking one event of POST /v1/events (gateway/events/intake.py): whatever a producer sends,
each event is either taken or refused with a code, alone; nothing else is ever raised."""

# The bodies here are JSON with literal braces: '{%s}' % x reads plainer than f"{{{x}}}".
# ruff: noqa: UP031

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.events import intake

TENANT = uuid.uuid4()
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


def event(**fields) -> dict:
    return {"source_system": "crm", "source_event_id": "e1", "type": "judgment.upserted",
            "payload": {"case_number": "C-1"}, **fields}


def check(raw, **kwargs) -> intake.Event:
    return intake.check(raw, TENANT, 65536, now=NOW, **kwargs)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(intake.FIELDS)) | st.text(max_size=5), json_values,
                       max_size=7))
def test_any_object_is_taken_or_refused_with_a_code(raw):
    try:
        checked = check(raw)
    except intake.Refused as exc:
        assert exc.code and exc.detail
        return
    # Taken: what the writer stores is canonical JSON that reads back as the payload sent.
    assert json.loads(checked.payload_json) == raw["payload"]
    assert "\x00" not in checked.source_event_id + checked.source_system + checked.type


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=50))
def test_any_emitted_at_text_is_an_aware_utc_time_or_a_refusal(text):
    try:
        checked = check(event(source_emitted_at=text))
    except intake.Refused as exc:
        assert exc.code in {"invalid_source_emitted_at", "source_emitted_at_out_of_range",
                            "source_emitted_at_in_future"}
        return
    assert checked.source_emitted_at is not None
    assert checked.source_emitted_at.utcoffset() == timedelta(0)


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=1, max_value=6000))
def test_a_number_of_any_length_never_fails_the_body(digits):
    body = ('[{"source_system": "crm", "source_event_id": "e1", "type": "t", '
            f'"payload": {{"amount": {"9" * digits}}}}}]').encode()
    [raw] = intake.loads(body)
    if digits > intake.MAX_NUMBER_DIGITS:
        with pytest.raises(intake.Refused) as refused:
            check(raw)
        assert refused.value.code == "number_too_large"
    else:
        assert json.loads(check(raw).payload_json) == {"amount": int("9" * digits)}


@pytest.mark.parametrize("text,code", [
    ("0001-01-01T00:00:00+14:00", "source_emitted_at_out_of_range"),
    ("9999-12-31T23:59:59-14:00", "source_emitted_at_out_of_range"),
    ("2025-06-02T12:00:01Z", "source_emitted_at_in_future"),
    ("2025-06-01T12:00:00", "invalid_source_emitted_at"),
    ("yesterday", "invalid_source_emitted_at")])
def test_emitted_times_outside_the_window_are_refused(text, code):
    with pytest.raises(intake.Refused) as refused:
        check(event(source_emitted_at=text))
    assert refused.value.code == code


def test_the_future_skew_is_configurable_and_far_past_times_are_taken():
    assert check(event(source_emitted_at="2025-06-02T11:59:59Z")).source_emitted_at
    with pytest.raises(intake.Refused):
        check(event(source_emitted_at="2025-06-01T12:02:00Z"), max_future_skew_s=60)
    taken = check(event(source_emitted_at="0001-01-01T00:00:00Z")).source_emitted_at
    assert taken == datetime(1, 1, 1, tzinfo=UTC)
    assert intake.micros(taken) == -62135596800 * 10**6


@pytest.mark.parametrize("field,value,code", [
    ("source_event_id", 7, "invalid_source_event_id"),
    ("source_system", {"a": 1}, "invalid_source_system"),
    ("type", True, "invalid_type"),
    ("source_event_id", None, "missing_source_event_id"),
    ("type", "  ", "missing_type")])
def test_a_wrong_type_is_not_reported_as_missing(field, value, code):
    with pytest.raises(intake.Refused) as refused:
        check(event(**{field: value}))
    assert refused.value.code == code


def test_literal_backslash_u0000_is_text_and_a_real_nul_is_refused():
    literal = check(event(payload={"k\\u0000": "\\u0000"}))
    assert json.loads(literal.payload_json) == {"k\\u0000": "\\u0000"}
    for payload in ({"a": "x\x00"}, {"a\x00": 1}, {"a": [{"b": "\x00"}]}):
        with pytest.raises(intake.Refused) as refused:
            check(event(payload=payload))
        assert refused.value.code == "payload_has_nul"


@settings(max_examples=150, deadline=None)
@given(st.lists(json_values, max_size=5))
def test_the_strict_parser_reads_every_plain_body_as_pythons_parser_does(doc):
    # What it stores, and its hash (a resend's duplicate check), must not depend on the parser.
    try:
        body = json.dumps(doc, allow_nan=False).encode()
    except ValueError:
        assume(False)  # Infinity is not JSON (test_nan_and_infinity_literals_are_refused…)
    assert json.dumps(intake.loads(body), sort_keys=True) == json.dumps(json.loads(body),
                                                                        sort_keys=True)


def _body(*events: str) -> bytes:
    return ("[" + ",".join(events) + "]").encode()


# Characters a payload may hold (no NUL, no lone surrogate: each has its own refusal).
_storable = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
ENVELOPE = '"source_system": "crm", "source_event_id": "e{n}", "type": "judgment.upserted"'


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(_storable, max_size=8), st.integers() | st.text(
    _storable, max_size=5), min_size=1, max_size=5), st.data())
def test_a_key_named_twice_anywhere_refuses_its_event_alone(payload, data):
    key = data.draw(st.sampled_from(sorted(payload)))
    inner = json.dumps(payload)[1:-1] + ", " + json.dumps(key) + ": 0"
    where = data.draw(st.sampled_from(["payload", "nested", "list", "envelope"]))
    twice = {"payload": '{%s}' % inner, "nested": '{"row": {%s}}' % inner,
             "list": '{"rows": [1, {%s}]}' % inner}.get(where)
    bad = ('{%s, "payload": %s}' % (ENVELOPE.format(n=1), twice) if twice else
           '{%s, "payload": {}, "type": "x"}' % ENVELOPE.format(n=1))
    good = '{%s, "payload": %s}' % (ENVELOPE.format(n=2), json.dumps(payload))
    first, second = intake.loads(_body(bad, good))
    with pytest.raises(intake.Refused) as refused:
        check(first)
    assert refused.value.code == "duplicate_key"
    assert json.loads(check(second).payload_json) == payload


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=99999), st.integers(min_value=0, max_value=400),
       st.integers(min_value=-420, max_value=10))
def test_a_number_that_would_read_as_zero_is_refused_and_any_other_is_exact(digits, zeros,
                                                                           exponent):
    text = f"0.{'0' * zeros}{digits}e{exponent}"
    [raw] = intake.loads(_body('{%s, "payload": {"x": %s}}' % (ENVELOPE.format(n=1), text)))
    if float(text) == 0.0:
        with pytest.raises(intake.Refused) as refused:
            check(raw)
        assert refused.value.code == "number_underflow"
    else:
        assert json.loads(check(raw).payload_json) == {"x": float(text)}


@pytest.mark.parametrize("text,code", [
    ('{"a": 1e-400}', "number_underflow"), ('{"a": [-1.5E-999]}', "number_underflow"),
    ('{"a": 0e-400}', None), ('{"a": -0.0}', None), ('{"a": 5e-324}', None),
    ('{"a": 1, "a": 1}', "duplicate_key"), ('{"a": {"b": 1, "b": 2}}', "duplicate_key"),
    ('{"A": 1, "a": 2}', None)])
def test_strict_json_examples(text, code):
    [raw] = intake.loads(_body('{%s, "payload": %s}' % (ENVELOPE.format(n=1), text)))
    if code is None:
        assert check(raw).payload_json
    else:
        with pytest.raises(intake.Refused) as refused:
            check(raw)
        assert refused.value.code == code


def test_an_envelope_that_names_a_field_twice_says_which():
    [raw] = intake.loads(_body('{%s, "source_event_id": "e2", "payload": {}}'
                               % ENVELOPE.format(n=1)))
    with pytest.raises(intake.Refused) as refused:
        check(raw)
    assert (refused.value.code, "'source_event_id'" in refused.value.detail) == (
        "duplicate_key", True)


_STDLIB = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                           allow_nan=False)
_any_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00")),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00")), inner,
        max_size=4), max_leaves=25)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(st.characters(exclude_categories=["Cs"],
                                             exclude_characters="\x00")), _any_json,
                       max_size=6))
def test_the_stored_payload_is_byte_for_byte_what_pythons_encoder_writes(payload):
    # payload_sha256 was always taken of the stdlib's canonical text: a resend of an event
    # stored before must hash the same, whoever writes the text now (ADR 0285).
    event = check({**event_fields(), "payload": payload})
    assert event.payload_json == _STDLIB.encode(payload)


def event_fields() -> dict:
    return {"source_system": "crm", "source_event_id": "e1", "type": "judgment.upserted"}


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_literals_are_refused_not_stored_as_null(literal):
    [raw] = intake.loads(_body('{%s, "payload": {"x": [%s]}}' % (ENVELOPE.format(n=1), literal)))
    with pytest.raises(intake.Refused) as refused:
        check(raw)
    assert refused.value.code == "invalid_payload" and literal in refused.value.detail


# ── orjson when it reads as the strict parser would (ADR 0287) ─────────────────────────────
# Numbers as a producer may write them: the texts each side of every limit the strict parser
# marks (64-bit integers, underflow, overflow, NaN), and any integer or float.
_number_texts = st.sampled_from([
    "1e-400", "-1.5E-999", "0e-400", "5e-324", "2.4e-324", "1e-99", "1e-307", "-0.0", "0",
    "-0", "1E2", "1e400", "-1e+400", "NaN", "Infinity", "9223372036854775807",
    "18446744073709551615", "18446744073709551616", "-9223372036854775809",
    "123456789012345678", "0." + "0" * 330 + "1", "1" * 1200, "1.0e-050",
]) | st.integers().map(str) | st.floats(allow_nan=False, allow_infinity=False).map(repr)
# Keys that collide, also written as escapes ("\u0061" is "a"), colons in keys and strings,
# and an escaped colon (what the count of colons must not be fooled by).
_keys = st.sampled_from(['"a"', '"b"', '"\\u0061"', '"a:b"', '"\\u003a"', '"x\\"y"',
                         '"\\ud800"', '"é"', '"\\u00e9"', '":"'])
_strings = _keys | st.text(max_size=6).map(json.dumps) | st.text(max_size=6).map(
    lambda t: json.dumps(t, ensure_ascii=False))
_spaces = st.sampled_from(["", " ", "\n  ", "\t"])


@st.composite
def _json_text(draw, depth: int = 0) -> str:
    kind = draw(st.sampled_from(["number", "string", "literal", "list", "object"]
                                if depth < 3 else ["number", "string", "literal"]))
    if kind == "number":
        return draw(_number_texts)
    if kind == "string":
        return draw(_strings)
    if kind == "literal":
        return draw(st.sampled_from(["true", "false", "null"]))
    gap = draw(_spaces)
    if kind == "list":
        items = draw(st.lists(_json_text(depth + 1), max_size=4))
        return "[" + gap + ("," + gap).join(items) + gap + "]"
    pairs = draw(st.lists(st.tuples(_keys | _strings, _json_text(depth + 1)), max_size=4))
    return "{" + gap + ("," + gap).join(f"{k}{gap}:{gap}{v}" for k, v in pairs) + gap + "}"


def _normal(value):
    """A parsed body as comparable data: markers by kind, floats by their text (0.0 is not
    -0.0, 1 is not 1.0)."""
    if isinstance(value, dict):
        return {"dict": sorted((k, _normal(v)) for k, v in value.items())}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, bool | int | str | None):
        return (type(value).__name__, value)
    return (type(value).__name__, *(getattr(value, slot) for slot in value.__slots__))


@settings(max_examples=600, deadline=None)
@given(st.lists(_json_text(), min_size=1, max_size=4))
def test_the_fast_reader_reads_every_body_as_the_strict_parser_does(items):
    body = ("[" + ",".join(items) + "]").encode()
    try:
        expected = _normal(intake.strict_loads(body))
    except (ValueError, UnicodeError) as exc:  # the whole body's 400 either way
        with pytest.raises(type(exc)):
            intake.loads(body)
        return
    assert _normal(intake.loads(body)) == expected


@pytest.mark.parametrize("text", [
    '{"a": 1, "a": "\\u003a"}',          # the kept value holds the colon the key lost
    '{"a": 1, "\\u0061": 2}',            # one key, written twice
    '{"a": [12345678901234567890123]}',   # beyond 64 bits: orjson would read a float
    '{"a": 0.%s1}' % ("0" * 330),         # underflows without an exponent
    '{"a": 1e-400}'])
def test_what_orjson_would_misread_goes_the_strict_way(text):
    body = _body('{%s, "payload": %s}' % (ENVELOPE.format(n=1), text))
    assert _normal(intake.loads(body)) == _normal(intake.strict_loads(body))
    assert _normal(intake.loads(body)) != _normal(orjson.loads(body))


def test_the_fast_reader_takes_the_common_body():
    # The bench's events (digits, times, \u escapes): orjson's reading, not the strict one.
    body = json.dumps([{**event_fields(), "source_sequence": 7, "payload": {
        "amount": 12.5, "court": "Cour d'appel é", "at": "2025-06-01T12:00:00Z"}}]).encode()
    assert intake._plain(body)
    assert intake.loads(body) == json.loads(body)
