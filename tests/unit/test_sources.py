"""Source definitions: include/exclude globs, field checks, sync settings."""

from __future__ import annotations

import uuid

import pytest

from gateway.sources import definitions as sources
from shared import errors
from shared.settings import GatewaySettings


def source(prefix: str = "", include: tuple[str, ...] = (), exclude: tuple[str, ...] = ()):
    return sources.Source(uuid.uuid4(), uuid.uuid4(), "s", "bucket", prefix, None, None,
                          include, exclude, True)


@pytest.mark.parametrize(("key", "expected"), [
    ("docs/a.md", True),
    ("docs/deep/er/b.md", True),  # '*' crosses '/'
    ("docs/c.txt", False),  # not included
    ("docs/drafts/d.md", False),  # excluded wins
    ("docs/drafts.md", True),
])
def test_globs_match_below_the_prefix(key, expected):
    s = source("docs/", include=("*.md",), exclude=("drafts/*",))
    assert s.matches(key) is expected


def test_no_patterns_means_everything():
    assert source("x/").matches("x/anything/at/all.bin")


def test_document_identity_is_the_bucket_and_key():
    assert source().uri("a/b.md") == "s3://bucket/a/b.md"


def test_create_defaults():
    clean = sources.parse({"bucket": "kb-1", "prefix": "hand/"}, partial=False)
    assert clean == {"bucket": "kb-1", "prefix": "hand/", "name": "kb-1/hand",
                     "endpoint_url": None, "region": None, "include_patterns": [],
                     "exclude_patterns": [], "enabled": True, "sync_every_minutes": None}


def test_patch_keeps_only_given_fields():
    assert sources.parse({"enabled": False}, partial=True) == {"enabled": False}


@pytest.mark.parametrize("field", ["secret", "aws_access_key_id", "sessionToken", "password",
                                   "credentials"])
def test_credential_fields_are_refused(field):
    with pytest.raises(errors.InvalidRequest, match="never store credentials"):
        sources.parse({"bucket": "kb-1", field: "x"}, partial=False)


def test_sync_heartbeat_must_fit_the_stale_window():
    with pytest.raises(ValueError, match="SYNC_HEARTBEAT_S"):
        GatewaySettings(dev_mode=True, sync_heartbeat_s=10, sync_stale_s=15)
    GatewaySettings(dev_mode=True, sync_heartbeat_s=5, sync_stale_s=10)


def test_lock_keys_are_signed_64_bit_and_stable():
    sid = uuid.uuid4()
    key = sources.lock_key(sid)
    assert -(2 ** 63) <= key < 2 ** 63 and key == sources.lock_key(sid)


# ── bucket names and prefixes ───────────────────────────────────────────────────────────────
@pytest.mark.parametrize("bucket", ["kb-1", "my.docs.bucket", "a1b", "x" * 63])
def test_valid_bucket_names(bucket):
    assert sources.parse({"bucket": bucket}, partial=False)["bucket"] == bucket


@pytest.mark.parametrize("bucket", [
    "ab", "x" * 64, "Bad_Bucket", "-kb", "kb-", "kb..docs", "kb.-docs", "kb-.docs",
    "192.168.5.4", "xn--kb", "sthree-kb", "amzn-s3-demo-kb", "kb-s3alias", "kb--ol-s3",
    "kb.mrap", "kb--x-s3", "kb/../other", "kb\u0000x", 42, None])
def test_bucket_names_break_no_s3_naming_rule(bucket):
    with pytest.raises(errors.InvalidRequest, match="S3 bucket name"):
        sources.parse({"bucket": bucket}, partial=False)


@pytest.mark.parametrize(("prefix", "clean"), [
    ("", ""), ("docs/", "docs/"), ("/docs/2024/", "docs/2024/"), ("docs/rep", "docs/rep"),
    ("a..b/", "a..b/"), (".hidden/", ".hidden/"), ("é" * 256, "é" * 256)])
def test_valid_prefixes(prefix, clean):
    assert sources.clean_prefix(prefix) == clean


@pytest.mark.parametrize("prefix", [
    "team-a/../team-b/", "..", "../", "team-a/..", "./docs", "docs/./x", "docs//x", "a\\..\\b",
    "é" * 257, "x" * 257, "docs/\n", "docs/\x00", 7])
def test_prefixes_that_could_escape_or_are_too_long_are_refused(prefix):
    with pytest.raises(errors.InvalidRequest, match="prefix"):
        sources.clean_prefix(prefix)


@pytest.mark.parametrize("url", ["http://minio:99999", "http://minio:port"])
def test_endpoint_ports_are_checked(url):
    with pytest.raises(errors.InvalidRequest, match="port"):
        sources.parse({"bucket": "kb-1", "endpoint_url": url}, partial=False)
