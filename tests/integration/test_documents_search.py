"""The documents listing: full-text search over active chunks (ranked, tenant-scoped, paged by
cursor), the Active / Inactive / Failed filter, and an admin's reactivation (docs/decisions/
0115, 0116). Documents and chunks are written as the worker writes them, tsvectors included."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from psycopg.types.json import Jsonb

from tests.integration.test_web import page_csrf, sign_in

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def add_document(conn, tenant_id, title: str, chunks: list[str], *, minutes: int = 0,
                 active: bool = True, source_uri: str | None = None, source_id=None) -> str:
    """A document with one version and its chunks, indexed with the worker's 'english' config."""
    doc_id = uuid.uuid4()
    conn.execute(
        "INSERT INTO documents (doc_id, tenant_id, source_type, source_uri, title, source_id,"
        " created_at) VALUES (%s, %s, 'md', %s, %s, %s, %s)",
        (doc_id, tenant_id, source_uri or f"upload://sha256:{doc_id.hex}", title, source_id,
         T0 + timedelta(minutes=minutes)))
    version = conn.execute(
        "INSERT INTO document_versions (tenant_id, doc_id, version_number, content_hash,"
        " is_active, embedding_model, embedding_dim, chunk_count, deactivated_at)"
        " VALUES (%s, %s, 1, %s, %s, 'm', 384, %s, %s) RETURNING doc_version_id",
        (tenant_id, doc_id, f"sha256:{doc_id.hex}", active, len(chunks),
         None if active else T0)).fetchone()["doc_version_id"]
    for n, text in enumerate(chunks):
        chunk_id = conn.execute(
            "INSERT INTO chunks (tenant_id, doc_version_id, ordinal, text, token_count,"
            " char_start, char_end) VALUES (%s, %s, %s, %s, 5, 0, %s) RETURNING chunk_id",
            (tenant_id, version, n, text, len(text))).fetchone()["chunk_id"]
        conn.execute("INSERT INTO chunk_fts (chunk_id, tenant_id, doc_version_id, tsv)"
                     " VALUES (%s, %s, %s, to_tsvector('english', %s))",
                     (chunk_id, tenant_id, version, text))
    return str(doc_id)


def add_failed_upload(conn, tenant_id, title: str, *, minutes: int = 0) -> tuple[str, str]:
    """A document whose only run failed: no version."""
    doc_id, run_id = uuid.uuid4(), uuid.uuid4()
    conn.execute(
        "INSERT INTO documents (doc_id, tenant_id, source_type, source_uri, title, created_at)"
        " VALUES (%s, %s, 'pdf', %s, %s, %s)",
        (doc_id, tenant_id, f"upload://sha256:{doc_id.hex}", title, T0 + timedelta(minutes=minutes)))
    conn.execute(
        "INSERT INTO ingestion_runs (run_id, tenant_id, doc_id, status, config, error, created_at,"
        " finished_at) VALUES (%s, %s, %s, 'failed', %s, 'extract: the PDF is encrypted.', %s, %s)",
        (run_id, tenant_id, doc_id, Jsonb({"title": title, "original_filename": title}), T0, T0))
    return str(doc_id), str(run_id)


@pytest.fixture
def library(conn, tenants):
    """Three documents that contain "dragonfly" (3, 2 and 1 chunks of it), two that do not, one
    deactivated that does, and another tenant's document that does."""
    admin = tenants.user(role="admin")
    other = tenants.user(tenant="globex", role="admin")
    t = admin.tenant_id
    ids = {
        "many": add_document(conn, t, "field-guide.md", [
            "The dragonfly hunts over ponds.", "A dragonfly larva lives in water.",
            "Dragonflies and the dragonfly nymph."], minutes=1),
        "two": add_document(conn, t, "notes.md", [
            "Insects of the meadow.", "A dragonfly rested on the reed; another dragonfly came."],
            minutes=2),
        "one": add_document(conn, t, "diary.md", ["Saw one dragonfly today.", "Rain later."],
                            minutes=3),
        "bees": add_document(conn, t, "bees.md", ["Bees make honey."], minutes=4),
        "ants": add_document(conn, t, "ants.md", ["Ants carry leaves."], minutes=5),
        "off": add_document(conn, t, "old-dragonfly-notes.md", ["The dragonfly returns at dusk."],
                            minutes=6, active=False),
    }
    add_document(conn, other.tenant_id, "globex-dragonfly.md", ["A dragonfly of Globex."])
    return admin, other, ids


