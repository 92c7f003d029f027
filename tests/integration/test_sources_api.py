"""The sources API: admin only, tenant-scoped, granted buckets only, no credentials, soft
deletion (real gateway, moto S3, an S3 upload store whose bucket no source may read)."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from gateway.sources import access as source_access
from tests.support import s3sync, stack

MINIO = "http://minio:9000"


@pytest.fixture
def platform(s3) -> dict[str, str]:
    """The platform's own buckets: every tenant's uploads, and the artifacts."""
    names = {"upload": f"up-{uuid.uuid4().hex[:10]}", "artifact": f"art-{uuid.uuid4().hex[:10]}"}
    for bucket in names.values():
        s3.create_bucket(Bucket=bucket)
    return names


@pytest.fixture
def env(stack_env, platform) -> dict[str, str]:
    return {**stack_env, "UPLOAD_STORE_URI": f"s3://{platform['upload']}/uploads",
            "ARTIFACT_STORE_URI": f"s3://{platform['artifact']}",
            "SOURCE_ENDPOINT_ALLOWLIST": json.dumps([MINIO])}


@pytest.fixture
def gateway(env, out_dir):
    process = stack.start_gateway(env, out_dir)
    yield process
    process.stop()


@pytest.fixture
def admin(tenants):
    return tenants.user(role="admin")


def grant(conn, user, bucket: str, prefix: str = "") -> None:
    """What `ingest sources grant` does (its own test runs the command)."""
    source_access.grant(conn, tenant_id=user.tenant_id, bucket=bucket, prefix=prefix,
                        granted_by="test", platform=())


def new_source(client, **fields) -> dict:
    response = client.post("/v1/sources", json={"bucket": "kb-bucket", **fields})
    assert response.status_code == 201, response.text
    return response.json()


def snapshot(conn, s3, platform) -> dict:
    """Every row a sources route could write, and every object in the platform's buckets."""
    tables = ("ingestion_sources", "source_syncs", "source_objects", "source_grants",
              "documents", "document_versions", "ingestion_runs", "job_outbox")
    rows = {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in tables}
    objects = {b: sorted(o["Key"] for o in s3.list_objects_v2(Bucket=b).get("Contents", []))
               for b in platform.values()}
    return {"rows": rows, "objects": objects}


# ── create / read / update ──────────────────────────────────────────────────────────────────
def test_admin_creates_reads_lists_and_patches_a_source(gateway, admin, conn):
    grant(conn, admin, "kb-bucket")
    with gateway.client(admin.token) as client:
        created = new_source(client, prefix="/handbook/", endpoint_url="http://minio:9000/",
                             region="eu-west-1", include_patterns=["*.md"],
                             exclude_patterns=["drafts/*"])
        sid = created["source_id"]
        assert created["name"] == "kb-bucket/handbook"  # defaults to bucket/prefix
        assert created["prefix"] == "handbook/"  # a leading slash would match nothing
        assert created["endpoint_url"] == "http://minio:9000"
        assert created["enabled"] is True and created["last_sync"] is None
        assert created["created_by"] == str(admin.user_id)

        assert client.get(f"/v1/sources/{sid}").json() == created
        listing = client.get("/v1/sources").json()
        assert listing["total"] == 1 and listing["items"][0]["source_id"] == sid

        patched = client.patch(f"/v1/sources/{sid}", json={"name": "Handbook", "enabled": False,
                                                             "exclude_patterns": []})
        assert patched.status_code == 200, patched.text
        body = patched.json()
        assert (body["name"], body["enabled"], body["exclude_patterns"]) == ("Handbook", False, [])
        # Fields not in the PATCH keep their values.
        assert body["include_patterns"] == ["*.md"] and body["region"] == "eu-west-1"


def test_a_disabled_source_cannot_be_synced(gateway, admin, conn):
    grant(conn, admin, "kb-bucket")
    with gateway.client(admin.token) as client:
        sid = new_source(client, enabled=False)["source_id"]
        response = client.post(f"/v1/sources/{sid}/sync")
    assert response.status_code == 409
    assert response.json()["code"] == "source_disabled"


def test_names_are_unique_per_tenant(gateway, admin, tenants, conn):
    other = tenants.user(tenant="globex")
    for user, bucket in ((admin, "kb-bucket"), (admin, "other-bucket"), (other, "kb-bucket")):
        grant(conn, user, bucket)
    with gateway.client(admin.token) as client:
        new_source(client, name="KB")
        again = client.post("/v1/sources", json={"bucket": "other-bucket", "name": "KB"})
        assert again.status_code == 409 and "already exists" in again.json()["detail"]
    with gateway.client(other.token) as client:
        new_source(client, name="KB")


