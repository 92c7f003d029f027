"""The connection's edge: slow and numerous clients, and HTTPS (docs/decisions/0203).

A client that sent its headers, or an upload, at one byte every two seconds held a connection
(and a slot of the event loop's attention) for as long as it liked. Here:

- Headers must arrive within HEADER_TIMEOUT_S of the connection (or of the previous answer on
  a kept-alive one): else 408 and the connection closes. uvicorn has no such timeout, so its
  HTTP protocol gets one (``protocol``); an idle kept-alive connection still closes after
  KEEPALIVE_TIMEOUT_S, as uvicorn does.
- A body must keep up BODY_MIN_BYTES_PER_S over every BODY_RATE_WINDOW_S while the handler
  reads it: else 408 and the connection closes (``slow_body``, in front of every route).
- At most MAX_CONNECTIONS connections per process: uvicorn answers the request of one more
  with 503 at once (``limit_concurrency``), instead of making everyone wait.
- Strict-Transport-Security on every answer to a request that came over HTTPS: served with
  TLS_CERT_FILE, or from a TRUSTED_PROXIES proxy that says X-Forwarded-Proto: https (``hsts``).

docs/operations.md says what a reverse proxy in front should add (its own header and body
timeouts, connection limits per client address, request buffering).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from litestar.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

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


def protocol(header_timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with a header-read timeout (``Config(http=...)``)."""

    class HeaderTimeoutProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()  # a kept-alive connection's next request: its headers are timed too

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            self.transport.write(_raw_408(_TIMEOUT_DETAIL.format(wait=header_timeout_s)))
            self.transport.close()

    return HeaderTimeoutProtocol


def slow_body(min_bytes_per_s: int, window_s: float):  # type: ignore[no-untyped-def]
    """An ASGI middleware: a body read slower than the minimum rate ends in 408."""
    need = min_bytes_per_s * window_s

    def middleware(app: ASGIApp) -> ASGIApp:
        async def timed(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or need <= 0:
                await app(scope, receive, send)
                return
            window = {"end": time.monotonic() + window_s, "bytes": 0}

            async def paced() -> Any:
                while True:
                    now = time.monotonic()
                    if now >= window["end"]:
                        if window["bytes"] < need:
                            raise RequestTimeout(
                                f"The body arrived slower than {min_bytes_per_s} bytes a second; "
                                "send it again at a normal pace.")
                        window.update(end=now + window_s, bytes=0)
                    try:
                        message = await asyncio.wait_for(receive(), window["end"] - now)
                    except TimeoutError:
                        continue  # the window is over: judged at the top
                    if message["type"] == "http.request":
                        window["bytes"] += len(message.get("body", b""))
                        if not message.get("more_body", False):
                            window["bytes"] = need  # complete: nothing more to wait for
                    return message

            await app(scope, paced, send)  # type: ignore[arg-type]

        return timed

    return middleware


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


def server_options(settings: GatewaySettings) -> dict[str, Any]:
    """uvicorn.Config's keywords for these limits (cli/main.py's `ingest gateway`)."""
    options: dict[str, Any] = {
        "http": protocol(settings.header_timeout_s),
        "limit_concurrency": settings.max_connections,
        "timeout_keep_alive": settings.keepalive_timeout_s,
        # X-Forwarded-For and -Proto count only from TRUSTED_PROXIES (never by default: the
        # sign-in throttle counts per client address, and HSTS follows the scheme).
        "proxy_headers": bool(settings.trusted_proxies),
        "forwarded_allow_ips": list(settings.trusted_proxies),
    }
    if settings.tls_cert_file and settings.tls_key_file:
        options.update(ssl_certfile=settings.tls_cert_file, ssl_keyfile=settings.tls_key_file)
    return options
