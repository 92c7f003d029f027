"""The sources API: admin only, tenant-scoped, no credentials, soft deletion (real gateway)."""

from __future__ import annotations

import uuid

import pytest

from tests.support import s3sync


@pytest.fixture
def admin(tenants):
    return tenants.user(role="admin")


def new_source(client, **fields) -> dict:
    response = client.post("/v1/sources", json={"bucket": "kb-bucket", **fields})
    assert response.status_code == 201, response.text
    return response.json()


# ── create / read / update ──────────────────────────────────────────────────────────────────
def test_admin_creates_reads_lists_and_patches_a_source(gateway, admin):
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


def test_a_disabled_source_cannot_be_synced(gateway, admin):
    with gateway.client(admin.token) as client:
        sid = new_source(client, enabled=False)["source_id"]
        response = client.post(f"/v1/sources/{sid}/sync")
    assert response.status_code == 409
    assert response.json()["code"] == "source_disabled"


def test_names_are_unique_per_tenant(gateway, admin, tenants):
    other = tenants.user(tenant="globex")
    with gateway.client(admin.token) as client:
        new_source(client, name="KB")
        again = client.post("/v1/sources", json={"bucket": "other-bucket", "name": "KB"})
        assert again.status_code == 409 and "already exists" in again.json()["detail"]
    with gateway.client(other.token) as client:
        new_source(client, name="KB")


@pytest.mark.parametrize(("body", "fragment"), [
    ({}, "bucket is required"),
    ({"bucket": "Bad_Bucket"}, "S3 bucket name"),
    ({"bucket": "kb-bucket", "endpoint_url": "ftp://x"}, "http(s) URL"),
    ({"bucket": "kb-bucket", "endpoint_url": "http://key:secret@minio:9000"}, "credentials"),
    ({"bucket": "kb-bucket", "region": "EU WEST"}, "region"),
    ({"bucket": "kb-bucket", "include_patterns": "*.md"}, "list"),
    ({"bucket": "kb-bucket", "enabled": "yes"}, "true or false"),
    ({"bucket": "kb-bucket", "colour": "red"}, "Unknown field 'colour'"),
    ({"bucket": "kb-bucket", "aws_secret_access_key": "abc"}, "never store credentials"),
    ({"bucket": "kb-bucket", "access_key_id": "AKIA0000000000000000"}, "never store credentials"),
], ids=["no_bucket", "bad_bucket", "bad_scheme", "userinfo", "bad_region", "patterns_not_list",
        "enabled_not_bool", "unknown_field", "secret_field", "access_key_field"])
def test_invalid_sources_are_400_with_a_reason(gateway, admin, body, fragment):
    with gateway.client(admin.token) as client:
        response = client.post("/v1/sources", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_request"
    assert fragment in response.json()["detail"]


def test_the_bucket_of_a_source_cannot_change(gateway, admin):
    with gateway.client(admin.token) as client:
        sid = new_source(client)["source_id"]
        response = client.patch(f"/v1/sources/{sid}", json={"bucket": "elsewhere"})
    assert response.status_code == 400
    assert "create a new source" in response.json()["detail"]


def test_credentials_are_neither_stored_nor_logged(gateway, admin, conn):
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
def test_users_get_403_on_every_sources_route(gateway, admin, tenants):
    with gateway.client(admin.token) as client:
        sid = new_source(client)["source_id"]
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


def test_another_tenant_cannot_see_or_touch_a_source(gateway, admin, tenants, s3):
    # Given a source of tenant acme with one sync
    bucket = s3sync.new_bucket(s3, {"a.md": b"# A\n"})
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
    with gateway.client(admin.token) as client:
        sid = s3sync.create_source(client, bucket)["source_id"]
        s3sync.sync_now(client, sid)
        result = client.delete(f"/v1/sources/{sid}").json()
    assert result["runs_cancelled"] == 2
    statuses = {r["status"] for r in conn.execute("SELECT status FROM ingestion_runs")}
    assert statuses == {"failed"}
