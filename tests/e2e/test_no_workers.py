"""DESIGN.md: with every worker stopped, the gateway still serves and runs stay queued."""

from __future__ import annotations

from tests.conftest import TEST_PASSWORD
from tests.support.stack import wait_until


def test_gateway_serves_everything_but_processing_without_workers(gateway, tenants, conn):
    # Given no worker process at all, and a user with a password
    user = tenants.user(role="user")
    with gateway.client() as anonymous:
        # When they sign in, upload and browse
        login = anonymous.post("/v1/auth/login", json={"tenant": user.tenant, "email": user.email,
                                                         "password": TEST_PASSWORD})
        assert login.status_code == 200, login.text
        token = login.json()["access_token"]
    with gateway.client(token) as client:
        upload = client.post("/v1/ingest", files={"file": ("notes.txt", b"plain notes " * 20)})
        assert upload.status_code == 202
        run_id = upload.json()["run_id"]
        # The relay publishing the job is the last thing the gateway does for an upload.
        wait_until(lambda: conn.execute(
            "SELECT published_at FROM job_outbox WHERE run_id = %s", (run_id,)
        ).fetchone()["published_at"], timeout=30, message="the job is published")

        # Then everything answers, and the run waits in `queued` with nothing lost
        runs = client.get("/v1/ingestion-runs", params={"status": "queued"}).json()
        assert [r["run_id"] for r in runs["items"]] == [run_id]
        assert client.get(f"/v1/ingestion-runs/{run_id}").json()["status"] == "queued"
        assert client.get("/v1/documents").json()["total"] == 0
        assert client.get("/health/ready").status_code == 200
    published = conn.execute("SELECT published_at FROM job_outbox WHERE run_id = %s",
                             (run_id,)).fetchone()
    assert published["published_at"] is not None
