"""Where a POST /v1/events request's time goes, for diagnosis (EVENTS_SERVER_TIMING, ADR 0341).

When on, the gateway samples its event loop's lag every 2 ms and times every garbage
collection, and each intake answer carries a `Server-Timing` header (ms): `pre` (arrival to the
handler: middleware, the API key lookup), `read` (the body), `check` (parse and per-event
checks), `queue` (waiting for a writer task), `db` (the group's commit), `wake` (commit to the
handler running again), `post`, `total`, and over the request's life the loop's worst lag
(`lagmax`), its lag above 1 ms summed (`lagsum`), and the collections' pauses (`gc`, `gc2`:
full ones); and `group`, not a time: the events in the request's writer group. Off by
default: the sampler costs a wake-up every 2 ms."""

from __future__ import annotations

import asyncio
import collections
import gc
import time
from dataclasses import dataclass
from typing import Any

from litestar.types import ASGIApp, Receive, Scope, Send

SAMPLE_S = 0.002
_lags: collections.deque[tuple[float, float]] = collections.deque(maxlen=20_000)  # (at, lag)
_gcs: collections.deque[tuple[float, float, int]] = collections.deque(maxlen=20_000)  # (at, s, gen)
_gc_started = [0.0]
_running: list[asyncio.Task[None]] = []


@dataclass
class Stamps:
    """One request's moments (time.perf_counter); the writer sets taken and committed."""

    arrived: float
    handler: float = 0.0
    read: float = 0.0
    checked: float = 0.0
    taken: float = 0.0
    committed: float = 0.0
    woke: float = 0.0
    group: int = 0  # events in the request's writer group (a count, not a time)


def _gc(phase: str, info: dict[str, Any]) -> None:
    now = time.perf_counter()
    if phase == "start":
        _gc_started[0] = now
    else:
        _gcs.append((now, now - _gc_started[0], info["generation"]))


async def _sample_lag() -> None:
    while True:
        before = time.perf_counter()
        await asyncio.sleep(SAMPLE_S)
        now = time.perf_counter()
        _lags.append((now, now - before - SAMPLE_S))


def start() -> None:
    """On the running loop; again on another loop (tests) restarts the sampler."""
    if _gc not in gc.callbacks:
        gc.callbacks.append(_gc)
    if _running and not _running[0].done():
        _running[0].cancel()
    _running[:] = [asyncio.get_running_loop().create_task(_sample_lag(),
                                                         name="loop-lag-sampler")]


def arrivals(app: ASGIApp) -> ASGIApp:
    """Outermost: stamp each request as the server hands it over, before any middleware."""

    async def stamped(scope: Scope, receive: Receive, send: Send) -> None:
        scope["events_arrived"] = time.perf_counter()  # type: ignore[typeddict-unknown-key]
        await app(scope, receive, send)

    return stamped  # type: ignore[return-value]


def window(t0: float, t1: float) -> dict[str, float]:
    """The loop's lag and the collections' pauses between t0 and t1, in seconds."""
    # Walk copies: the collector's callback appends to _gcs whenever a collection runs, and
    # the tuples built below can start one ("deque mutated during iteration"). list() of a
    # deque allocates nothing the collector tracks while it copies.
    lags = [lag for at, lag in list(_lags) if t0 <= at <= t1]
    gcs = [(s, gen) for at, s, gen in list(_gcs) if t0 <= at <= t1]
    return {"lagmax": max(lags, default=0.0), "lagsum": sum(x for x in lags if x > 0.001),
            "gc": sum(s for s, _ in gcs), "gc2": sum(s for s, gen in gcs if gen == 2)}


def header(s: Stamps, end: float) -> str:
    committed = s.committed or s.woke  # no event reached the writer: no queue, no commit
    taken = s.taken or committed
    parts = {"pre": s.handler - s.arrived, "read": s.read - s.handler,
             "check": s.checked - s.read, "queue": taken - s.checked, "db": committed - taken,
             "wake": s.woke - committed, "post": end - s.woke, "total": end - s.arrived,
             **window(s.arrived, end)}
    return ", ".join([*(f"{name};dur={seconds * 1000:.2f}" for name, seconds in parts.items()),
                      f"group;dur={s.group}"])