@pytest.mark.parametrize(("body", "fragment"), [
    ({}, "bucket is required"),
    ({"bucket": "Bad_Bucket"}, "S3 bucket name"),
    ({"bucket": "kb..bucket"}, "S3 bucket name"),
    ({"bucket": "192.168.1.10"}, "S3 bucket name"),
    ({"bucket": "kb-bucket", "prefix": "a/../b/"}, "'..'"),
    ({"bucket": "kb-bucket", "prefix": "p" * 257}, "256 characters"),
    ({"bucket": "kb-bucket", "endpoint_url": "ftp://x"}, "http(s) URL"),
    ({"bucket": "kb-bucket", "endpoint_url": "http://key:secret@minio:9000"}, "credentials"),
    ({"bucket": "kb-bucket", "region": "EU WEST"}, "region"),
    ({"bucket": "kb-bucket", "include_patterns": "*.md"}, "list"),
    ({"bucket": "kb-bucket", "enabled": "yes"}, "true or false"),
    ({"bucket": "kb-bucket", "colour": "red"}, "Unknown field 'colour'"),
    ({"bucket": "kb-bucket", "aws_secret_access_key": "abc"}, "never store credentials"),
    ({"bucket": "kb-bucket", "access_key_id": "AKIA0000000000000000"}, "never store credentials"),
], ids=["no_bucket", "bad_bucket", "double_dot_bucket", "ip_bucket", "dotdot_prefix",
        "long_prefix", "bad_scheme", "userinfo", "bad_region", "patterns_not_list",
        "enabled_not_bool", "unknown_field", "secret_field", "access_key_field"])
