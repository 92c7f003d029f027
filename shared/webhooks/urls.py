"""Where a webhook delivery may go: the address rules of an S3 source's endpoint
(docs/decisions/0066, resolution and unwrapping in shared/addresses.py), turned for receivers.

A webhook URL is a server-side request a tenant admin aims anywhere, so:

- a URL on ``WEBHOOK_URL_ALLOWLIST`` (exact URL) is allowed wherever it resolves (an operator
  vouched for an internal receiver);
- otherwise every address the host resolves to must be public; loopback is allowed only in
  ``DEV_MODE`` (``make run`` users try a receiver on their own machine); private, link-local
  (169.254.169.254), multicast and reserved addresses never, in either family: an IPv6
  address must be global unicast (2000::/3), so ``[::127.0.0.1]``, ``fec0::1`` or
  ``64:ff9b:1::a9fe:a9fe`` are refused even though Python calls them global;
- ``https`` only outside ``DEV_MODE``, no user:password in the URL (it would end up in logs).

Receivers are public services, so unlike an S3 endpoint a public URL needs no allow-listing.
The check runs at registration and again before each delivery (DNS can change), and the
delivery connects to the address it checked, never to a second lookup's answer: a name that
rebinds between the check and the connection cannot aim the POST elsewhere (ADR 0190).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from shared import addresses, errors

MAX_URL_CHARS = 2000


class WebhookUrlNotAllowed(errors.InvalidRequest):
    """This URL may not receive webhooks: use a public https URL, or ask an operator to add it
    to WEBHOOK_URL_ALLOWLIST."""

    code = "webhook_url_not_allowed"


class WebhookUrlForbidden(errors.Forbidden):
    """A well-formed URL the platform's rules keep deliveries from (a non-public address, a
    host that does not resolve, plain http outside DEV_MODE): 403 (ADR 0200)."""

    code = WebhookUrlNotAllowed.code


# What check() reads as a URL, as /schema declares it: http(s), a host (name, IPv4 or a
# bracketed IPv6 literal, whose address check() then judges: 403), a port up to 65535, the rest
# without spaces. Anything else is malformed (400).
URL_PATTERN = (r"^https?://([A-Za-z0-9._~%!$&'()*+,;=:-]*@)?([A-Za-z0-9._~-]+|"
               + addresses.IPV6_LITERAL + ")"
               r"(:([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]"
               r"|6553[0-5]))?([/?#][^\s\x00-\x1f]*)?$")


@dataclass(frozen=True)
class Target:
    """Where to send: the checked address to connect to (None: an allow-listed URL, connected
    to by name wherever it resolves), and the host name for the Host header and TLS."""

    host: str
    address: str | None


def check(url: str, *, allowlist: Iterable[str], dev_mode: bool,
          resolve: addresses.Resolver | None = None) -> Target:
    """The address ``url`` may be delivered to, or WebhookUrlNotAllowed."""
    if not url or len(url) > MAX_URL_CHARS or any(c.isspace() or ord(c) < 32 for c in url):
        raise WebhookUrlNotAllowed(f"url must be an absolute URL of at most {MAX_URL_CHARS} "
                                   "characters, without spaces.")
    if addresses.normalize(url) in {addresses.normalize(a) for a in allowlist}:
        return Target(urlsplit(url).hostname or "", None)
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError as exc:
        raise WebhookUrlNotAllowed("url is not a valid URL.") from exc
    if parts.scheme not in ("https", "http") or not host:
        raise WebhookUrlNotAllowed("url must be an absolute https URL, e.g. "
                                   "https://example.com/hook.")
    if parts.scheme == "http" and not dev_mode:
        raise WebhookUrlForbidden("url must be an https URL outside DEV_MODE, e.g. "
                                  "https://example.com/hook.")
    if parts.username is not None or parts.password is not None:
        raise WebhookUrlForbidden("url must not carry a user name or password.")
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        found = list((resolve or addresses.resolve)(host, port))
    except (OSError, UnicodeError) as exc:
        raise WebhookUrlForbidden(f"The URL's host {host!r} does not resolve.") from exc
    if not found:
        raise WebhookUrlForbidden(f"The URL's host {host!r} does not resolve.")
    for text in found:
        if not allowed_address(ipaddress.ip_address(text.split("%", 1)[0]), dev_mode=dev_mode):
            raise WebhookUrlForbidden(
                f"The URL's host {host!r} resolves to {text}, a loopback, private, link-local "
                "or reserved address; only an operator can allow it (WEBHOOK_URL_ALLOWLIST).")
    # Every address passed; the first is the one the delivery connects to.
    return Target(host, found[0].split("%", 1)[0])


def allowed_address(address: addresses.Address, *, dev_mode: bool) -> bool:
    if addresses.embedded_ipv4(address).is_loopback:
        return dev_mode
    return addresses.is_public(address)


def loggable(url: str) -> str:
    """The URL without its query string, fragment or credentials: receivers put tokens there."""
    try:
        parts = urlsplit(url)
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
    except ValueError:
        return "<invalid url>"
    return f"{parts.scheme}://{netloc}{parts.path}"
