"""The gateway's edge, pure parts: JSON depth, the query string's rule, device cookies, the
body-rate rule."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.auth import devices
from gateway.edge import json_depth, query, shares, transport

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


# ── the body-rate rule (gateway/edge/transport.py, ADR 0320) ────────────────────────────────
WINDOW_S = 0.1
RATE = 1000  # bytes a second: 100 bytes a window


def _paced(messages: list[tuple[float, dict]]):  # type: ignore[no-untyped-def]
    """A BodyPace over a client that sends each message ``delay`` seconds after the one before
    (the first after the headers), whenever the handler asks for it."""
    pending: list[tuple[float, dict]] = []
    arrival = 0.0
    for delay, message in messages:  # when each message arrives, from the first call on
        arrival += delay
        pending.append((arrival, message))
    start = time.monotonic()  # the request's headers arrived

    async def receive() -> dict:
        # Cancellation-safe, like uvicorn's: a cancelled wait loses no message.
        if not pending:
            await asyncio.sleep(3600)
        await asyncio.sleep(max(0.0, start + pending[0][0] - time.monotonic()))
        return pending.pop(0)[1]

    return transport.BodyPace(RATE, WINDOW_S).wrap(receive)  # type: ignore[arg-type]


def _piece(size: int, more: bool) -> dict:
    return {"type": "http.request", "body": b"x" * size, "more_body": more}


def test_a_body_that_arrived_is_never_charged_for_the_handler_reading_it_late():
    async def scenario() -> list[dict]:
        receive = _paced([(0, _piece(50, True)), (0, _piece(50, False))])
        await asyncio.sleep(WINDOW_S * 5)  # the handler waits on a locked row meanwhile
        return [await receive(), await receive()]

    assert [len(m["body"]) for m in asyncio.run(scenario())] == [50, 50]


def test_after_the_body_ended_receive_is_never_timed():
    # A stream's disconnect listener waits on receive for as long as the stream lasts
    async def scenario() -> dict:
        receive = _paced([(0, _piece(0, False)), (WINDOW_S * 6, {"type": "http.disconnect"})])
        await receive()
        return await receive()

    assert asyncio.run(scenario())["type"] == "http.disconnect"


def test_a_body_slower_than_the_rate_is_refused_and_a_body_at_the_rate_is_not():
    async def read_all(receive) -> int:  # type: ignore[no-untyped-def]
        total, more = 0, True
        while more:
            message = await receive()
            total, more = total + len(message["body"]), message["more_body"]
        return total

    # 20 bytes every half window: 40 bytes a window, under the 100 needed
    slow = [(WINDOW_S / 2, _piece(20, True)) for _ in range(10)] + [(0, _piece(0, False))]
    with pytest.raises(transport.RequestTimeout):
        asyncio.run(read_all(_paced(slow)))
    # 100 bytes every half window: twice the rate
    fast = [(WINDOW_S / 2, _piece(100, True)) for _ in range(6)] + [(0, _piece(0, False))]
    assert asyncio.run(read_all(_paced(fast))) == 600
    # A client that sends nothing at all after its headers is refused too
    with pytest.raises(transport.RequestTimeout):
        asyncio.run(read_all(_paced([(WINDOW_S * 3, _piece(10, False))])))


# ── each client's share (gateway/edge/shares.py, ADR 0323) ──────────────────────────────────
def _shares(clock=lambda: 0.0, **kw):  # type: ignore[no-untyped-def]
    options = {"max_connections": 10, "client_max_connections": 3, "requests_per_s": 2.0,
               "burst": 4, "trusted": shares.Trusted(["10.0.0.0/8"]), "clock": clock, **kw}
    return shares.Shares(**options)


def test_one_address_holds_its_share_of_connections_and_no_more():
    edge = _shares()
    held = [edge.connect("198.51.100.7") for _ in range(3)]
    assert all(refusal is None for refusal, _ in held)
    refusal, counted = edge.connect("198.51.100.7")
    assert refusal is not None and counted is None
    assert (refusal.status, refusal.code, refusal.retry_after_s) == (429, "too_many_connections", 5)
    # Another address is admitted meanwhile, and a closed connection frees a place
    assert edge.connect("198.51.100.8")[0] is None
    edge.disconnect(held[0][1])
    assert edge.connect("198.51.100.7")[0] is None
    # A trusted proxy carries many clients: its connections are not one client's share
    assert all(edge.connect("10.1.2.3")[0] is None for _ in range(6))
    # And the process as a whole is full at ten: 503, whoever asks
    refusal, _ = edge.connect("203.0.113.1")
    assert (refusal.status, refusal.code) == (503, "server_busy")


def test_a_client_over_its_rate_is_told_when_to_come_back_and_others_are_not_held():
    now = [0.0]
    edge = _shares(clock=lambda: now[0], client_max_connections=100)
    assert [edge.admit("a") for _ in range(4)] == [None] * 4  # its burst
    for _ in range(4):
        edge.done("a")
    refusal = edge.admit("a")
    assert (refusal.status, refusal.code, refusal.retry_after_s) == (429, "rate_limited", 1)
    assert not refusal.close  # the connection stays usable
    assert edge.admit("b") is None
    now[0] += 0.5  # two a second: one token back
    assert edge.admit("a") is None


def test_a_client_has_at_most_its_share_of_requests_in_flight():
    edge = _shares(requests_per_s=1000.0, burst=1000)
    assert [edge.admit("a") for _ in range(3)] == [None] * 3
    assert edge.admit("a").code == "too_many_requests"
    edge.done("a")
    assert edge.admit("a") is None


def test_a_refusal_is_a_whole_http_answer_with_json_and_retry_after():
    refusal = shares.Refusal(429, "too_many_connections", "Close some.", 5)
    head, body = refusal.raw().split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 429 Too Many Requests"
    fields = dict(line.split(b": ", 1) for line in lines[1:])
    assert fields[b"retry-after"] == b"5" and fields[b"connection"] == b"close"
    assert int(fields[b"content-length"]) == len(body)
    assert json.loads(body) == {"code": "too_many_connections", "detail": "Close some."}


def test_trusted_proxies_are_addresses_or_networks():
    trusted = shares.Trusted(["127.0.0.1", "10.0.0.0/8", "2001:db8::/32"])
    assert "127.0.0.1" in trusted and "10.200.0.1" in trusted and "2001:db8::5" in trusted
    assert "127.0.0.2" not in trusted and "not-an-ip" not in trusted and None not in trusted
    assert "203.0.113.9" in shares.Trusted(["*"])
