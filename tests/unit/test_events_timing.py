"""EVENTS_SERVER_TIMING's probe (gateway/events/timing.py, ADR 0341): the loop's lag and the
collector's pauses over a request's life, and the header that reports them."""

from __future__ import annotations

import asyncio
import gc
import time

from gateway.events import timing


async def _sampled(until: float) -> None:
    """Let the sampler take samples past ``until`` (polled, with a deadline)."""
    deadline = time.perf_counter() + 5
    while not timing._lags or timing._lags[-1][0] <= until:
        assert time.perf_counter() < deadline, "the lag sampler took no sample"
        await asyncio.sleep(0.001)


def test_a_blocked_loop_shows_as_lag_and_a_full_collection_as_gc2() -> None:
    async def scenario() -> dict[str, float]:
        timing.start()
        await _sampled(time.perf_counter())
        t0 = time.perf_counter()
        time.sleep(0.05)  # the event loop blocked by CPU work, as a request's checks would
        gc.collect()      # a full collection
        await _sampled(time.perf_counter())
        return timing.window(t0, time.perf_counter())

    found = asyncio.run(scenario())
    assert found["lagmax"] >= 0.045
    assert found["lagsum"] >= 0.045
    assert found["gc2"] > 0 and found["gc"] >= found["gc2"]


def test_a_quiet_window_shows_no_lag_and_no_collection() -> None:
    async def scenario() -> dict[str, float]:
        timing.start()
        await _sampled(time.perf_counter())
        t0 = time.perf_counter()
        await _sampled(t0 + 0.02)
        return timing.window(t0, t0 + 0.01)

    found = asyncio.run(scenario())
    assert found["gc2"] == 0
    assert found["lagmax"] < 0.045


def test_the_header_splits_a_request_into_its_parts() -> None:
    s = timing.Stamps(arrived=100.0, handler=100.010, read=100.012, checked=100.015,
                      taken=100.020, committed=100.060, woke=100.065, group=265)
    parts = dict(p.split(";dur=") for p in timing.header(s, 100.066).split(", "))
    assert {k: round(float(v), 1) for k, v in parts.items() if k in {
        "pre", "read", "check", "queue", "db", "wake", "post", "total"}} == {
        "pre": 10.0, "read": 2.0, "check": 3.0, "queue": 5.0, "db": 40.0, "wake": 5.0,
        "post": 1.0, "total": 66.0}
    assert {"lagmax", "lagsum", "gc", "gc2"} <= parts.keys()
    assert parts["group"] == "265"  # a count of events, not a time


def test_a_collection_while_the_window_is_read_does_not_fail_the_request() -> None:
    """The collector's callback appends to the pauses while ``window`` walks them (a tuple it
    builds can start a collection): once that was 'deque mutated during iteration', a 500 for
    the request under EVENTS_SERVER_TIMING (seen in bench/events.py, issue 32)."""
    if timing._gc not in gc.callbacks:
        gc.callbacks.append(timing._gc)
    saved = gc.get_threshold()
    timing._gcs.extend((1.0, 0.001, 0) for _ in range(5000))
    try:
        gc.set_threshold(1)  # a collection at nearly every allocation
        found = timing.window(0.0, 2.0)
    finally:
        gc.set_threshold(*saved)
        timing._gcs.clear()
    assert found["gc"] >= 5.0
