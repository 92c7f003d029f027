"""What the clients did and were told: every HTTP call with its latency and answer (for the
figures), through one small client that behaves as a careful user's does.

A careful client sends a request again when it got no answer, a 5xx, a 408 or a 429: it cannot
know whether the first one landed, and the product promises that sending again is harmless (the
same bytes are one document and one batch, the same event id is one ledger row). It waits what
the answer's Retry-After says, or backs off. Only the answer it finally got counts as what it
was told; a request that never got an answer is "unacknowledged" and the invariants promise
nothing about it, except that it is not half done.

The journal keeps both: every attempt (``Call``: the figures, and when clients were served again
after a fault) and every request with its final answer after the retries (``Outcome``: how many
of the clients' requests succeeded while a fault lasted).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

RETRY_STATUSES = {408, 429, 500, 502, 503, 504, 507}
# The longest Retry-After a client honours before asking again anyway.
RETRY_AFTER_MAX_S = 30.0


def failed(status: int | None) -> bool:
    """An attempt the server did not serve: no answer, a 5xx, or a request timeout."""
    return status is None or status >= 500 or status == 408


@dataclass(frozen=True)
class Call:
    kind: str          # the kind of work (upload, import, event, search, …)
    endpoint: str      # "POST /v1/ingest"
    at_s: float        # seconds since the soak started
    latency_s: float
    status: int | None  # None: no answer (refused, reset, timed out)
    error: str | None = None


@dataclass(frozen=True)
class Outcome:
    """One request of a client, with the final answer after its retries."""

    kind: str
    endpoint: str
    started_s: float
    ended_s: float
    status: int | None  # the final answer; None: none came before the client gave up
    attempts: int

    @property
    def ok(self) -> bool:
        return not failed(self.status) and self.status != 429


class Journal:
    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.calls: list[Call] = []
        self.done: list[tuple[str, float]] = []  # (kind, at_s) of each acknowledged piece of work
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def outcome(self, outcome: Outcome) -> None:
        with self._lock:
            self.outcomes.append(outcome)

    def acknowledged(self, kind: str, n: int = 1) -> None:
        at = self.now()
        with self._lock:
            self.done.extend([(kind, at)] * n)

    def snapshot(self) -> tuple[list[Call], list[tuple[str, float]]]:
        with self._lock:
            return list(self.calls), list(self.done)

    def requests(self) -> list[Outcome]:
        with self._lock:
            return list(self.outcomes)


class Api:
    """One client thread's connection to the gateway; not shared between threads."""

    def __init__(self, base_url: str, journal: Journal, kind: str, token: str | None = None,
                 timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)
        self.journal = journal
        self.kind = kind

    def close(self) -> None:
        self.http.close()

    def once(self, method: str, path: str, *, label: str | None = None,
             **kwargs: Any) -> httpx.Response | None:
        label = label or f"{method} {path.split('?')[0]}"
        start = time.monotonic()
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            self.journal.record(Call(self.kind, label, start - self.journal.t0,
                                     time.monotonic() - start, None, type(exc).__name__))
            return None
        self.journal.record(Call(self.kind, label, start - self.journal.t0,
                                 time.monotonic() - start, response.status_code))
        return response

    def until_answered(self, method: str, path: str, *, label: str | None = None,
                       give_up_s: float = 90.0, stop: Callable[[], bool] | None = None,
                       **kwargs: Any) -> httpx.Response | None:
        """Send until a final answer (anything but no answer, 5xx, 408 or 429), waiting what
        Retry-After says or backing off 0.5 s doubling to 8 s, for at most ``give_up_s``;
        None if no final answer came."""
        label = label or f"{method} {path.split('?')[0]}"
        started = self.journal.now()
        deadline = time.monotonic() + give_up_s
        delay, attempts = 0.5, 0
        while True:
            attempts += 1
            response = self.once(method, path, label=label, **kwargs)
            final = response is not None and response.status_code not in RETRY_STATUSES
            wait = max(delay, retry_after(response))
            if final or time.monotonic() + wait > deadline or (stop is not None and stop()):
                self.journal.outcome(Outcome(
                    self.kind, label, started, self.journal.now(),
                    response.status_code if response is not None else None, attempts))
                return response if final else None
            time.sleep(wait)
            delay = min(8.0, delay * 2)


def retry_after(response: httpx.Response | None) -> float:
    """The seconds an answer's Retry-After asks for (0 when it names none)."""
    if response is None:
        return 0.0
    try:
        return min(RETRY_AFTER_MAX_S, float(response.headers.get("retry-after", 0)))
    except ValueError:
        return 0.0
