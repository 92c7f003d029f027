"""The connection's edge: slow and numerous clients, and HTTPS (docs/decisions/0203).

A client that sent its headers, or an upload, at one byte every two seconds held a connection
(and a slot of the event loop's attention) for as long as it liked. Here:

- Headers must arrive within HEADER_TIMEOUT_S of the connection (or of the previous answer on
  a kept-alive one): else 408 and the connection closes. uvicorn has no such timeout, so its
  HTTP protocol gets one (``protocol``); an idle kept-alive connection still closes after
  KEEPALIVE_TIMEOUT_S, as uvicorn does.
- A body must keep up BODY_MIN_BYTES_PER_S over every BODY_RATE_WINDOW_S of the time the
  server waits for it: else 408 and the connection closes (``slow_body``, in front of every
  route). Only the waiting for bytes not yet arrived counts, and never after the body ended.
- At most MAX_CONNECTIONS connections per process, and each client its share of them and of
  the request rate (gateway/edge/shares.py, ADR 0323): refusals are JSON with Retry-After.
- Strict-Transport-Security on every answer to a request that came over HTTPS: served with
  TLS_CERT_FILE, or from a TRUSTED_PROXIES proxy that says X-Forwarded-Proto: https (``hsts``).

docs/operations.md says what a reverse proxy in front should add (its own header and body
timeouts, connection limits per client address, request buffering).
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import orjson
from litestar.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.edge import shares
from shared import errors
from shared.settings import GatewaySettings

_TIMEOUT_DETAIL = ("The request arrived too slowly; send it again at a normal pace (the "
                   "server waits {wait:g} s for headers).")


class RequestTimeout(errors.AppError):
    """The request body arrived too slowly; send it again at a normal pace."""

    code = "request_timeout"
    # The rest of a slow body is not read: the connection ends with the answer.
    headers = {"Connection": "close"}


def _raw_408(detail: str) -> bytes:
    body = orjson.dumps({"code": RequestTimeout.code, "detail": detail})
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
            + body)


def protocol(header_timeout_s: float,
             client_shares: shares.Shares | None = None) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with a header-read timeout and, with ``client_shares``, the
    connection shares of gateway/edge/shares.py (``Config(http=...)``)."""

    class EdgeProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None
        _refusal: shares.Refusal | None = None  # this connection is answered with it, then closed
        _holds: str | None = None  # "admitted" or "refused": what it counts in the shares
        _counted: str | None = None  # the peer whose share an admitted connection holds

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if client_shares is not None:
                peer = self.client[0] if self.client else None
                refusal, self._counted = client_shares.connect(peer)
                if refusal is None:
                    self._holds = "admitted"
                elif client_shares.may_hold_refused():
                    self._holds, self._refusal = "refused", refusal
                    client_shares.refused_open += 1
                else:
                    transport.abort()  # too many refused ones already wait: no answer
                    return
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()  # a kept-alive connection's next request: its headers are timed too

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def _start_asgi_task(self, cycle: Any, app: Any) -> None:
            if self._refusal is not None:
                app = self._refusal.answer  # answered before any of the app runs
            super()._start_asgi_task(cycle, app)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if client_shares is not None and self._holds == "admitted":
                client_shares.disconnect(self._counted)
            elif client_shares is not None and self._holds == "refused":
                client_shares.refused_open -= 1
            self._holds = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._header_timer is None:
                wait = (header_timeout_s if self._refusal is None
                        else min(header_timeout_s, shares.REFUSED_WAIT_S))
                self._header_timer = self.loop.call_later(wait, self._too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            self.transport.write(self._refusal.raw() if self._refusal is not None else
                                 _raw_408(_TIMEOUT_DETAIL.format(wait=header_timeout_s)))
            self.transport.close()

    return EdgeProtocol


def slow_body(min_bytes_per_s: int, window_s: float):  # type: ignore[no-untyped-def]
    """An ASGI middleware: a body that arrives slower than the minimum rate ends in 408.

    Only the client's own time is counted: the time the handler spends waiting inside
    ``receive`` for body bytes that have not arrived yet. A handler that reads late (a guard
    waiting on a locked row, a busy loop) finds the body already there and is never charged
    for it; once the last piece arrived, ``receive`` is passed through untimed, so the
    disconnect listener of a stream or of a slow handler is never cut (docs/decisions/0320)."""
    need = min_bytes_per_s * window_s

    def middleware(app: ASGIApp) -> ASGIApp:
        async def timed(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or need <= 0:
                await app(scope, receive, send)
                return
            pace = BodyPace(min_bytes_per_s, window_s)
            await app(scope, pace.wrap(receive), send)

        return timed

    return middleware


class BodyPace:
    """One request body's pace: bytes received against seconds spent waiting for them."""

    def __init__(self, min_bytes_per_s: int, window_s: float) -> None:
        self.rate = min_bytes_per_s
        self.window_s = window_s
        self.need = min_bytes_per_s * window_s
        self.waited = 0.0   # seconds spent waiting for the body in the current window
        self.got = 0        # bytes received in the current window
        self.ended = False  # the last piece arrived (or the client left): nothing more to time

    def wrap(self, receive: Receive) -> Receive:
        async def paced() -> Any:
            if self.ended:
                return await receive()
            while True:
                started = time.monotonic()
                try:
                    message = await asyncio.wait_for(receive(), self.window_s - self.waited)
                except TimeoutError:
                    self.waited = self.window_s
                    message = None
                else:
                    self.waited += time.monotonic() - started
                if message is not None:
                    self._count(message)
                if self.waited >= self.window_s and not self.ended:
                    self._judge()
                if message is not None:
                    return message

        return paced  # type: ignore[return-value]

    def _count(self, message: Any) -> None:
        if message["type"] != "http.request":
            self.ended = True  # http.disconnect: the handler learns it from the message
            return
        self.got += len(message.get("body", b""))
        if not message.get("more_body", False):
            self.ended = True

    def _judge(self) -> None:
        if self.got < self.need:
            raise RequestTimeout(f"The body arrived slower than {self.rate} bytes a second; "
                                 "send it again at a normal pace.")
        self.waited, self.got = 0.0, 0


def hsts(max_age_s: int):  # type: ignore[no-untyped-def]
    """An ASGI middleware: Strict-Transport-Security on answers to requests over HTTPS."""
    header = (b"strict-transport-security", f"max-age={max_age_s}".encode())

    def middleware(app: ASGIApp) -> ASGIApp:
        async def secured(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope.get("scheme") != "https" or max_age_s <= 0:
                await app(scope, receive, send)
                return

            async def send_with_hsts(message: Any) -> None:
                if message["type"] == "http.response.start":
                    message["headers"] = [*message.get("headers", []), header]
                await send(message)

            await app(scope, receive, send_with_hsts)

        return secured

    return middleware


def server_options(settings: GatewaySettings,
                   client_shares: shares.Shares | None = None) -> dict[str, Any]:
    """uvicorn.Config's keywords for these limits (cli/main.py's `ingest gateway`). The
    connection caps are the shares' (JSON refusals), not uvicorn's ``limit_concurrency``
    (a text/plain 503)."""
    options: dict[str, Any] = {
        "http": protocol(settings.header_timeout_s, client_shares),
        "limit_concurrency": None if client_shares is not None else settings.max_connections,
        "timeout_keep_alive": settings.keepalive_timeout_s,
        # X-Forwarded-For and -Proto count only from TRUSTED_PROXIES (never by default: the
        # sign-in throttle and the client shares count per client address, and HSTS follows
        # the scheme).
        "proxy_headers": bool(settings.trusted_proxies),
        "forwarded_allow_ips": list(settings.trusted_proxies),
    }
    if settings.tls_cert_file and settings.tls_key_file:
        options.update(ssl_certfile=settings.tls_cert_file, ssl_keyfile=settings.tls_key_file)
    return options


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """The gateway's socket, bound with SO_REUSEPORT and not yet listening: uvicorn listens
    on it once the lifespan has started, so the kernel hands this process no connection
    before it can answer it (docs/decisions/0324)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock
