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
                      taken=100.020, committed=100.060, woke=100.065)
    parts = dict(p.split(";dur=") for p in timing.header(s, 100.066).split(", "))
    assert {k: round(float(v), 1) for k, v in parts.items() if k in {
        "pre", "read", "check", "queue", "db", "wake", "post", "total"}} == {
        "pre": 10.0, "read": 2.0, "check": 3.0, "queue": 5.0, "db": 40.0, "wake": 5.0,
        "post": 1.0, "total": 66.0}
    assert {"lagmax", "lagsum", "gc", "gc2"} <= parts.keys()
