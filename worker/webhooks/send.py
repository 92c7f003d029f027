"""One webhook attempt: check where the URL leads, POST to that very address, all of it within
one deadline (docs/decisions/0154, 0195).

- The URL rule (shared/webhooks/urls.py) runs again before each attempt (DNS can change), and
  the connection goes to the address it checked: the URL's host is replaced by that address,
  the Host header and the TLS name (SNI and certificate check) stay the host's. A name that
  rebinds between the check and the connection cannot aim the POST elsewhere.
- The deadline covers everything: resolving, connecting, sending and the whole answer. A
  receiver that answers 200 and then dribbles its body byte by byte holds a place for at most
  the deadline, never for as long as it keeps dribbling.
- Connections are never reused: one verified for one name must not carry another name's
  request to the same address, and deliveries are rare enough to pay the handshake.
- Redirects are never followed (a public URL must not bounce the POST to a private one), and
  proxies from the environment are ignored.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import orjson

from shared import addresses, errors
from shared.webhooks import signing, urls

USER_AGENT = "dragonfly-ingest-webhooks/1"
# What is read of an answer: enough for a receiver's error page; the rest is not waited for.
MAX_ANSWER_BYTES = 64 * 1024


@dataclass(frozen=True)
class Result:
    status_code: int | None
    error: str | None  # None: delivered (2xx)


def client(max_connections: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        follow_redirects=False, trust_env=False, headers={"user-agent": USER_AGENT},
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=0),
        # Per-operation bounds as a second fence; the deadline (asyncio.timeout) is the rule.
        timeout=httpx.Timeout(60.0))


def body(delivery: dict[str, Any]) -> bytes:
    """The Standard Webhooks envelope: the event's type, its timestamp, and the event as data."""
    payload = delivery["payload"]
    return orjson.dumps({"type": delivery["event_type"], "timestamp": payload.get("timestamp"),
                         "data": payload})


def pinned(url: str, target: urls.Target) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(URL to request, extra headers, httpx extensions) that reach ``target.address`` while
    the request still names the host: Host header, and the TLS server name."""
    if target.address is None:
        return url, {}, {}
    parts = urlsplit(url)
    literal = f"[{target.address}]" if ":" in target.address else target.address
    netloc = literal + (f":{parts.port}" if parts.port else "")
    host = parts.netloc.rpartition("@")[2]
    extensions = {"sni_hostname": target.host} if parts.scheme == "https" else {}
    return urlunsplit(parts._replace(netloc=netloc)), {"host": host}, extensions


async def attempt(http: httpx.AsyncClient, delivery: dict[str, Any], *, deadline_s: float,
                  allowlist: Sequence[str], dev_mode: bool,
                  resolve: addresses.Resolver | None = None) -> Result:
    """POST one delivery within ``deadline_s``; the result to settle it with."""
    try:
        async with asyncio.timeout(deadline_s):
            return await _attempt(http, delivery, allowlist=allowlist, dev_mode=dev_mode,
                                  resolve=resolve)
    except TimeoutError:
        return Result(None, f"no complete answer within {deadline_s:g} s")


async def _attempt(http: httpx.AsyncClient, delivery: dict[str, Any], *,
                   allowlist: Sequence[str], dev_mode: bool,
                   resolve: addresses.Resolver | None) -> Result:
    url = delivery["url"]
    try:
        # getaddrinfo blocks: in a thread, still inside the deadline.
        target = await asyncio.to_thread(urls.check, url, allowlist=allowlist,
                                         dev_mode=dev_mode, resolve=resolve)
    except errors.AppError as exc:
        return Result(None, f"not sent: {exc.detail}")
    data = body(delivery)
    secrets = [delivery["secret"], *([delivery["previous_secret"]]
                                     if delivery.get("previous_secret") else [])]
    headers = signing.headers(secrets, delivery["message_id"], int(time.time()), data)
    request_url, host, extensions = pinned(url, target)
    try:
        async with http.stream("POST", request_url, content=data, headers={**headers, **host},
                               extensions=extensions) as response:
            read = 0
            async for chunk in response.aiter_raw():
                read += len(chunk)
                if read >= MAX_ANSWER_BYTES:
                    break
            status = response.status_code
    except httpx.HTTPError as exc:
        return Result(None, f"{type(exc).__name__}: could not reach the receiver")
    if 200 <= status < 300:
        return Result(status, None)
    if 300 <= status < 400:
        return Result(status, f"HTTP {status}: redirects are not followed")
    return Result(status, f"HTTP {status}")
