"""The web UI over HTTP, without a browser: the cookie session, CSRF, pages, assets, 403s, and
the admin's deactivation of a document. tests/e2e/test_web_*.py drive the same in Chromium."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import jwt
import pytest

from gateway.operations import dlq
from gateway.web import session
from shared import objectstore
from tests.conftest import TEST_PASSWORD, tenant_of
from tests.support import ops, stack


@contextmanager
def sign_in(gateway, email: str) -> Iterator[httpx.Client]:
    """A client holding a session cookie, as a browser has after the sign-in form."""
    with httpx.Client(base_url=gateway.url, timeout=30, follow_redirects=False) as client:
        form = client.get("/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)
        answer = client.post("/login", data={"tenant": tenant_of(email), "email": email,
                                             "password": TEST_PASSWORD, "csrf_token": token})
        assert answer.status_code == 303, answer.text
        yield client


def page_csrf(client: httpx.Client, path: str = "/upload") -> str:
    html = client.get(path).text
    return re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', html).group(1)


def test_sign_in_sets_an_httponly_session_cookie(gateway, tenants):
    # Given a user and a browser without a session
    user = tenants.user(role="user")
    with httpx.Client(base_url=gateway.url, timeout=30, follow_redirects=False) as browser:
        # A page sends it to sign in, and back afterwards
        first = browser.get("/runs?status=failed")
        assert first.status_code == 303
        assert first.headers["location"] == "/login?next=%2Fruns%3Fstatus%3Dfailed"

        form = browser.get("/login", params={"next": "/runs"})
        assert form.status_code == 200 and 'type="password"' in form.text
        login_cookie = form.headers["set-cookie"]
        assert "HttpOnly" in login_cookie and "SameSite=strict" in login_cookie
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)

        # A form without the sign-in token (another site's) is refused
        forged = browser.post("/login", data={"tenant": user.tenant, "email": user.email, "password": TEST_PASSWORD,
                                              "csrf_token": "forged", "next": "/runs"})
        assert forged.status_code == 403 and "sign-in form expired" in forged.text
        token = re.search(r'name="csrf_token" value="([^"]+)"', forged.text).group(1)

        # A wrong password says so, in one sentence
        wrong = browser.post("/login", data={"tenant": user.tenant, "email": user.email, "password": "nope-nope-nope",
                                             "csrf_token": token, "next": "/runs"})
        assert wrong.status_code == 401
        assert "The e-mail or password is wrong; check both and try again." in wrong.text

        # When the right one is sent
        ok = browser.post("/login", data={"tenant": user.tenant, "email": user.email, "password": TEST_PASSWORD,
                                          "csrf_token": token, "next": "/runs"})

        # Then the session is an HttpOnly, SameSite=Lax cookie, not Secure over plain http
        assert ok.status_code == 303 and ok.headers["location"] == "/runs"
        cookie = next(c for c in ok.headers.get_list("set-cookie")
                      if c.startswith(session.COOKIE + "="))
        assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie
        assert "Secure" not in cookie
        page = browser.get("/runs")
        assert page.status_code == 200 and "<h1>Ingestion runs</h1>" in page.text
        assert page.headers["cache-control"] == "no-store"
        assert "script-src 'self'" in page.headers["content-security-policy"]
        # The user's menu has no admin links
        assert 'href="/admin' not in page.text


def test_the_cookie_authenticates_the_api_with_a_csrf_header(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    uploads = objectstore.file_path(stack_env["UPLOAD_STORE_URI"])
    with sign_in(gateway, user.email) as browser:
        csrf = page_csrf(browser)
        # Reads need no CSRF header
        assert browser.get("/v1/ingestion-runs").status_code == 200

        # An unsafe call with the cookie alone (what another site could make) is refused
        files = {"file": ("a.md", b"# Title\n\nSome words for the web test.\n")}
        refused = browser.post("/v1/ingest", files=files)
        assert refused.status_code == 403
        assert refused.json()["code"] == "forbidden"
        wrong = browser.post("/v1/ingest", files=files, headers={"X-CSRF-Token": "0" * 64})
        assert wrong.status_code == 403
        # and left nothing behind: no document, run or job, and no stored file
        for table in ("documents", "ingestion_runs", "job_outbox"):
            assert conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"] == 0, table
        assert not uploads.exists() or not [p for p in uploads.rglob("*") if p.is_file()]

        # With the page's CSRF token it is accepted
        accepted = browser.post("/v1/ingest", files=files, headers={"X-CSRF-Token": csrf})
        assert accepted.status_code == 202, accepted.text

    # Bearer tokens keep working without any CSRF header
    with gateway.client(user.token) as api:
        files = {"file": ("b.md", b"# Other\n\nDifferent words for the bearer path.\n")}
        assert api.post("/v1/ingest", files=files).status_code == 202


def test_sign_out_needs_the_page_token_and_clears_the_cookie(gateway, tenants):
    user = tenants.user(role="user")
    with sign_in(gateway, user.email) as browser:
        csrf = page_csrf(browser)
        assert browser.post("/logout", data={"csrf_token": "forged"}).status_code == 403
        out = browser.post("/logout", data={"csrf_token": csrf})
        assert out.status_code == 303 and out.headers["location"] == "/login?signed_out=true"
        cleared = next(c for c in out.headers.get_list("set-cookie")
                       if c.startswith(session.COOKIE + "="))
        assert "Max-Age=0" in cleared or 'df_session="";' in cleared
        assert session.COOKIE not in browser.cookies
        assert browser.get("/upload").status_code == 303


def test_an_expired_session_sends_the_reader_to_sign_in(gateway, tenants):
    user = tenants.user(role="user")
    expired = jwt.encode({"sub": str(user.user_id), "tenant_id": str(user.tenant_id),
                          "role": "user", "exp": 1}, stack.TEST_JWT_SECRET, algorithm="HS256")
    with httpx.Client(base_url=gateway.url, timeout=30, follow_redirects=False,
                      cookies={session.COOKIE: expired}) as browser:
        answer = browser.get("/documents")
        assert answer.status_code == 303
        assert answer.headers["location"] == "/login?next=%2Fdocuments&expired=true"
        assert 'df_session="";' in answer.headers["set-cookie"] or \
            "Max-Age=0" in answer.headers["set-cookie"]
        form = browser.get(answer.headers["location"])
        assert "Your session has ended; sign in again to continue." in form.text


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/\\evil"])
def test_sign_in_never_redirects_to_another_site(gateway, tenants, target):
    user = tenants.user(role="user")
    with httpx.Client(base_url=gateway.url, timeout=30, follow_redirects=False) as browser:
        token = re.search(r'name="csrf_token" value="([^"]+)"', browser.get("/login").text)
        answer = browser.post("/login", data={"tenant": user.tenant, "email": user.email, "password": TEST_PASSWORD,
                                              "csrf_token": token.group(1), "next": target})
        assert answer.headers["location"] == "/upload"


def test_static_assets_are_versioned_and_cached_for_good(gateway, tenants):
    user = tenants.user(role="user")
    with sign_in(gateway, user.email) as browser:
        html = browser.get("/upload").text
        urls = re.findall(r'(/static/[a-z]+\.[0-9a-f]{12}\.(?:js|css))', html)
        assert {u.split("/")[-1].split(".")[0] for u in urls} >= {"app", "upload"}
    with httpx.Client(base_url=gateway.url, timeout=30) as anonymous:
        for url in urls:
            answer = anonymous.get(url)
            assert answer.status_code == 200
            assert answer.headers["cache-control"] == "public, max-age=31536000, immutable"
            assert answer.headers["content-type"].startswith(
                "text/javascript" if url.endswith(".js") else "text/css")
        # Unversioned or stale names are not served: a page must name the current file
        assert anonymous.get("/static/app.js").status_code == 404
        assert anonymous.get("/static/app.000000000000.js").status_code == 404


def test_admin_pages_answer_403_to_users(gateway, tenants):
    user = tenants.user(role="user")
    with sign_in(gateway, user.email) as browser:
        for path in ("/admin", "/admin/sources", f"/admin/sources/{uuid.uuid4()}",
                     "/admin/dlq", "/admin/dlq/some-message"):
            answer = browser.get(path)
            assert answer.status_code == 403, path
            assert "text/html" in answer.headers["content-type"]
            assert "Only admins may do this; ask an admin of your tenant." in answer.text
        # A page that does not exist says so as a page, not as JSON
        missing = browser.get("/runs/not-a-run-id")
        assert missing.status_code == 404 and "text/html" in missing.headers["content-type"]
        assert "pick one from the list" in missing.text


@pytest.mark.parametrize(("role", "path"), [("admin", "/admin/dead-letters"),
                                          ("operator", "/admin/dlq")])
def test_the_dead_letters_pages_ask_their_api_for_a_page_it_serves(
        gateway, tenants, conn, queues, role, path):
    # Given a dead letter naming the signed-in person's tenant, moved into the table
    user = tenants.user(role=role)
    body = json.dumps({"tenant_id": str(user.tenant_id), "run_id": str(uuid.uuid4())})
    message_id = ops.to_dlq(queues, body)
    # (the gateway's housekeeping may move it first: then wait for its row)
    dlq.archive(dlq.DeadLetterQueue(queues.client, queues.dlq_url), conn)
    stack.wait_until(lambda: dlq.open_count(conn, user.tenant_id) == 1, timeout=60,
                     message="the dead letter archived")
    with sign_in(gateway, user.email) as browser:
        # When the page's script asks its API for the list, as dlq.js does
        html = browser.get(path).text
        api = re.search(r'data-dlq data-api="([^"]+)"', html).group(1)
        limit = re.search(r'data-dlq [^>]*data-limit="([^"]+)"', html).group(1)
        answer = browser.get(api, params={"limit": limit})
    # Then the API serves it (a limit past the paging bound was a 400: an empty page)
    assert answer.status_code == 200, answer.text
    assert [i["message_id"] for i in answer.json()["items"]] == [message_id]


def test_admin_overview_counts_only_the_admins_own_tenant(gateway, tenants, conn):
    # Given a failed and a queued run in another tenant, and one failed run in ours
    admin = tenants.user(tenant="acme", role="admin")
    other = tenants.user(tenant="globex", role="admin")
    for user, status in ((other, "failed"), (other, "queued"), (admin, "failed")):
        conn.execute(
            "INSERT INTO ingestion_runs (run_id, tenant_id, status, finished_at) "
            "VALUES (%s, %s, %s, CASE WHEN %s = 'failed' THEN now() END)",
            (uuid.uuid4(), user.tenant_id, status, status))

    # When our admin opens the overview
    with sign_in(gateway, admin.email) as browser:
        html = browser.get("/admin").text

    # Then it counts our tenant's runs only
    def figure(name: str) -> str:
        return re.search(rf'data-figure="{name}">([^<]*)<', html).group(1).strip()

    assert figure("failed_24h") == "1"
    assert figure("backlog_count") == "0"


def _document(conn, tenant_id: uuid.UUID, title: str, chunks: list[str]) -> uuid.UUID:
    """A processed document as the worker leaves it: one active version with chunks."""
    doc_id = conn.execute(
        "INSERT INTO documents (tenant_id, source_type, source_uri, title) "
        "VALUES (%s, 'md', %s, %s) RETURNING doc_id",
        (tenant_id, f"upload://sha256:{uuid.uuid4().hex}", title)).fetchone()["doc_id"]
    version_id = conn.execute(
        "INSERT INTO document_versions (tenant_id, doc_id, version_number, content_hash, "
        "embedding_model, embedding_dim, chunk_count, char_count) "
        "VALUES (%s, %s, 1, 'sha256:x', 'm', 384, %s, 100) RETURNING doc_version_id",
        (tenant_id, doc_id, len(chunks))).fetchone()["doc_version_id"]
    for ordinal, text in enumerate(chunks):
        conn.execute(
            "INSERT INTO chunks (tenant_id, doc_version_id, ordinal, text, token_count, "
            "char_start, char_end) VALUES (%s, %s, %s, %s, 5, 0, %s)",
            (tenant_id, version_id, ordinal, text, len(text)))
    return doc_id


def test_document_page_and_admin_deactivation(gateway, tenants, conn):
    # Given a processed document of tenant acme, and one of another tenant
    admin = tenants.user(role="admin")
    user = tenants.user(role="user")
    other = tenants.user(tenant="globex", role="admin")
    chunks = [f"Chunk number {i} of the handbook." for i in range(25)]
    doc_id = _document(conn, admin.tenant_id, "Handbook", chunks)
    foreign = _document(conn, other.tenant_id, "Secret plans", ["Globex only."])

    with sign_in(gateway, admin.email) as browser:
        # The page shows the active version, the chunk count and every chunk, 20 a page
        page = browser.get(f"/documents/{doc_id}")
        assert page.status_code == 200
        assert "Active version" in page.text and ">25</dd>" in page.text
        assert all(c + "<" in page.text for c in chunks[:20])
        assert chunks[20] + "<" not in page.text and "page 1 of 2" in page.text
        rest = browser.get(f"/documents/{doc_id}", params={"page": 2}).text
        assert all(c + "<" in rest for c in chunks[20:]) and chunks[0] + "<" not in rest
        assert 'data-action="deactivate"' in page.text
        # Another tenant's document does not exist here
        assert browser.get(f"/documents/{foreign}").status_code == 404
        listing = browser.get("/documents", params={"search": "hand"}).text
        assert "Handbook" in listing and "Secret plans" not in listing

    # Deactivation is for admins of the document's own tenant
    with gateway.client(user.token) as api:
        assert api.post(f"/v1/documents/{doc_id}/deactivate").status_code == 403
    with gateway.client(other.token) as api:
        assert api.post(f"/v1/documents/{doc_id}/deactivate").status_code == 404
    with gateway.client(admin.token) as api:
        done = api.post(f"/v1/documents/{doc_id}/deactivate")
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "deactivated" and done.json()["version_number"] == 1
        again = api.post(f"/v1/documents/{doc_id}/deactivate")
        assert again.status_code == 409 and "no active version" in again.json()["detail"]
        assert api.get("/v1/documents").json()["total"] == 0

    # The deactivated document stays reachable, says so, and offers Reactivate
    with sign_in(gateway, admin.email) as browser:
        page = browser.get(f"/documents/{doc_id}").text
        assert "This document is not served: version 1 was deactivated" in page
        assert "when the same file is uploaded again" in page
        assert 'data-action="reactivate"' in page and 'data-action="deactivate"' not in page
        assert "Handbook" in browser.get("/documents", params={"status": "inactive"}).text

    row = conn.execute("SELECT is_active, deactivated_at FROM document_versions "
                       "WHERE doc_id = %s", (doc_id,)).fetchone()
    assert row["is_active"] is False and row["deactivated_at"] is not None
    assert conn.execute("SELECT is_active FROM document_versions WHERE doc_id = %s",
                        (foreign,)).fetchone()["is_active"] is True
