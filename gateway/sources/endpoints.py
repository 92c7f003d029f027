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
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import httpx
from botocore.parsers import create_parser

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


# ── one listing request, for "Test connection" (docs/decisions/0206) ───────────────────────
PROBE_TIMEOUT_S = 10.0
PROBE_MAX_BYTES = 2 * 1024 * 1024  # a page of 10 keys is a few KB; more is not an S3 answer


@dataclass(frozen=True)
class Probe:
    """What one ListObjectsV2 request answered: the keys, or a sentence for people."""

    ok: bool
    keys: list[str]
    more: bool
    detail: str


def probe(s3: Any, *, bucket: str, prefix: str, max_keys: int) -> Probe:
    """List one page with exactly one request: no retry, no redirect followed.

    botocore follows an S3 region redirect by sending again, and retries, so an endpoint that
    answers 307 to everything made one test cost 83 requests and end in a RecursionError. Here
    botocore only signs the request and reads the answer; httpx sends it once."""
    url = s3.generate_presigned_url("list_objects_v2", ExpiresIn=60, Params={
        "Bucket": bucket, "Prefix": prefix, "MaxKeys": max_keys})
    try:
        with httpx.Client(timeout=PROBE_TIMEOUT_S, follow_redirects=False) as client, \
                client.stream("GET", url) as response:
            body = _bounded(response)
            status, headers = response.status_code, response.headers
    except httpx.TimeoutException:
        return _failed(f"The endpoint did not answer within {PROBE_TIMEOUT_S:g} seconds; check "
                       "the endpoint URL and the network path to it.")
    except (httpx.HTTPError, ValueError):
        return _failed("The endpoint could not be reached; check the endpoint URL and the "
                       "region.")
    if 300 <= status < 400:
        return _failed(f"The endpoint answered with a redirect ({status}), which the gateway "
                       "does not follow; use the endpoint and region the bucket really lives "
                       "at.")
    parsed = _parsed(s3, status, headers, body)
    if parsed is None:
        return _failed(f"The endpoint's answer ({status}) is not an S3 answer; check that the "
                       "URL is an S3 endpoint.")
    if status >= 400:
        return _failed(describe_refusal(str(parsed.get("Error", {}).get("Code", "")), bucket,
                                        status))
    keys = [o["Key"] for o in parsed.get("Contents", []) if not o["Key"].endswith("/")]
    return Probe(True, keys, bool(parsed.get("IsTruncated")), "")


_DENIED = ("AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch",
           "InvalidToken", "ExpiredToken")


def describe_refusal(code: str, bucket: str, status: int) -> str:
    """What an S3 error answer means, for the person filling in the form."""
    if code == "NoSuchBucket":
        return f"Bucket {bucket!r} does not exist at this endpoint; check its name and region."
    if code in _DENIED:
        return (f"The gateway's credentials may not list bucket {bucket!r} ({code}); ask for "
                "s3:ListBucket on it for the gateway's role.")
    if code in ("PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraint"):
        return f"Bucket {bucket!r} is in another region ({code}); set the source's region to it."
    return (f"The endpoint refused the listing ({status}{', ' + code if code else ''}); check "
            "the bucket, the region and the gateway's access to them.")


def _failed(detail: str) -> Probe:
    return Probe(False, [], False, detail)


def _bounded(response: httpx.Response) -> bytes:
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > PROBE_MAX_BYTES:
            raise ValueError("answer too large")
        chunks.append(chunk)
    return b"".join(chunks)


def _parsed(s3: Any, status: int, headers: httpx.Headers, body: bytes) -> dict[str, Any] | None:
    """botocore's own reading of a ListObjectsV2 answer, or None when it is not XML."""
    model = s3.meta.service_model.operation_model("ListObjectsV2")
    try:
        return create_parser("rest-xml").parse(  # type: ignore[no-any-return]
            {"status_code": status, "headers": dict(headers), "body": body},
            model.output_shape)
    except Exception:  # noqa: BLE001 - anything botocore cannot read is "not an S3 answer"
        return None
