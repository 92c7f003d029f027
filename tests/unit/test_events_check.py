"""Checking one event of POST /v1/events (gateway/events/intake.py): whatever a producer sends,
each event is either taken or refused with a code, alone; nothing else is ever raised."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
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
def test_the_fast_parser_reads_every_body_as_the_exact_one_does(doc):
    # orjson takes most bodies (ADR 0192); what it reads must be what Python's parser reads, or
    # the stored payload, and its hash (a resend's duplicate check), would change with it.
    body = json.dumps(doc).encode()
    exact = json.loads(body, parse_int=intake._int, parse_float=intake._float)
    fast = intake.loads(body)
    assert json.dumps(fast, sort_keys=True) == json.dumps(exact, sort_keys=True)
    assert [type(v) for v in fast] == [type(v) for v in exact]
