"""Who may read which bucket, where a source's requests may go, and where a job's upload may be."""

from __future__ import annotations

import uuid

import pytest

from gateway.sources import access as source_access
from gateway.sources import endpoints
from shared import errors, objectstore
from shared.settings import GatewaySettings

PLATFORM = frozenset({"platform-uploads"})


# ── buckets and grants ──────────────────────────────────────────────────────────────────────
def test_the_platform_buckets_come_from_the_s3_store_settings():
    settings = GatewaySettings(dev_mode=True, upload_store_uri="s3://up-bucket/uploads",
                               artifact_store_uri="s3://art-bucket")
    assert source_access.platform_buckets(settings) == {"up-bucket", "art-bucket"}
    local = GatewaySettings(dev_mode=True, upload_store_uri="file:///srv/uploads",
                            artifact_store_uri="s3://art-bucket/x")
    assert source_access.platform_buckets(local) == {"art-bucket"}


@pytest.mark.parametrize("by_operator", [False, True])
def test_nobody_may_read_a_platform_bucket(by_operator):
    with pytest.raises(errors.PlatformBucket):
        source_access.decide("platform-uploads", "", by_operator=by_operator, grants=[""],
                             platform=PLATFORM)


def test_operators_need_no_grant_and_admins_do():
    source_access.decide("anything", "x/", by_operator=True, grants=[], platform=PLATFORM)
    with pytest.raises(errors.BucketNotGranted, match="no grant for bucket 'anything'"):
        source_access.decide("anything", "x/", by_operator=False, grants=[], platform=PLATFORM)


@pytest.mark.parametrize(("grant", "prefix", "covered"), [
    ("", "", True), ("", "any/thing", True),
    ("team-a/", "team-a/", True), ("team-a/", "team-a/deep/er", True),
    ("team-a/", "", False),  # the whole bucket is more than the folder
    ("team-a/", "team-a", False),  # would also list team-a-secrets/
    ("team-a/", "team-a-secrets/", False), ("team-a/", "team-b/", False),
    ("team-a/", "TEAM-A/", False),  # S3 keys are case-sensitive
])
def test_a_granted_prefix_is_a_folder(grant, prefix, covered):
    assert source_access.grant_covers(grant, prefix) is covered
    if covered:
        source_access.decide("b-1", prefix, by_operator=False, grants=[grant], platform=PLATFORM)
    else:
        with pytest.raises(errors.BucketNotGranted, match="only under 'team-a/'"):
            source_access.decide("b-1", prefix, by_operator=False, grants=[grant],
                                 platform=PLATFORM)


def test_grant_prefixes_are_stored_as_folders():
    assert source_access.grant_prefix("") == ""
    assert source_access.grant_prefix("team-a") == "team-a/"
    assert source_access.grant_prefix("/team-a/") == "team-a/"


# ── endpoints ───────────────────────────────────────────────────────────────────────────────
def resolver(*addresses: str):
    return lambda host, port: list(addresses)


@pytest.mark.parametrize("url", [
    "http://169.254.169.254", "http://127.0.0.1:9000", "http://localhost", "http://[::1]",
    "http://10.0.0.8", "https://s3.eu-west-1.amazonaws.com"])
def test_outside_dev_mode_only_listed_endpoints_are_allowed(url):
    with pytest.raises(errors.EndpointNotAllowed, match="SOURCE_ENDPOINT_ALLOWLIST"):
        endpoints.check(url, allowlist=(), dev_mode=False, resolve=resolver("52.95.1.1"))
    # Listed (trailing slashes aside), it is allowed whatever it resolves to
    endpoints.check(url, allowlist=(url + "/",), dev_mode=False, resolve=resolver("127.0.0.1"))


def test_a_set_allowlist_binds_dev_mode_too():
    with pytest.raises(errors.EndpointNotAllowed):
        endpoints.check("http://127.0.0.1:5000", allowlist=("https://minio.internal",),
                        dev_mode=True, resolve=resolver("127.0.0.1"))


def test_no_endpoint_is_the_platforms_own():
    endpoints.check(None, allowlist=(), dev_mode=False)


@pytest.mark.parametrize("address", [
    "169.254.169.254", "10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "0.0.0.0",
    "224.0.0.1", "fe80::1", "fc00::1", "::", "::ffff:169.254.169.254", "::ffff:10.0.0.1",
    "2002:a9fe:a9fe::1", "64:ff9b::a9fe:a9fe"])
def test_dev_mode_refuses_hosts_that_resolve_to_private_or_link_local(address):
    with pytest.raises(errors.EndpointNotAllowed, match="resolves to"):
        endpoints.check("http://innocent.example", allowlist=(), dev_mode=True,
                        resolve=resolver("52.95.1.1", address))


@pytest.mark.parametrize("address", ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1",
                                     "52.95.1.1", "2a05:d07a::1"])