def test_search_finds_words_inside_active_documents_ranked_and_tenant_scoped(gateway, library):
    admin, other, ids = library
    with gateway.client(admin.token) as client:
        # When the tenant searches for a word that is in no title but inside three documents
        found = client.get("/v1/documents", params={"search": "dragonfly"})
        assert found.status_code == 200, found.text
        body = found.json()
        # Then exactly those three are found, the one that says it most first
        assert [d["doc_id"] for d in body["items"]] == [ids["many"], ids["two"], ids["one"]]
        assert body["total"] == 3
        assert body["items"][0]["rank"] > body["items"][1]["rank"] > body["items"][2]["rank"]
        # A title match outranks words inside
        titled = client.get("/v1/documents", params={"search": "bees"}).json()
        assert [d["doc_id"] for d in titled["items"]] == [ids["bees"]]
        # The deactivated document is found among inactive ones only by its title
        inactive = client.get("/v1/documents", params={"search": "dragonfly",
                                                       "status": "inactive"}).json()
        assert [d["doc_id"] for d in inactive["items"]] == [ids["off"]]
    with gateway.client(other.token) as client:
        # And another tenant finds only its own
        theirs = client.get("/v1/documents", params={"search": "dragonfly"}).json()
        assert [d["title"] for d in theirs["items"]] == ["globex-dragonfly.md"]


def test_search_results_page_by_cursor_in_rank_order(gateway, library):
    admin, _, ids = library
    with gateway.client(admin.token) as client:
        seen, cursor = [], None
        while True:
            params = {"search": "dragonfly", "limit": 1, **({"cursor": cursor} if cursor else {})}
            page = client.get("/v1/documents", params=params)
            assert page.status_code == 200, page.text
            seen += [d["doc_id"] for d in page.json()["items"]]
            cursor = page.json()["next_cursor"]
            if not cursor:
                break
        assert seen == [ids["many"], ids["two"], ids["one"]]
        # A cursor is a position (ADR 0200): under another search it pages that search's
        # results from there, and a string of another shape is refused
        first = client.get("/v1/documents", params={"search": "dragonfly", "limit": 1}).json()
        other = client.get("/v1/documents", params={"search": "bees", "limit": 1,
                                                    "cursor": first["next_cursor"]})
        assert other.status_code == 200, other.text
        bad = client.get("/v1/documents", params={"search": "bees", "cursor": "not-a-cursor"})
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_cursor"


def test_filter_by_state_keeps_inactive_and_failed_documents_reachable(gateway, conn, library):
    admin, _, ids = library
    failed_doc, failed_run = add_failed_upload(conn, admin.tenant_id, "broken.pdf", minutes=9)
    with gateway.client(admin.token) as client:
        def listed(status):
            body = client.get("/v1/documents", params={"status": status}).json()
            return {d["doc_id"]: d for d in body["items"]}

        assert set(listed("active")) == {ids[k] for k in ("many", "two", "one", "bees", "ants")}
        assert set(listed("inactive")) == {ids["off"]}
        failed = listed("failed")
        assert set(failed) == {failed_doc}
        assert failed[failed_doc]["state"] == "failed"
        assert failed[failed_doc]["last_run"] == {"run_id": failed_run, "status": "failed"}
        assert len(listed("all")) == 7
        bad = client.get("/v1/documents", params={"status": "deleted"})
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_status"


def test_an_admin_reactivates_a_deactivated_document(gateway, conn, library):
    admin, other, ids = library
    with gateway.client(admin.token) as client:
        done = client.post(f"/v1/documents/{ids['off']}/reactivate")
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "reactivated" and done.json()["version_number"] == 1
        # Then it is served again, and found by the words inside it
        found = client.get("/v1/documents", params={"search": "dusk"}).json()
        assert [d["doc_id"] for d in found["items"]] == [ids["off"]]
        # Twice is a conflict, not a second version
        again = client.post(f"/v1/documents/{ids['off']}/reactivate")
        assert again.status_code == 409 and again.json()["code"] == "conflict"
    row = conn.execute("SELECT is_active, deactivated_at, reactivated_at FROM document_versions"
                       " WHERE doc_id = %s", (ids["off"],)).fetchone()
    assert row["is_active"] and row["deactivated_at"] is not None and row["reactivated_at"]


def test_reactivation_is_refused_to_users_other_tenants_and_forged_requests(gateway, conn,
                                                                            tenants, library):
    admin, other, ids = library
    user = tenants.user(role="user")
    target = f"/v1/documents/{ids['off']}/reactivate"
    with gateway.client(user.token) as client:
        assert client.post(target).status_code == 403
    with gateway.client(other.token) as client:
        assert client.post(target).status_code == 404
    # A signed-in browser without the CSRF header (another site's form) is refused too
    with sign_in(gateway, admin.email) as browser:
        assert browser.post(target).status_code == 403
        ok = browser.post(target, headers={"X-CSRF-Token": page_csrf(browser)})
        assert ok.status_code == 200, ok.text
    # Nothing changed on the refusals: one reactivation, by the admin with the header
    assert conn.execute("SELECT count(*) AS n FROM document_versions WHERE doc_id = %s"
                        " AND is_active", (ids["off"],)).fetchone()["n"] == 1


def test_a_document_without_a_version_cannot_be_reactivated(gateway, conn, library):
    admin, _, _ = library
    failed_doc, _ = add_failed_upload(conn, admin.tenant_id, "broken.pdf")
    with gateway.client(admin.token) as client:
        refused = client.post(f"/v1/documents/{failed_doc}/reactivate")
    assert refused.status_code == 409 and "run" in refused.json()["detail"]
