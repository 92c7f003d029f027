"""Source definitions: include/exclude globs, field checks, sync settings."""

from __future__ import annotations

import uuid

import pytest

from gateway import sources
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
    clean = sources.parse({"bucket": "kb-1", "prefix": "hand/"}, allowlist=(), partial=False)
    assert clean == {"bucket": "kb-1", "prefix": "hand/", "name": "kb-1/hand",
                     "endpoint_url": None, "region": None, "include_patterns": [],
                     "exclude_patterns": [], "enabled": True}


def test_patch_keeps_only_given_fields():
    assert sources.parse({"enabled": False}, allowlist=(), partial=True) == {"enabled": False}


def test_endpoint_allowlist_is_enforced():
    allow = ("https://s3.eu-west-1.amazonaws.com",)
    ok = sources.parse({"bucket": "kb-1", "endpoint_url": "https://s3.eu-west-1.amazonaws.com/"},
                       allowlist=allow, partial=False)
    assert ok["endpoint_url"] == "https://s3.eu-west-1.amazonaws.com"
    with pytest.raises(errors.InvalidRequest, match="SOURCE_ENDPOINT_ALLOWLIST"):
        sources.parse({"bucket": "kb-1", "endpoint_url": "http://169.254.169.254"},
                      allowlist=allow, partial=False)


@pytest.mark.parametrize("field", ["secret", "aws_access_key_id", "sessionToken", "password",
                                   "credentials"])
def test_credential_fields_are_refused(field):
    with pytest.raises(errors.InvalidRequest, match="never store credentials"):
        sources.parse({"bucket": "kb-1", field: "x"}, allowlist=(), partial=False)


def test_sync_heartbeat_must_fit_the_stale_window():
    with pytest.raises(ValueError, match="SYNC_HEARTBEAT_S"):
        GatewaySettings(dev_mode=True, sync_heartbeat_s=10, sync_stale_s=15)
    GatewaySettings(dev_mode=True, sync_heartbeat_s=5, sync_stale_s=10)


def test_lock_keys_are_signed_64_bit_and_stable():
    sid = uuid.uuid4()
    key = sources.lock_key(sid)
    assert -(2 ** 63) <= key < 2 ** 63 and key == sources.lock_key(sid)
