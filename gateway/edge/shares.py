"""Each client's share of a gateway process: connections, requests in flight, request rate.

One address holding 1,100 slow connections took every place of a process capped at 1,000, and
every other client got uvicorn's text/plain 503 (issue 36). Here (docs/decisions/0323):

- a process holds at most MAX_CONNECTIONS connections; one more is refused 503 `server_busy`;
- one client address holds at most CLIENT_MAX_CONNECTIONS of them (429 `too_many_connections`);
  a TRUSTED_PROXIES proxy's connections carry many clients, so they are not counted as one;
- one client has at most CLIENT_MAX_CONNECTIONS requests in flight (429 `too_many_requests`),
  by the address the request came from: behind a trusted proxy, the address its
  X-Forwarded-For names (uvicorn resolves it only for TRUSTED_PROXIES, before this runs);
- one client sends at most CLIENT_REQUESTS_PER_S requests a second on average, in bursts of up
  to CLIENT_REQUEST_BURST (a token bucket per address; 429 `rate_limited`).

Every refusal is JSON `{code, detail}` with Retry-After and closes nothing it does not have to.
The counts are per process, in memory: a client's share of the fleet is its share of each
process, which is what keeps one process serving its other clients.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import orjson
from litestar.types import ASGIApp, Receive, Scope, Send

from shared.settings import GatewaySettings

# A refused connection waits this long at most for its request's headers before it is answered
# and closed: long enough for a client that sends its request at once to read a proper answer,
# short enough that refused connections do not pile up.
REFUSED_WAIT_S = 2.0
# Idle token buckets are dropped once there are more than this many addresses.
BUCKETS_KEPT = 10_000


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    detail: str
    retry_after_s: int
    close: bool = True

    def body(self) -> bytes:
        return orjson.dumps({"code": self.code, "detail": self.detail})

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(self.body())).encode()),
                   (b"retry-after", str(self.retry_after_s).encode())]
        return [*headers, (b"connection", b"close")] if self.close else headers

    def raw(self) -> bytes:
        """The whole HTTP/1.1 answer, for a connection whose request never completed."""
        reason = {429: b"Too Many Requests", 503: b"Service Unavailable"}[self.status]
        head = b"".join(name + b": " + value + b"\r\n" for name, value in self.headers())
        return b"HTTP/1.1 %d %s\r\n%s\r\n%s" % (self.status, reason, head, self.body())

    async def answer(self, _: Scope, __: Receive, send: Send) -> None:
        """The refusal as an ASGI app."""
        await send({"type": "http.response.start", "status": self.status,
                    "headers": self.headers()})
        await send({"type": "http.response.body", "body": self.body(), "more_body": False})


class Trusted:
    """TRUSTED_PROXIES: addresses and networks (`10.0.0.0/8`), or `*` for any."""

    def __init__(self, entries: Iterable[str]) -> None:
        entries = list(entries)
        self.any = "*" in entries
        self.networks = [ipaddress.ip_network(e, strict=False) for e in entries if e != "*"]

    def __contains__(self, host: str | None) -> bool:
        if host is None:
            return False
        if self.any:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in self.networks)


@dataclass
class _Bucket:
    tokens: float
    at: float


class Shares:
    def __init__(self, *, max_connections: int, client_max_connections: int,
                 requests_per_s: float, burst: int, trusted: Trusted,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_connections = max_connections
        self.client_max = client_max_connections
        self.rate = requests_per_s
        self.burst = burst
        self.trusted = trusted
        self.clock = clock
        self.connections = 0      # admitted connections of this process
        self.refused_open = 0     # refused ones still waiting to be answered
        self._by_peer: dict[str, int] = {}
        self._in_flight: dict[str, int] = {}
        self._buckets: dict[str, _Bucket] = {}

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> Shares:
        return cls(max_connections=settings.max_connections,
                   client_max_connections=settings.client_max_connections,
                   requests_per_s=settings.client_requests_per_s,
                   burst=settings.client_request_burst,
                   trusted=Trusted(settings.trusted_proxies))

    # ── connections (the protocol, gateway/edge/transport.py) ───────────────────────────────
    def connect(self, peer: str | None) -> tuple[Refusal | None, str | None]:
        """Admit a new connection from ``peer``, or the refusal to answer it with. The second
        value is the peer whose share it holds (give it back to ``disconnect``)."""
        if self.connections >= self.max_connections:
            return _busy(self.max_connections), None
        counted = None if peer in self.trusted else (peer or "unknown")
        if counted is not None and self._by_peer.get(counted, 0) >= self.client_max:
            return Refusal(429, "too_many_connections", (
                f"This address already holds {self.client_max} connections to this server; "
                "close some, or reuse them for your requests."), 5), None
        self.connections += 1
        if counted is not None:
            self._by_peer[counted] = self._by_peer.get(counted, 0) + 1
        return None, counted

    def disconnect(self, counted: str | None) -> None:
        self.connections -= 1
        if counted is None:
            return
        left = self._by_peer.get(counted, 1) - 1
        if left > 0:
            self._by_peer[counted] = left
        else:
            self._by_peer.pop(counted, None)

    def may_hold_refused(self) -> bool:
        """Room for one more refused connection waiting for its headers; past it, a refused
        connection is closed at once without an answer (the process's file descriptors)."""
        return self.refused_open < self.max_connections

    # ── requests (the ASGI side, ``middleware``) ────────────────────────────────────────────
    def admit(self, client: str) -> Refusal | None:
        """Count one request of ``client`` in: its rate, then its requests in flight."""
        waited = self._take_token(client)
        if waited is not None:
            return Refusal(429, "rate_limited", (
                f"Too many requests from this address (more than {self.rate:g} a second); "
                f"retry after {waited} s."), waited, close=False)
        if self._in_flight.get(client, 0) >= self.client_max:
            return Refusal(429, "too_many_requests", (
                f"This address already has {self.client_max} requests in progress on this "
                "server; wait for some to finish."), 5, close=False)
        self._in_flight[client] = self._in_flight.get(client, 0) + 1
        return None

    def done(self, client: str) -> None:
        left = self._in_flight.get(client, 1) - 1
        if left > 0:
            self._in_flight[client] = left
        else:
            self._in_flight.pop(client, None)

    def _take_token(self, client: str) -> int | None:
        """None when the client had a token (now spent), else the seconds until it has one."""
        now = self.clock()
        bucket = self._buckets.get(client)
        if bucket is None:
            if len(self._buckets) >= BUCKETS_KEPT:
                self._forget_full(now)
            bucket = self._buckets[client] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.rate)
        bucket.at = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return None
        return max(1, math.ceil((1 - bucket.tokens) / self.rate))

    def _forget_full(self, now: float) -> None:
        """Drop the buckets that have refilled: their clients start afresh, as new ones do."""
        full = [client for client, b in self._buckets.items()
                if b.tokens + (now - b.at) * self.rate >= self.burst]
        for client in full:
            del self._buckets[client]


def _busy(cap: int) -> Refusal:
    return Refusal(503, "server_busy", (
        f"This server holds its maximum of {cap} connections; retry in a moment."), 1)


def middleware(shares: Shares, app: ASGIApp) -> ASGIApp:
    """The request side of the shares, around the whole app (inside uvicorn's proxy-headers
    middleware, so ``scope["client"]`` is the client a trusted proxy named)."""

    async def shared(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        client = scope.get("client")
        key = client[0] if client else "unknown"
        refusal = shares.admit(key)
        if refusal is not None:
            await refusal.answer(scope, receive, send)
            return
        try:
            await app(scope, receive, send)
        finally:
            shares.done(key)

    return shared  # type: ignore[return-value]
