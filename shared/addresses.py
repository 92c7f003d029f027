"""Where a server-side request would land: resolving a host the way the client will, and the
IPv4 address an IPv6 one stands for.

Shared by the two rules that judge addresses a tenant admin chose: an S3 source's endpoint
(gateway/sources/endpoints.py, docs/decisions/0066) and a webhook receiver
(shared/webhooks/urls.py, docs/decisions/0153, 0190). Both sides import it; it imports neither.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Iterable[str]]
# IPv6 prefixes that carry an IPv4 address the packet ends up at (NAT64, RFC 6052).
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# IANA's global unicast space: every public IPv6 address is in it. What lies outside (the
# IPv4-compatible ::/96 such as ::127.0.0.1, site-local fec0::/10, 5f00::/8, the local-use
# NAT64 64:ff9b:1::/48) Python 3.11 still calls "global", so this is checked first.
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
# Inside 2000::/3 but never a real receiver: documentation (RFC 3849, RFC 9637). Teredo and the
# other 2001::/23 blocks Python already treats as private.
_NOT_ROUTED = (ipaddress.IPv6Network("2001:db8::/32"), ipaddress.IPv6Network("3fff::/20"))

# A URL's IPv6 literal host, ``[::ffff:a9fe:a9fe]`` (RFC 3986's IPv6address, no zone id), for
# the URL patterns /schema declares: a well-formed URL whose address the rules then judge.
_H16, _OCTET = "[0-9A-Fa-f]{1,4}", "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_LS32 = rf"({_H16}:{_H16}|{_OCTET}(\.{_OCTET}){{3}})"
IPV6_LITERAL = (r"\[(" + "|".join((
    rf"({_H16}:){{6}}{_LS32}", rf"::({_H16}:){{5}}{_LS32}", rf"({_H16})?::({_H16}:){{4}}{_LS32}",
    rf"(({_H16}:){{0,1}}{_H16})?::({_H16}:){{3}}{_LS32}",
    rf"(({_H16}:){{0,2}}{_H16})?::({_H16}:){{2}}{_LS32}",
    rf"(({_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}", rf"(({_H16}:){{0,4}}{_H16})?::{_LS32}",
    rf"(({_H16}:){{0,5}}{_H16})?::{_H16}", rf"(({_H16}:){{0,6}}{_H16})?::")) + r")\]")


def normalize(url: str) -> str:
    return url.rstrip("/")


def embedded_ipv4(address: Address) -> Address:
    """The IPv4 address an IPv6 one stands for (mapped, 6to4, NAT64), else itself.

    ``::ffff:169.254.169.254`` reaches the metadata service; Python 3.11 does not call it
    link-local, so it is unwrapped first.
    """
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def is_public(address: Address) -> bool:
    """Whether ``address`` (after unwrapping an embedded IPv4 one) is a public unicast address:
    not loopback, private, link-local, multicast, reserved or unspecified, in either family."""
    address = embedded_ipv4(address)
    if address.is_multicast or address.is_reserved or not address.is_global:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        return address in _GLOBAL_UNICAST and not any(address in n for n in _NOT_ROUTED)
    return True


def resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})
