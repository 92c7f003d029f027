"""Where a source's S3 requests may go: the endpoint allowlist and the address check.

The gateway signs a source's requests with its own credentials and ingests what comes back, so
an ``endpoint_url`` is a server-side request a tenant admin would otherwise aim anywhere: the
cloud metadata service (169.254.169.254), the gateway's own loopback, the private network.
Rules (docs/decisions/0066):

- an endpoint on ``SOURCE_ENDPOINT_ALLOWLIST`` (exact URL) is allowed: an operator vouched for
  it, wherever it resolves (an internal MinIO lives on a private address);
- otherwise, outside ``DEV_MODE`` (or whenever the allowlist is set) it is refused;
- in ``DEV_MODE`` with no allowlist, every address the host resolves to must be public, except
  loopback (moto, MinIO on the developer's machine).

The address check resolves with ``getaddrinfo``, the resolver the S3 client itself uses, so
whatever spelling it accepts (``2130706433``, ``0177.1``, ``[::ffff:127.0.0.1]``) is judged as the
address it connects to. It runs at create/update and again before each sync: DNS can change.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlparse

# Resolution and IPv4 unwrapping live in shared/, where the webhook URL rule uses them too.
from shared import errors
from shared.addresses import Address, Resolver, embedded_ipv4, normalize
from shared.addresses import resolve as _resolve


def check(url: str | None, *, allowlist: Iterable[str], dev_mode: bool,
          resolve: Resolver | None = None) -> None:
    """Raise EndpointNotAllowed unless ``url`` may receive this gateway's signed requests."""
    if url is None:
        return  # the platform's own endpoint (AWS_ENDPOINT_URL or AWS itself)
    listed = {normalize(a) for a in allowlist}
    if normalize(url) in listed:
        return
    if listed or not dev_mode:
        raise errors.EndpointNotAllowed(
            "This endpoint is not on SOURCE_ENDPOINT_ALLOWLIST; ask an operator to add it, or "
            "leave endpoint_url empty to use the platform's S3.")
    parsed = urlparse(url)
    host = parsed.hostname or ""
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        addresses = list((resolve or _resolve)(host, port))
    except (OSError, UnicodeError) as exc:
        raise errors.EndpointNotAllowed(
            f"The endpoint's host {host!r} does not resolve; check the name.") from exc
    if not addresses:
        raise errors.EndpointNotAllowed(f"The endpoint's host {host!r} does not resolve.")
    for text in addresses:
        if not allowed_address(ipaddress.ip_address(text.split("%", 1)[0])):
            raise errors.EndpointNotAllowed(
                f"The endpoint's host {host!r} resolves to {text}, a private, link-local or "
                "reserved address; only an operator can allow it (SOURCE_ENDPOINT_ALLOWLIST).")


def allowed_address(address: Address) -> bool:
    """Public addresses, and loopback (the dev-mode S3 on this machine); nothing else."""
    address = embedded_ipv4(address)
    return address.is_loopback or address.is_global and not address.is_multicast