def test_dev_mode_allows_loopback_and_public_addresses(address):
    endpoints.check("http://s3.local:5000", allowlist=(), dev_mode=True,
                    resolve=resolver(address))


@pytest.mark.parametrize(("url", "address"), [
    ("http://2852039166", "169.254.169.254"),  # decimal
    ("http://0251.0376.0251.0376", "169.254.169.254"),  # octal
    ("http://0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),  # hex
    ("http://169.254.43518", "169.254.169.254"),  # a.b.c with a 16-bit last part
    ("http://012.1", "10.0.0.1"),
    ("http://[::ffff:a9fe:a9fe]", "::ffff:169.254.169.254"),
    ("http://0.0.0.0:9000", "0.0.0.0"),
])
def test_numeric_spellings_are_judged_by_the_address_they_reach(url, address):
    # The real resolver (getaddrinfo, what the S3 client uses): numeric hosts need no DNS.
    with pytest.raises(errors.EndpointNotAllowed, match="resolves to"):
        endpoints.check(url, allowlist=(), dev_mode=True)


def test_an_unresolvable_host_is_refused():
    def fail(host, port):
        raise OSError("Name or service not known")

    with pytest.raises(errors.EndpointNotAllowed, match="does not resolve"):
        endpoints.check("http://nowhere.invalid", allowlist=(), dev_mode=True, resolve=fail)


# ── a job's upload URI ──────────────────────────────────────────────────────────────────────
T, R = uuid.uuid4(), uuid.uuid4()


def confine(uri: str, store: str) -> str:
    return objectstore.confine_upload(uri, store_uri=store, tenant_id=T, run_id=R)


def test_the_runs_own_file_passes(tmp_path):
    path = tmp_path / "uploads" / str(T) / str(R) / "My report (1).pdf"
    assert confine(path.as_uri(), (tmp_path / "uploads").as_uri()) == path.as_uri()
    assert confine(f"s3://up/uploads/{T}/{R}/a.md", "s3://up/uploads") == \
        f"s3://up/uploads/{T}/{R}/a.md"
    assert confine(f"s3://up/{T}/{R}/a.md", "s3://up") == f"s3://up/{T}/{R}/a.md"


@pytest.mark.parametrize("uri", [
    "file:///etc/passwd",
    "{root}/{other}/{run}/a.md",  # another tenant's folder
    "{root}/{tenant}/{other}/a.md",  # another run's
    "{root}/{tenant}/{run}/../../{other}/{run}/a.md",
    "{root}/{tenant}/{run}/%2e%2e/%2e%2e/x/a.md",
    "{root}/{tenant}/{run}/..",
    "{root}/{tenant}/{run}/sub/a.md",
    "{root}/{tenant}/{run}/",
    "{root}/{tenant}/{run}/./a.md",
    "{root}/{tenant}//{run}/a.md",
    "{root}/{tenant}/{run}/a.md?x=1",
    "{root}/{tenant}/{run}/a.md#x",
    "{root}-evil/{tenant}/{run}/a.md",
    "file://host{rootpath}/{tenant}/{run}/a.md",
    "s3://up/{tenant}/{run}/a.md",
    "http://169.254.169.254/{tenant}/{run}/a.md",
])
def test_anything_else_is_outside_the_store(tmp_path, uri):
    root = (tmp_path / "uploads").resolve()
    uri = uri.format(root=root.as_uri(), rootpath=root, tenant=T, run=R, other=uuid.uuid4())
    with pytest.raises(objectstore.OutsideStore):
        confine(uri, root.as_uri())


def test_a_symlink_in_the_runs_folder_does_not_lead_out(tmp_path):
    folder = tmp_path / "uploads" / str(T) / str(R)
    folder.mkdir(parents=True)
    (folder / "a.md").symlink_to("/etc/passwd")
    with pytest.raises(objectstore.OutsideStore):
        confine((folder / "a.md").as_uri(), (tmp_path / "uploads").as_uri())


@pytest.mark.parametrize("uri", [
    "s3://other/uploads/{tenant}/{run}/a.md", "s3://up/{tenant}/{run}/a.md",
    "s3://up/uploads/{other}/{run}/a.md", "s3://up/uploads/{tenant}/{run}/../../x/a.md",
    "s3://up/uploads/{tenant}/{run}/..", "s3://up/uploads/{tenant}/{run}/x/a.md",
    "s3://up/uploads/{tenant}/{run}/", "s3://up/uploads-evil/{tenant}/{run}/a.md",
    "s3://up/uploads/{tenant}/{run}/a.md?versionId=1", "s3://up/uploads/{tenant}/{run}/a\\b",
    "file:///uploads/{tenant}/{run}/a.md"])
def test_s3_uploads_are_confined_to_the_bucket_prefix_and_run(uri):
    with pytest.raises(objectstore.OutsideStore):
        confine(uri.format(tenant=T, run=R, other=uuid.uuid4()), "s3://up/uploads")
