"""Reading runs and documents: shapes, filters, paging, tenant isolation, docs and health."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from psycopg.types.json import Jsonb

from tests.integration.test_upload import add_active_version, sha, upload

# §4.2 fields, plus where a running job is.
RUN_FIELDS = {"run_id", "tenant_id", "status", "run_type", "created_at", "started_at",
              "finished_at", "config", "stats", "error", "stage", "progress"}
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def insert_run(conn, tenant_id, *, status="queued", minutes: int = 0, doc_id=None,
               stage=None, progress=0.0) -> str:
    """A run created ``minutes`` after T0, written directly as the worker would leave it."""
    run_id = uuid.uuid4()
    created = T0 + timedelta(minutes=minutes)
    started = created + timedelta(seconds=2) if status != "queued" else None
    finished = created + timedelta(seconds=7) if status in ("succeeded", "failed") else None
    conn.execute(
        "INSERT INTO ingestion_runs (run_id, tenant_id, doc_id, status, config, stats, error,"
        " stage, progress, created_at, started_at, updated_at, finished_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (run_id, tenant_id, doc_id, status, Jsonb({"title": f"run {minutes}"}),
         Jsonb({"chunks_created": 3} if status == "succeeded" else {}),
         "extract: the PDF is encrypted." if status == "failed" else None, stage, progress,
         created, started, started or created, finished))
    return str(run_id)


def insert_document(conn, tenant_id, title: str, *, minutes: int = 0, versions: int = 1,
                    active: bool = True) -> str:
    """A document with ``versions`` versions; the newest is active when ``active``."""
    doc_id = uuid.uuid4()
    conn.execute(
        "INSERT INTO documents (doc_id, tenant_id, source_type, source_uri, title, created_at)"
        " VALUES (%s, %s, 'txt', %s, %s, %s)",
        (doc_id, tenant_id, f"upload://sha256:{doc_id.hex}", title, T0 + timedelta(minutes=minutes)))
    for n in range(1, versions + 1):
        is_active = active and n == versions
        conn.execute(
            "INSERT INTO document_versions (tenant_id, doc_id, version_number, content_hash,"
            " is_active, embedding_model, embedding_dim, chunk_count, deactivated_at)"
            " VALUES (%s, %s, %s, %s, %s, 'm', 384, %s, %s)",
            (tenant_id, doc_id, n, f"sha256:{n:064x}", is_active, n * 10,
             None if is_active else T0))
    return str(doc_id)


# ── runs ────────────────────────────────────────────────────────────────────────────────────
def test_get_run_has_the_spec_fields(gateway, tenants, conn):
    # Given an uploaded file
    user = tenants.user(role="user")
    data = b"Hello runs.\n" * 10
    with gateway.client(user.token) as client:
        accepted = upload(client, "hello.txt", data, title="Hello").json()
        # When its run is read
        response = client.get(f"/v1/ingestion-runs/{accepted['run_id']}")

    # Then it carries the §4.2 fields and where it stands
    assert response.status_code == 200, response.text
    run = response.json()
    assert set(run) >= RUN_FIELDS, RUN_FIELDS - set(run)
    assert run["run_id"] == accepted["run_id"] and run["tenant_id"] == str(user.tenant_id)
    assert run["status"] == "queued" and run["run_type"] == "manual_upload"
    assert run["started_at"] is None and run["finished_at"] is None and run["error"] is None
    assert run["stage"] is None and run["progress"] == 0
    assert datetime.fromisoformat(run["created_at"]).tzinfo is not None
    config = run["config"]
    assert config["source_type"] == "upload" and config["title"] == "Hello"
    assert config["original_filename"] == "hello.txt" and config["content_type"] == "text/plain"
    assert config["file_size_bytes"] == len(data) and config["content_hash"] == sha(data)
    assert config["created_by_user_id"] == str(user.user_id)
    assert config["upload_uri"].startswith("file://")


def test_get_running_run_shows_stage_and_progress(gateway, tenants, conn):
    user = tenants.user(role="user")
    run_id = insert_run(conn, user.tenant_id, status="running", stage="embed", progress=0.5)
    with gateway.client(user.token) as client:
        run = client.get(f"/v1/ingestion-runs/{run_id}").json()
    assert run["status"] == "running" and run["stage"] == "embed" and run["progress"] == 0.5
    assert run["started_at"] is not None and run["finished_at"] is None


def test_get_unknown_run_is_404(gateway, tenants):
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        response = client.get(f"/v1/ingestion-runs/{uuid.uuid4()}")
    assert response.status_code == 404 and response.json()["code"] == "not_found"


def test_list_runs_is_newest_first_with_paging(gateway, tenants, conn):
    # Given five runs created a minute apart
    user = tenants.user(role="user")
    ids = [insert_run(conn, user.tenant_id, minutes=m) for m in range(5)]
    newest_first = ids[::-1]

    # When they are listed two per page
    with gateway.client(user.token) as client:
        pages = [client.get("/v1/ingestion-runs", params={"page": p, "limit": 2}).json()
                 for p in (1, 2, 3, 4)]

    # Then the pages walk them newest first and report the total
    assert [[r["run_id"] for r in page["items"]] for page in pages] == [
        newest_first[0:2], newest_first[2:4], newest_first[4:5], []]
    assert [(p["page"], p["limit"]) for p in pages] == [(1, 2), (2, 2), (3, 2), (4, 2)]
    assert [p["total"] for p in pages[:3]] == [5, 5, 5]


def test_list_runs_filters_by_status(gateway, tenants, conn):
    # Given runs in every status
    user = tenants.user(role="user")
    by_status = {s: insert_run(conn, user.tenant_id, status=s, minutes=i)
                 for i, s in enumerate(("queued", "running", "succeeded", "failed"))}
    extra_failed = insert_run(conn, user.tenant_id, status="failed", minutes=10)

    # When only the failed ones are asked for
    with gateway.client(user.token) as client:
        body = client.get("/v1/ingestion-runs", params={"status": "failed"}).json()

    # Then only they come back, with their reasons
    assert [r["run_id"] for r in body["items"]] == [extra_failed, by_status["failed"]]
    assert body["total"] == 2
    assert all(r["status"] == "failed" and r["error"] for r in body["items"])


@pytest.mark.parametrize("params", [{"status": "done"}, {"limit": 0}, {"limit": 101},
                                    {"page": 0}, {"limit": "ten"}],
                         ids=["unknown_status", "limit_0", "limit_101", "page_0", "limit_text"])
def test_list_runs_with_invalid_parameters_is_400(gateway, tenants, params):
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        response = client.get("/v1/ingestion-runs", params=params)
    assert response.status_code == 400, response.text
    body = response.json()
    # Paging parameters have a code of their own (docs/decisions/0050).
    expected = "invalid_request" if "status" in params else "invalid_paging"
    assert body["code"] == expected and body["detail"]


def test_list_runs_limit_bounds_are_inclusive(gateway, tenants, conn):
    user = tenants.user(role="user")
    insert_run(conn, user.tenant_id)
    with gateway.client(user.token) as client:
        for limit in (1, 100):
            response = client.get("/v1/ingestion-runs", params={"limit": limit})
            assert response.status_code == 200, response.text
            assert response.json()["total"] == 1


# ── documents ───────────────────────────────────────────────────────────────────────────────
def test_documents_list_only_those_with_an_active_version(gateway, tenants, conn):
    # Given a processed document, one still queued (no version) and one deactivated
    user = tenants.user(role="user")
    processed = insert_document(conn, user.tenant_id, "Processed", minutes=1)
    insert_document(conn, user.tenant_id, "Queued only", minutes=2, versions=0)
    insert_document(conn, user.tenant_id, "Deactivated", minutes=3, active=False)
    newer = insert_document(conn, user.tenant_id, "Processed twice", minutes=4, versions=2)

    # When documents are listed
    with gateway.client(user.token) as client:
        body = client.get("/v1/documents").json()

    # Then only the ones with active content appear, newest first, with their active version
    assert [d["doc_id"] for d in body["items"]] == [newer, processed]
    assert body["total"] == 2
    active = body["items"][0]["active_version"]
    assert active["version_number"] == 2 and active["chunk_count"] == 20


def test_an_upload_becomes_a_listed_document_once_it_has_a_version(gateway, tenants, conn):
    # Given an uploaded file whose run is still queued
    user = tenants.user(role="user")
    data = b"Listed later.\n"
    with gateway.client(user.token) as client:
        accepted = upload(client, "later.txt", data).json()
        assert client.get("/v1/documents").json()["items"] == []
        # When the worker writes its version
        add_active_version(conn, tenant_id=user.tenant_id, doc_id=accepted["doc_id"],
                           run_id=accepted["run_id"], content_hash=sha(data))
        # Then it is listed
        items = client.get("/v1/documents").json()["items"]
    assert [d["doc_id"] for d in items] == [accepted["doc_id"]]
    assert items[0]["active_version"]["content_hash"] == sha(data)


def test_document_search_matches_titles_case_insensitively(gateway, tenants, conn):
    user = tenants.user(role="user")
    report = insert_document(conn, user.tenant_id, "Annual REPORT 2024", minutes=1)
    budget = insert_document(conn, user.tenant_id, "annual budget", minutes=2)
    insert_document(conn, user.tenant_id, "Quarterly plan", minutes=3)
    insert_document(conn, user.tenant_id, "Annual draft", minutes=4, versions=0)
    with gateway.client(user.token) as client:
        body = client.get("/v1/documents", params={"search": "ANNUAL"}).json()
    assert [d["doc_id"] for d in body["items"]] == [budget, report]
    assert body["total"] == 2


@pytest.mark.parametrize(("search", "title", "decoy"), [
    ("100%", "100% coverage plan", "100 coverage plan"),
    ("snake_case", "snake_case guide", "snakeXcase guide"),
    ("a\\b", "path a\\b notes", "path ab notes"),
], ids=["percent", "underscore", "backslash"])
def test_document_search_treats_wildcards_literally(gateway, tenants, conn, search, title,
                                                   decoy):
    # Given a title with a LIKE wildcard and a decoy the wildcard would also match
    user = tenants.user(role="user")
    wanted = insert_document(conn, user.tenant_id, title, minutes=1)
    insert_document(conn, user.tenant_id, decoy, minutes=2)
    # When searching for the literal text
    with gateway.client(user.token) as client:
        body = client.get("/v1/documents", params={"search": search}).json()
    # Then only the literal match comes back
    assert [d["doc_id"] for d in body["items"]] == [wanted]


def test_documents_paging(gateway, tenants, conn):
    user = tenants.user(role="user")
    ids = [insert_document(conn, user.tenant_id, f"doc {i}", minutes=i) for i in range(3)]
    with gateway.client(user.token) as client:
        first = client.get("/v1/documents", params={"limit": 2}).json()
        second = client.get("/v1/documents", params={"limit": 2, "page": 2}).json()
        bad = client.get("/v1/documents", params={"limit": 101})
    assert [d["doc_id"] for d in first["items"] + second["items"]] == ids[::-1]
    assert first["total"] == second["total"] == 3
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_paging"


def test_get_document_lists_versions_with_the_active_one_marked(gateway, tenants, conn):
    # Given a document processed three times
    user = tenants.user(role="user")
    doc_id = insert_document(conn, user.tenant_id, "Handbook", versions=3)
    # When it is read
    with gateway.client(user.token) as client:
        response = client.get(f"/v1/documents/{doc_id}")
    # Then its versions come newest first and only the newest is active
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["doc_id"] == doc_id and doc["title"] == "Handbook"
    assert [(v["version_number"], v["is_active"]) for v in doc["versions"]] == [
        (3, True), (2, False), (1, False)]
    assert doc["versions"][0]["deactivated_at"] is None
    assert all(v["deactivated_at"] for v in doc["versions"][1:])


def test_get_unknown_document_is_404(gateway, tenants):
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        response = client.get(f"/v1/documents/{uuid.uuid4()}")
    assert response.status_code == 404 and response.json()["code"] == "not_found"


# ── tenant isolation ────────────────────────────────────────────────────────────────────────
def test_tenant_cannot_read_another_tenants_run_or_document(gateway, tenants, conn):
    # Given tenant B's upload, processed
    a, b = tenants.user(tenant="alpha"), tenants.user(tenant="beta")
    data = b"Beta's secret plan.\n"
    with gateway.client(b.token) as client:
        theirs = upload(client, "plan.txt", data).json()
    add_active_version(conn, tenant_id=b.tenant_id, doc_id=theirs["doc_id"],
                       run_id=theirs["run_id"], content_hash=sha(data))

    # When tenant A asks for it by id
    with gateway.client(a.token) as client:
        run = client.get(f"/v1/ingestion-runs/{theirs['run_id']}")
        doc = client.get(f"/v1/documents/{theirs['doc_id']}")

    # Then it does not exist for them (404, indistinguishable from a missing id)
    for response in (run, doc):
        assert response.status_code == 404, response.text
        assert response.json()["code"] == "not_found"
    # while tenant B reads both
    with gateway.client(b.token) as client:
        assert client.get(f"/v1/ingestion-runs/{theirs['run_id']}").status_code == 200
        assert client.get(f"/v1/documents/{theirs['doc_id']}").status_code == 200


def test_lists_never_include_another_tenants_rows(gateway, tenants, conn):
    # Given runs and documents in two tenants, with the same title in both
    a, b = tenants.user(tenant="alpha"), tenants.user(tenant="beta")
    mine_run = insert_run(conn, a.tenant_id, status="failed")
    insert_run(conn, b.tenant_id, status="failed", minutes=1)
    mine_doc = insert_document(conn, a.tenant_id, "Roadmap")
    insert_document(conn, b.tenant_id, "Roadmap", minutes=1)

    # When tenant A lists, filters and searches
    with gateway.client(a.token) as client:
        runs = client.get("/v1/ingestion-runs").json()
        failed = client.get("/v1/ingestion-runs", params={"status": "failed"}).json()
        docs = client.get("/v1/documents").json()
        found = client.get("/v1/documents", params={"search": "roadmap"}).json()

    # Then only A's rows come back, and the totals count only A's
    for body, expected in ((runs, mine_run), (failed, mine_run), (docs, mine_doc),
                           (found, mine_doc)):
        ids = [item.get("run_id") or item.get("doc_id") for item in body["items"]]
        assert ids == [expected] and body["total"] == 1
    assert all(r["tenant_id"] == str(a.tenant_id) for r in runs["items"])


# ── docs and health ─────────────────────────────────────────────────────────────────────────
def test_openapi_schema_lists_the_upload_route(gateway):
    with gateway.client() as client:
        response = client.get("/schema/openapi.json")
    assert response.status_code == 200, response.text
    paths = response.json()["paths"]
    assert "post" in paths["/v1/ingest"]
    assert {"/v1/ingestion-runs", "/v1/documents", "/v1/auth/login"} <= set(paths)


def test_health_live_needs_no_token(gateway):
    with gateway.client() as client:
        response = client.get("/health/live")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_health_ready_checks_database_queue_store_and_model(gateway):
    with gateway.client() as client:
        response = client.get("/health/ready")
    assert response.status_code == 200, response.text
    # The suite's gateways load the query model on first use (SEARCH_MODEL_AT_START=false)
    assert response.json() == {"status": "ok", "checks": {
        "database": "ok", "queue": "ok", "object_store": "ok", "event_writer": "ok",
        "query_model": "on first use"}}


def test_responses_carry_a_request_id(gateway):
    with gateway.client() as client:
        given = client.get("/health/live", headers={"X-Request-ID": "abc-123"})
        fresh = client.get("/health/live")
    assert given.headers["x-request-id"] == "abc-123"
    assert len(fresh.headers["x-request-id"]) == 32
