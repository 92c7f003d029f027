"""The gateway's edge, pure parts: JSON depth, the query string's rule, device cookies."""

from __future__ import annotations

import json
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.auth import devices
from gateway.edge import json_depth, query

SECRET = "s" * 40
# Any JSON value; strings full of brackets, quotes and backslashes, which must not count.
TRICKY_TEXT = st.text(alphabet=st.sampled_from('[]{}"\\ab\u00e9\n'), max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TRICKY_TEXT,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(TRICKY_TEXT, children, max_size=4),
    max_leaves=40)


def depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, limit=st.integers(min_value=0, max_value=8),
       ensure_ascii=st.booleans())
def test_the_depth_check_agrees_with_the_parsed_value(value, limit, ensure_ascii):
    body = json.dumps(value, ensure_ascii=ensure_ascii).encode()
    assert json_depth.depth_exceeds(body, limit) == (depth(value) > limit)


def test_the_nesting_of_the_outside_report_is_refused_and_its_neighbours_are_not():
    assert json_depth.depth_exceeds(b"[" * 1000 + b"]" * 1000)
    inside = b"[" * json_depth.MAX_DEPTH + b"]" * json_depth.MAX_DEPTH
    assert not json_depth.depth_exceeds(inside)
    assert json_depth.depth_exceeds(b"[" + inside + b"]")
    # Brackets inside strings are text, however many
    assert not json_depth.depth_exceeds(json.dumps({"a": "[" * 5000}).encode())
    # A long flat batch (many brackets, little depth) passes
    assert not json_depth.depth_exceeds(json.dumps([{"p": [1, {"q": [2]}]}] * 5000).encode())


def test_a_query_parameter_declared_once_appears_once_and_typed_ones_are_never_null():
    kinds = {"tenant_id": "typed", "status": "text", "doc_id": "array"}
    assert query.refusal(kinds, b"tenant_id=a&tenant_id=b") is not None
    assert query.refusal(kinds, b"tenant_id=null") is not None
    assert query.refusal(kinds, b"status=null") is None  # a word, for a text parameter
    assert query.refusal(kinds, b"doc_id=a&doc_id=b&status=x") is None
    assert query.refusal(kinds, b"other=1&other=2") is None  # not declared: not ours to judge


def test_a_device_cookie_names_its_account_and_cannot_be_forged_or_kept_forever():
    user = uuid.uuid4()
    value = devices.issue(user, SECRET, now=1_000_000)
    device = devices.read(value, SECRET, max_age_s=60, now=1_000_030)
    assert device is not None and device.user_id == user
    # Again for the same device keeps its id
    again = devices.read(devices.issue(user, SECRET, device.device_id, now=1_000_040), SECRET,
                         max_age_s=60, now=1_000_050)
    assert again is not None and again.device_id == device.device_id
    # Expired, signed with another secret, or edited: unknown
    assert devices.read(value, SECRET, max_age_s=60, now=1_000_061) is None
    assert devices.read(value, "t" * 40, max_age_s=60, now=1_000_030) is None
    edited = value.replace(user.hex, uuid.uuid4().hex)
    assert devices.read(edited, SECRET, max_age_s=60, now=1_000_030) is None
    for junk in ("", "x", "a.b.c.d.e", "." * 300):
        assert devices.read(junk, SECRET, max_age_s=60) is None
