"""The webhook URL rule (shared/webhooks/urls.py) on what a host resolves to: the resolver is
the one seam, so each case states the addresses a name could point at after a DNS change."""

from __future__ import annotations

import pytest

from shared.webhooks import urls


def resolving(*addresses: str):
    return lambda host, port: list(addresses)


@pytest.mark.parametrize("address", [
    "169.254.169.254", "10.0.0.7", "172.16.5.5", "192.168.1.1", "100.64.0.1", "0.0.0.0",
    "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1", "fd00::1", "fe80::1",
    "224.0.0.1", "127.0.0.1", "::1"])
def test_a_public_name_that_resolves_to_a_refused_address_is_refused(address):
    with pytest.raises(urls.WebhookUrlForbidden, match="resolves to"):
        urls.check("https://hooks.example.com/in", allowlist=(), dev_mode=False,
                   resolve=resolving("93.184.216.34", address))


def test_public_addresses_pass_and_loopback_only_in_dev_mode():
    urls.check("https://hooks.example.com/in", allowlist=(), dev_mode=False,
               resolve=resolving("93.184.216.34", "2606:2800:220:1::1"))
    urls.check("http://localhost:8000/in", allowlist=(), dev_mode=True,
               resolve=resolving("127.0.0.1", "::1"))
    with pytest.raises(urls.WebhookUrlForbidden):
        urls.check("https://localhost/in", allowlist=(), dev_mode=False,
                   resolve=resolving("127.0.0.1"))
    with pytest.raises(urls.WebhookUrlForbidden):
        urls.check("http://10.0.0.7/in", allowlist=(), dev_mode=True,
                   resolve=resolving("10.0.0.7"))


def test_an_allow_listed_url_passes_wherever_it_resolves():
    urls.check("https://hooks.internal/in/", allowlist=("https://hooks.internal/in",),
               dev_mode=False, resolve=resolving("10.0.0.7"))


def test_logs_get_the_url_without_query_or_credentials():
    assert urls.loggable("https://u:p@hooks.example.com:8443/in?token=s3cret#x") == (
        "https://hooks.example.com:8443/in")


@pytest.mark.parametrize("address", [
    "::127.0.0.1", "::a9fe:a9fe", "fec0::1", "5f00::1", "64:ff9b:1::a9fe:a9fe", "3fff::1",
    "2001:db8::1", "::", "100::1", "2001::1", "ff0e::1"])
def test_reserved_ipv6_forms_are_refused_outside_dev_mode(address):
    # Python 3.11 calls several of these "global" (IPv4-compatible ::/96, site-local fec0::/10,
    # 5f00::/8, local-use NAT64, the 3fff::/20 documentation block): the rule must not.
    with pytest.raises(urls.WebhookUrlForbidden, match="resolves to"):
        urls.check("https://hooks.example.com/in", allowlist=(), dev_mode=False,
                   resolve=resolving(address))


def test_an_ipv4_compatible_loopback_literal_is_refused():
    # Resolved for real: getaddrinfo takes the literal as it is and the rule judges what it got.
    for url in ("https://[::127.0.0.1]/in", "https://[::7f00:1]:8443/in"):
        with pytest.raises(urls.WebhookUrlForbidden):
            urls.check(url, allowlist=(), dev_mode=False)


def test_the_check_names_the_address_the_delivery_connects_to():
    target = urls.check("https://hooks.example.com/in", allowlist=(), dev_mode=False,
                        resolve=resolving("93.184.216.34", "2606:2800:220:1::1"))
    assert (target.host, target.address) == ("hooks.example.com", "93.184.216.34")
    listed = urls.check("https://hooks.internal/in", allowlist=("https://hooks.internal/in",),
                        dev_mode=False, resolve=resolving("10.0.0.7"))
    assert listed.address is None  # an operator vouched for the name, wherever it resolves