def test_invalid_sources_are_400_with_a_reason(gateway, admin, body, fragment):
    with gateway.client(admin.token) as client:
        response = client.post("/v1/sources", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_request"
    assert fragment in response.json()["detail"]


def test_the_bucket_of_a_source_cannot_change(gateway, admin, conn):
    grant(conn, admin, "kb-bucket")
    grant(conn, admin, "elsewhere")
    with gateway.client(admin.token) as client:
        sid = new_source(client)["source_id"]
        response = client.patch(f"/v1/sources/{sid}", json={"bucket": "elsewhere"})
    assert response.status_code == 400
    assert "create a new source" in response.json()["detail"]


def test_credentials_are_neither_stored_nor_logged(gateway, admin, conn):
    grant(conn, admin, "kb-bucket")
    # Given a create request that tries to pass credentials
    with gateway.client(admin.token) as client:
        client.post("/v1/sources", json={"bucket": "kb-bucket",
                                         "secret_access_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzzzzzzzzzz"})
        new_source(client)
    # Then no column could hold one, and the value is nowhere in the logs
    columns = {r["column_name"] for r in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'ingestion_sources'")}
    assert not {c for c in columns if "secret" in c or "key" in c or "password" in c}
    assert "wJalrXUtnFEMI" not in gateway.logs()


# ── roles and tenants ───────────────────────────────────────────────────────────────────────
def test_users_get_403_on_every_sources_route_and_nothing_changes(gateway, admin, tenants, conn,
                                                                  s3, platform):
    # Given a granted, synced source with objects still to sync
    bucket = s3sync.new_bucket(s3, {"a.md": b"# A\n"})
    grant(conn, admin, bucket)
    with gateway.client(admin.token) as client:
        sid = s3sync.create_source(client, bucket)["source_id"]
        s3sync.sync_now(client, sid)
    s3sync.put(s3, bucket, {"b.md": b"# B\n"})
    stack.wait_until(lambda: conn.execute("SELECT bool_and(published_at IS NOT NULL) AS done "
                                          "FROM job_outbox").fetchone()["done"],
                     message="the relay published the sync's job")
    before = snapshot(conn, s3, platform)
    assert before["rows"]["source_syncs"] and before["objects"][platform["upload"]]
    user = tenants.user(role="user")
    calls = [("POST", "/v1/sources", {"bucket": "kb-bucket"}), ("GET", "/v1/sources", None),
             ("GET", f"/v1/sources/{sid}", None), ("PATCH", f"/v1/sources/{sid}", {"name": "x"}),
             ("DELETE", f"/v1/sources/{sid}", None), ("POST", f"/v1/sources/{sid}/sync", None),
             ("GET", f"/v1/sources/{sid}/syncs", None),
             ("GET", f"/v1/sources/{sid}/syncs/{uuid.uuid4()}", None)]
    with gateway.client(user.token) as client:
        for method, path, body in calls:
            response = client.request(method, path, json=body)
            assert response.status_code == 403, (method, path, response.text)
            assert response.json()["code"] == "forbidden"
    # Then no row and no stored object changed
    assert snapshot(conn, s3, platform) == before


def test_another_tenant_cannot_see_or_touch_a_source(gateway, admin, tenants, s3, conn):
    # Given a source of tenant acme with one sync
    bucket = s3sync.new_bucket(s3, {"a.md": b"# A\n"})
    grant(conn, admin, bucket)
    with gateway.client(admin.token) as client:
        source = s3sync.create_source(client, bucket)
        sid = source["source_id"]
        sync_id = s3sync.sync_now(client, sid)["sync_id"]
    # When an admin of another tenant uses its ids, Then every route answers 404
    other = tenants.user(tenant="globex", role="admin")
    calls = [("GET", f"/v1/sources/{sid}", None), ("PATCH", f"/v1/sources/{sid}", {"name": "x"}),
             ("DELETE", f"/v1/sources/{sid}", None), ("POST", f"/v1/sources/{sid}/sync", None),
             ("GET", f"/v1/sources/{sid}/syncs", None),
             ("GET", f"/v1/sources/{sid}/syncs/{sync_id}", None)]
    with gateway.client(other.token) as client:
        for method, path, body in calls:
            response = client.request(method, path, json=body)
            assert response.status_code == 404, (method, path, response.text)
        assert client.get("/v1/sources").json()["total"] == 0
    # and the source is untouched
    with gateway.client(admin.token) as client:
        assert client.get(f"/v1/sources/{sid}").json()["name"] == source["name"]


# ── delete ──────────────────────────────────────────────────────────────────────────────────
def test_delete_is_soft_stops_serving_its_documents_and_is_idempotent(gateway, admin, s3, conn):
    # Given a synced source whose documents are served
    bucket = s3sync.new_bucket(s3, {f"d/{i}.md": f"# Doc {i}\n".encode() for i in range(4)})
    grant(conn, admin, bucket)
    with gateway.client(admin.token) as client:
        source = s3sync.create_source(client, bucket, name="KB")
        sid = source["source_id"]
        s3sync.sync_now(client, sid)
        s3sync.settle_runs(conn, admin.tenant_id)
        assert client.get("/v1/documents").json()["total"] == 4

        # When it is deleted
        response = client.delete(f"/v1/sources/{sid}")

        # Then its documents are deactivated and it is gone from the API
        assert response.status_code == 200, response.text
        assert response.json() | {"source_id": sid} == {
            "source_id": sid, "deleted": True, "already_deleted": False,
            "documents_deactivated": 4, "runs_cancelled": 0, "runs_still_running": 0}
        assert client.get("/v1/documents").json()["total"] == 0
        assert client.get(f"/v1/sources/{sid}").status_code == 404
        assert client.post(f"/v1/sources/{sid}/sync").status_code == 404
        assert client.get("/v1/sources").json()["total"] == 0
        # A repeated DELETE re-applies it (nothing left to do) and says so
        again = client.delete(f"/v1/sources/{sid}").json()
        assert again["already_deleted"] is True and again["documents_deactivated"] == 0
        # The name is free again
        s3sync.create_source(client, bucket, name="KB")

    # And no row was deleted anywhere: versions, objects, runs and the source all remain
    counts = conn.execute(
        "SELECT (SELECT count(*) FROM document_versions) AS versions, "
        "(SELECT count(*) FROM source_objects WHERE status = 'deleted') AS objects, "
        "(SELECT count(*) FROM ingestion_runs) AS runs, "
        "(SELECT count(*) FROM ingestion_sources WHERE deleted_at IS NOT NULL) AS sources"
    ).fetchone()
    assert counts == {"versions": 4, "objects": 4, "runs": 4, "sources": 1}


def test_delete_cancels_queued_runs_of_the_source(gateway, admin, s3, conn):
    bucket = s3sync.new_bucket(s3, {"a.md": b"# A\n", "b.md": b"# B\n"})
    grant(conn, admin, bucket)
    with gateway.client(admin.token) as client:
        sid = s3sync.create_source(client, bucket)["source_id"]
        s3sync.sync_now(client, sid)
        result = client.delete(f"/v1/sources/{sid}").json()
    assert result["runs_cancelled"] == 2
    statuses = {r["status"] for r in conn.execute("SELECT status FROM ingestion_runs")}
    assert statuses == {"failed"}


# ── which buckets: grants, the platform's own, operators ────────────────────────────────────
def test_an_admin_may_register_only_granted_buckets_and_folders(gateway, admin, conn, s3,
                                                                 platform):
    with gateway.client(admin.token) as client:
        # Given no grant, When an admin registers a bucket the gateway can read
        before = snapshot(conn, s3, platform)
        response = client.post("/v1/sources", json={"bucket": "acme-docs"})
        # Then 403 with a code and the way forward, and nothing was stored
        assert response.status_code == 403, response.text
        assert response.json()["code"] == "bucket_not_granted"
        assert "ingest sources grant" in response.json()["detail"]
        assert snapshot(conn, s3, platform) == before

        # Given a grant of one folder of a shared bucket
        grant(conn, admin, "shared-docs", "team-a")
        before = snapshot(conn, s3, platform)
        for prefix in ("", "team-a", "team-a-secrets/", "team-b/", "TEAM-A/"):
            response = client.post("/v1/sources", json={"bucket": "shared-docs",
                                                        "prefix": prefix})
            assert response.status_code == 403, (prefix, response.text)
            assert response.json()["code"] == "bucket_not_granted"
            assert "'team-a/'" in response.json()["detail"]
        escape = client.post("/v1/sources", json={"bucket": "shared-docs",
                                                  "prefix": "team-a/../team-b/"})
        assert escape.status_code == 400 and "'..'" in escape.json()["detail"]
        assert snapshot(conn, s3, platform) == before

        # Then inside the folder it works, and a PATCH cannot move it out
        sid = new_source(client, bucket="shared-docs", prefix="team-a/handbooks/")["source_id"]
        moved = client.patch(f"/v1/sources/{sid}", json={"prefix": "team-b/"})
        assert moved.status_code == 403 and moved.json()["code"] == "bucket_not_granted"
        assert client.get(f"/v1/sources/{sid}").json()["prefix"] == "team-a/handbooks/"
        assert client.patch(f"/v1/sources/{sid}", json={"prefix": "team-a/"}).status_code == 200


def test_a_grant_is_per_tenant(gateway, admin, tenants, conn):
    grant(conn, admin, "acme-docs")
    other = tenants.user(tenant="globex", role="admin")
    with gateway.client(other.token) as client:
        response = client.post("/v1/sources", json={"bucket": "acme-docs"})
    assert response.status_code == 403 and response.json()["code"] == "bucket_not_granted"


@pytest.mark.parametrize("role", ["admin", "operator"])
@pytest.mark.parametrize("which", ["upload", "artifact"])
def test_nobody_may_register_the_platforms_own_buckets(gateway, tenants, conn, s3, platform,
                                                       role, which):
    user = tenants.user(role=role)
    # even with a grant row written behind the CLI's back (the CLI refuses to write one)
    conn.execute("INSERT INTO source_grants (tenant_id, bucket, granted_by) VALUES (%s, %s, 't')",
                 (user.tenant_id, platform[which]))
    before = snapshot(conn, s3, platform)
    with gateway.client(user.token) as client:
        for prefix in ("", "uploads/", f"uploads/{user.tenant_id}/"):
            response = client.post("/v1/sources", json={"bucket": platform[which],
                                                        "prefix": prefix})
            assert response.status_code == 403, response.text
            assert response.json()["code"] == "platform_bucket"
    assert snapshot(conn, s3, platform) == before


def test_an_operator_registers_and_syncs_an_ungranted_bucket(gateway, tenants, s3, conn):
    operator = tenants.user(role="operator")
    bucket = s3sync.new_bucket(s3, {"a.md": b"# A\n", "b.md": b"# B\n"})
    with gateway.client(operator.token) as client:
        sid = s3sync.create_source(client, bucket)["source_id"]
        result = s3sync.sync_now(client, sid)
    assert result["status"] == "succeeded" and result["counters"]["new"] == 2
    # An admin of the same tenant may sync it too: the operator vouched for the bucket
    colleague = tenants.user(role="admin")
    with gateway.client(colleague.token) as client:
        assert s3sync.sync_now(client, sid)["counters"]["unchanged"] == 2


def test_a_granted_bucket_syncs_until_the_grant_is_revoked(gateway, admin, s3, conn, env):
    # Given a granted bucket and a source of it that synced
    bucket = s3sync.new_bucket(s3, {"a.md": b"# A\n"})
    assert cli(env, "sources", "grant", "--tenant", "acme", "--bucket", bucket).returncode == 0
    with gateway.client(admin.token) as client:
        sid = s3sync.create_source(client, bucket)["source_id"]
        first = s3sync.sync_now(client, sid)
        assert first["status"] == "succeeded" and first["counters"]["new"] == 1

        # When an operator revokes the grant
        revoked = cli(env, "sources", "revoke", "--tenant", "acme", "--bucket", bucket)
        assert revoked.returncode == 0, revoked.stderr
        assert "1 source(s)" in revoked.stdout

        # Then the next sync is refused with the reason, and no sync is recorded
        s3sync.put(s3, bucket, {"b.md": b"# B\n"})
        response = client.post(f"/v1/sources/{sid}/sync")
        assert response.status_code == 403, response.text
        assert response.json()["code"] == "bucket_not_granted"
        assert "no longer sync" in response.json()["detail"]
        assert client.get(f"/v1/sources/{sid}/syncs").json()["total"] == 1
        assert s3sync.run_count(conn, admin.tenant_id) == 1
        # The source itself stays (its documents too, until it is deleted)
        assert client.get(f"/v1/sources/{sid}").status_code == 200

        # And granting again lets it sync again
        assert cli(env, "sources", "grant", "--tenant", "acme", "--bucket", bucket,
                   ).returncode == 0
        assert s3sync.sync_now(client, sid)["counters"]["new"] == 1


# ── where requests go: endpoints ────────────────────────────────────────────────────────────
HOSTILE_ENDPOINTS = ["http://169.254.169.254", "http://127.0.0.1:9000", "http://localhost:9000",
                     "http://[::1]:9000", "http://10.0.0.8", "http://2130706433:9000",
                     "http://[::ffff:169.254.169.254]"]


def test_endpoints_off_the_allowlist_are_refused_outside_dev_mode(gateway, admin, conn, s3,
                                                                  platform):
    grant(conn, admin, "kb-bucket")
    with gateway.client(admin.token) as client:
        sid = new_source(client)["source_id"]
        before = snapshot(conn, s3, platform)
        for url in HOSTILE_ENDPOINTS:
            for response in (client.post("/v1/sources", json={"bucket": "kb-bucket",
                                                              "name": url, "endpoint_url": url}),
                             client.patch(f"/v1/sources/{sid}", json={"endpoint_url": url})):
                # 403: a well-formed URL the rules keep us from calling (docs/decisions/0200)
                assert response.status_code == 403, (url, response.text)
                assert response.json()["code"] == "endpoint_not_allowed", url
        assert snapshot(conn, s3, platform) == before


def test_listed_endpoints_are_allowed_and_checked_again_before_each_sync(env, out_dir, admin,
                                                                         conn, s3, moto):
    # Given a gateway whose allowlist names these endpoints (an operator vouched for them)
    grant(conn, admin, "kb-bucket")
    bucket = s3sync.new_bucket(s3, {"a.md": b"# A\n"})
    grant(conn, admin, bucket)
    listed = stack.start_gateway(
        {**env, "SOURCE_ENDPOINT_ALLOWLIST": json.dumps([*HOSTILE_ENDPOINTS, moto.url])},
        out_dir, name="gateway-listed")
    try:
        with listed.client(admin.token) as client:
            for url in HOSTILE_ENDPOINTS:
                new_source(client, name=url, endpoint_url=url)
            sid = s3sync.create_source(client, bucket, endpoint_url=moto.url)["source_id"]
            assert s3sync.sync_now(client, sid)["status"] == "succeeded"
    finally:
        listed.stop()
    # When the endpoint leaves the allowlist, Then its source no longer syncs
    unlisted = stack.start_gateway(env, out_dir, name="gateway-unlisted")
    try:
        with unlisted.client(admin.token) as client:
            response = client.post(f"/v1/sources/{sid}/sync")
            assert response.status_code == 403, response.text
            assert response.json()["code"] == "endpoint_not_allowed"
            assert client.get(f"/v1/sources/{sid}/syncs").json()["total"] == 1
    finally:
        unlisted.stop()


def test_dev_mode_allows_loopback_but_not_link_local_or_private(env, out_dir, admin, conn, s3,
                                                                moto):
    bucket = s3sync.new_bucket(s3, {"a.md": b"# A\n"})
    grant(conn, admin, bucket)
    dev = stack.start_gateway({**env, "DEV_MODE": "true", "SOURCE_ENDPOINT_ALLOWLIST": "[]"},
                              out_dir, name="gateway-dev")
    try:
        with dev.client(admin.token) as client:
            for url in ("http://169.254.169.254", "http://2852039166", "http://10.0.0.8",
                        "http://[::ffff:a9fe:a9fe]", "http://0.0.0.0:9000", "http://[fe80::1]"):
                response = client.post("/v1/sources", json={"bucket": bucket, "endpoint_url": url})
                assert response.status_code == 403, (url, response.text)
                assert response.json()["code"] == "endpoint_not_allowed"
                assert "resolves to" in response.json()["detail"]
            # moto on loopback, by address and by a name that resolves to it
            sid = s3sync.create_source(client, bucket, endpoint_url=moto.url)["source_id"]
            assert s3sync.sync_now(client, sid)["status"] == "succeeded"
            named = moto.url.replace("127.0.0.1", "localhost")
            assert client.patch(f"/v1/sources/{sid}",
                                json={"endpoint_url": named}).status_code == 200
    finally:
        dev.stop()


# ── the operator's CLI ──────────────────────────────────────────────────────────────────────
def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """`ingest ...` with exactly this test's settings on top of the machine's basics."""
    return stack.ingest(list(args), env)


def test_cli_grants_revokes_and_lists(env, tenants, conn, platform):
    tenants.user(tenant="acme")
    tenants.user(tenant="globex")
    ok = cli(env, "sources", "grant", "--tenant", "acme", "--bucket", "acme-docs",
             "--prefix", "handbooks", "--actor", "ops-jane")
    assert ok.returncode == 0, ok.stderr
    assert "granted: tenant acme may sync s3://acme-docs/handbooks/" in ok.stdout
    again = cli(env, "sources", "grant", "--tenant", "acme", "--bucket", "acme-docs",
                "--prefix", "handbooks/")
    assert again.returncode == 0 and "already granted" in again.stdout
    cli(env, "sources", "grant", "--tenant", "globex", "--bucket", "globex-kb")

    # Refusals: the platform's bucket, an unknown tenant, a bad name, an escaping prefix
    for args, code in (
            (("--tenant", "acme", "--bucket", platform["upload"]), "platform_bucket"),
            (("--tenant", "acme", "--bucket", platform["artifact"]), "platform_bucket"),
            (("--tenant", "initech", "--bucket", "x-docs"), "not_found"),
            (("--tenant", "acme", "--bucket", "Bad_Bucket"), "invalid_request"),
            (("--tenant", "acme", "--bucket", "x-docs", "--prefix", "a/../b"),
             "invalid_request")):
        refused = cli(env, "sources", "grant", *args)
        assert refused.returncode == 2 and refused.stderr.startswith(code), refused.stderr

    listing = json.loads(cli(env, "sources", "grants", "--json").stdout)
    assert [(g["tenant"], g["bucket"], g["prefix"], g["granted_by"]) for g in listing] == [
        ("acme", "acme-docs", "handbooks/", "cli:ops-jane"),
        ("globex", "globex-kb", "", f"cli:{listing[1]['granted_by'][4:]}")]
    table = cli(env, "sources", "grants", "--tenant", "globex").stdout
    assert "globex-kb" in table and "acme-docs" not in table and "1 grant(s)" in table

    revoked = cli(env, "sources", "revoke", "--tenant", "acme", "--bucket", "acme-docs",
                  "--actor", "ops-joe")
    assert revoked.returncode == 0 and "revoked: s3://acme-docs/handbooks/" in revoked.stdout
    assert cli(env, "sources", "revoke", "--tenant", "acme",
               "--bucket", "acme-docs").returncode == 1
    assert [g["bucket"] for g in json.loads(cli(env, "sources", "grants", "--json").stdout)] == [
        "globex-kb"]
    kept = json.loads(cli(env, "sources", "grants", "--all", "--json", "--tenant", "acme").stdout)
    assert kept[0]["revoked_by"] == "cli:ops-joe" and kept[0]["revoked_at"]
