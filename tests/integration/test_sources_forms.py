"""Sources as the form uses them: Test connection (one listing page, the checks of a sync, the
first error in plain words), an optional schedule run by the gateway's housekeeping, and the
HTML 404 page for browsers next to JSON for the API (docs/decisions/0118, 0119)."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from gateway.sources import access as source_access
from tests.support import s3sync, stack
from tests.support.stack import wait_until

MINIO = "http://minio:9000"


@pytest.fixture
def platform(s3) -> dict[str, str]:
    names = {"upload": f"up-{uuid.uuid4().hex[:10]}", "artifact": f"art-{uuid.uuid4().hex[:10]}"}
    for bucket in names.values():
        s3.create_bucket(Bucket=bucket)
    return names


@pytest.fixture
def env(stack_env, platform) -> dict[str, str]:
    return {**stack_env, "UPLOAD_STORE_URI": f"s3://{platform['upload']}/uploads",
            "ARTIFACT_STORE_URI": f"s3://{platform['artifact']}",
            "SOURCE_ENDPOINT_ALLOWLIST": json.dumps([MINIO]),
            "HOUSEKEEPING_INTERVAL_S": "0.5"}


@pytest.fixture
def gw(env, out_dir):
    process = stack.start_gateway(env, out_dir)
    yield process
    process.stop()


@pytest.fixture
def admin(tenants, conn):
    return tenants.user(role="admin")


def grant(conn, user, bucket: str, prefix: str = "") -> None:
    source_access.grant(conn, tenant_id=user.tenant_id, bucket=bucket, prefix=prefix,
                        granted_by="test", platform=())


# ── test connection ─────────────────────────────────────────────────────────────────────────
def test_test_connection_lists_one_page_of_a_granted_bucket(gw, admin, conn, s3):
    bucket = s3sync.new_bucket(s3, {f"docs/{i}.md": b"# hi\n" for i in range(12)})
    grant(conn, admin, bucket)
    with gw.client(admin.token) as client:
        answer = client.post("/v1/sources/test-connection",
                             json={"bucket": bucket, "prefix": "docs/", "name": "ignored"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["ok"] is True and len(body["keys"]) == 10 and body["more"] is True
    assert body["detail"].startswith(f"Connected: bucket '{bucket}' lists 10+ objects")
    # Nothing was saved
    assert conn.execute("SELECT count(*) AS n FROM ingestion_sources").fetchone()["n"] == 0


def test_test_connection_reports_s3_errors_in_plain_words(gw, admin, conn, s3):
    missing = f"gone-{uuid.uuid4().hex[:8]}"
    grant(conn, admin, missing)
    with gw.client(admin.token) as client:
        answer = client.post("/v1/sources/test-connection", json={"bucket": missing})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"ok": False, "detail": f"Bucket '{missing}' does not exist at this "
                                                    "endpoint; check its name and region."}


def test_test_connection_refuses_what_a_sync_refuses(gw, admin, tenants, conn, s3, platform):
    bucket = s3sync.new_bucket(s3, {"a.md": b"# a\n"})
    user = tenants.user(role="user")
    with gw.client(admin.token) as client:
        # A bucket not granted to the tenant
        ungranted = client.post("/v1/sources/test-connection", json={"bucket": bucket})
        assert ungranted.status_code == 403 and ungranted.json()["code"] == "bucket_not_granted"
        # The platform's own bucket, even granted
        grant(conn, admin, platform["upload"])
        own = client.post("/v1/sources/test-connection", json={"bucket": platform["upload"]})
        assert own.status_code == 403 and own.json()["code"] == "platform_bucket"
        # An endpoint outside the allowlist
        grant(conn, admin, bucket)
        far = client.post("/v1/sources/test-connection",
                          json={"bucket": bucket, "endpoint_url": "http://169.254.169.254"})
        # 403: a well-formed URL the rules keep us from calling (docs/decisions/0200)
        assert far.status_code == 403 and far.json()["code"] == "endpoint_not_allowed", far.text
        # A malformed bucket name
        bad = client.post("/v1/sources/test-connection", json={"bucket": "A_B"})
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_request"
    with gw.client(user.token) as client:
        assert client.post("/v1/sources/test-connection",
                           json={"bucket": bucket}).status_code == 403


# ── schedule ────────────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("value", [0, 4, 10081, -5, 7.5, "10", True])
def test_a_schedule_out_of_bounds_is_refused_and_nothing_saved(gw, admin, conn, s3, value):
    bucket = s3sync.new_bucket(s3)
    grant(conn, admin, bucket)
    with gw.client(admin.token) as client:
        refused = client.post("/v1/sources", json={"bucket": bucket, "sync_every_minutes": value})
        assert refused.status_code == 400, refused.text
        assert "sync_every_minutes" in refused.json()["detail"]
    assert conn.execute("SELECT count(*) AS n FROM ingestion_sources").fetchone()["n"] == 0


def test_a_scheduled_source_is_synced_by_the_gateway_when_due_and_not_before(gw, admin, conn,
                                                                             s3):
    bucket = s3sync.new_bucket(s3, {"a.md": b"# a\n"})
    grant(conn, admin, bucket)
    with gw.client(admin.token) as client:
        # Given a source every 5 minutes (the bounds: 5 to 10080) and one without a schedule
        source = client.post("/v1/sources", json={"bucket": bucket, "name": "timed",
                                                  "sync_every_minutes": 5}).json()
        assert source["sync_every_minutes"] == 5
        plain = client.post("/v1/sources", json={"bucket": bucket, "name": "plain"}).json()

        def syncs(source_id):
            return client.get(f"/v1/sources/{source_id}/syncs").json()["items"]

        # Then the housekeeping syncs the never-synced scheduled source, with no initiator
        wait_until(lambda: syncs(source["source_id"]), timeout=30, interval=0.2,
                   message="the first scheduled sync")
        first = syncs(source["source_id"])[0]
        assert first["initiated_by"] is None
        s3sync.wait_sync(client, source["source_id"], first["sync_id"])
        # ... and not again before 5 minutes have passed (several housekeeping rounds)
        marker = conn.execute("SELECT now() + interval '2 seconds' AS t").fetchone()["t"]
        wait_until(lambda: conn.execute("SELECT now() > %s AS ok", (marker,)).fetchone()["ok"],
                   timeout=10, interval=0.2, message="two seconds of housekeeping")
        assert len(syncs(source["source_id"])) == 1
        # When its last sync is older than the interval, it runs again
        conn.execute("UPDATE source_syncs SET started_at = now() - interval '6 minutes' "
                     "WHERE source_id = %s", (source["source_id"],))
        wait_until(lambda: len(syncs(source["source_id"])) == 2, timeout=30, interval=0.2,
                   message="the second scheduled sync")
        # The source without a schedule never synced by itself; clearing a schedule works
        assert syncs(plain["source_id"]) == []
        cleared = client.patch(f"/v1/sources/{source['source_id']}",
                               json={"sync_every_minutes": None})
        assert cleared.status_code == 200 and cleared.json()["sync_every_minutes"] is None


# ── unknown addresses ───────────────────────────────────────────────────────────────────────
def test_unknown_browser_addresses_get_the_html_404_page_and_the_api_keeps_json(gw):
    with httpx.Client(base_url=gw.url, timeout=30) as client:
        page = client.get("/no/such/page", headers={"Accept": "text/html,application/xhtml+xml"})
        assert page.status_code == 404
        assert page.headers["content-type"].startswith("text/html")
        assert "There is no page at this address" in page.text
        assert page.headers["content-security-policy"].startswith("default-src 'self'")
        for path in ("/v1/no-such-thing", "/api/nothing", "/intake/x"):
            api = client.get(path, headers={"Accept": "text/html"})
            assert api.status_code == 404
            assert api.headers["content-type"].startswith("application/json"), path
            assert api.json()["code"] == "not_found"
        # A client that does not ask for HTML gets JSON anywhere
        plain = client.get("/no/such/page")
        assert plain.status_code == 404 and plain.json()["code"] == "not_found"
