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
    with pytest.raises(urls.WebhookUrlNotAllowed, match="resolves to"):
        urls.check("https://hooks.example.com/in", allowlist=(), dev_mode=False,
                   resolve=resolving("93.184.216.34", address))


def test_public_addresses_pass_and_loopback_only_in_dev_mode():
    urls.check("https://hooks.example.com/in", allowlist=(), dev_mode=False,
               resolve=resolving("93.184.216.34", "2606:2800:220:1::1"))
    urls.check("http://localhost:8000/in", allowlist=(), dev_mode=True,
               resolve=resolving("127.0.0.1", "::1"))
    with pytest.raises(urls.WebhookUrlNotAllowed):
        urls.check("https://localhost/in", allowlist=(), dev_mode=False,
                   resolve=resolving("127.0.0.1"))
    with pytest.raises(urls.WebhookUrlNotAllowed):
        urls.check("http://10.0.0.7/in", allowlist=(), dev_mode=True,
                   resolve=resolving("10.0.0.7"))


def test_an_allow_listed_url_passes_wherever_it_resolves():
    urls.check("https://hooks.internal/in/", allowlist=("https://hooks.internal/in",),
               dev_mode=False, resolve=resolving("10.0.0.7"))


def test_logs_get_the_url_without_query_or_credentials():
    assert urls.loggable("https://u:p@hooks.example.com:8443/in?token=s3cret#x") == (
        "https://hooks.example.com:8443/in")
