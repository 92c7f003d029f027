"""POST /v1/ingest with ``doc_id``: an upload as a new version of a document of the tenant.

What reaches the worker is checked here (run, job, document identity); that the worker turns it
into version 2 with version 1 superseded is tests/e2e/test_upload_versions.py.
"""

from __future__ import annotations

import orjson
import pytest

from tests.integration.test_upload import (
    assert_error,
    counts,
    receive_all,
    run_row,
    sha,
    stored_files,
    upload,
    upload_root,
)
from tests.integration.test_upload_form import form, post_form

V1 = b"# Notes\n\nFirst draft of the team notes.\n"
V2 = b"# Notes\n\nSecond draft: the edited team notes.\n"


def new_version(client, doc_id: str, data: bytes, *, name: str = "notes.md",
                title: str | None = None, doc_id_first: bool = True):
    """Upload ``data`` as a new version of ``doc_id``, with doc_id before or after the file."""
    fields = [(b"doc_id", None, doc_id.encode())]
    if title is not None:
        fields.append((b"title", None, title.encode()))
    file_part = (b"file", name.encode(), data)
    parts = [*fields, file_part] if doc_id_first else [file_part, *fields]
    return post_form(client, form(*parts))


def document(conn, doc_id):
    return conn.execute("SELECT * FROM documents WHERE doc_id = %s", (doc_id,)).fetchone()


@pytest.mark.parametrize("doc_id_first", [True, False], ids=["doc_id_first", "doc_id_last"])
def test_an_edited_file_becomes_a_new_run_of_the_same_document(gateway, tenants, conn, queues,
                                                               doc_id_first):
    # Given notes.md uploaded with a title, its run still queued
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        first = upload(client, "notes.md", V1, title="Team notes").json()

        # When the edited notes.md is uploaded naming that document (doc_id before or after
        # the file part: field order does not matter)
        response = new_version(client, first["doc_id"], V2, doc_id_first=doc_id_first)

    # Then a second run is queued for the same document, not a second document
    assert response.status_code == 202, response.text
    second = response.json()
    assert second["doc_id"] == first["doc_id"] and second["run_id"] != first["run_id"]
    assert counts(conn)["documents"] == 1 and counts(conn)["ingestion_runs"] == 2
    # and the document keeps its title, and is no longer found by its first bytes (ADR 0045)
    doc = document(conn, first["doc_id"])
    assert doc["title"] == "Team notes"
    assert doc["source_uri"] == f"upload://doc:{first['doc_id']}"
    # and the job the worker receives names that document and the new bytes
    jobs = {j["run_id"]: j for j in (orjson.loads(m.body) for m in receive_all(queues, 2))}
    job = jobs[second["run_id"]]
    assert job["doc_id"] == first["doc_id"] and job["content_hash"] == sha(V2)
    assert job["title"] == "Team notes" and job["source_uri"] == doc["source_uri"]
    assert run_row(conn, second["run_id"])["config"]["content_hash"] == sha(V2)


def test_a_new_version_with_a_title_renames_the_document(gateway, tenants, conn):
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        first = upload(client, "notes.md", V1).json()
        # When a new version comes with a title
        response = new_version(client, first["doc_id"], V2, title="Notes, edited")
    # Then the document takes that title
    assert response.status_code == 202, response.text
    assert document(conn, first["doc_id"])["title"] == "Notes, edited"


def test_the_same_bytes_while_their_run_is_queued_point_at_that_run(gateway, tenants, conn,
                                                                   stack_env):
    # Given a new version of a document whose run is still queued
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        first = upload(client, "notes.md", V1).json()
        queued = new_version(client, first["doc_id"], V2).json()
        before, files = counts(conn), stored_files(upload_root(stack_env))

        # When the same bytes are sent again as a version of that document
        again = new_version(client, first["doc_id"], V2)

    # Then it is skipped and names the run already doing the work; nothing new is kept
    assert again.status_code == 200, again.text
    assert again.json() == {"doc_id": first["doc_id"], "status": "skipped",
                            "reason": "already being ingested by another run",
                            "run_id": queued["run_id"]}
    assert counts(conn) == before and stored_files(upload_root(stack_env)) == files


def test_first_bytes_of_a_versioned_document_make_a_new_document(gateway, tenants, conn):
    # Given notes.md whose edited version was uploaded by doc_id
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        first = upload(client, "notes.md", V1).json()
        assert new_version(client, first["doc_id"], V2).status_code == 202

        # When someone uploads the old notes.md again, without doc_id
        old = upload(client, "notes.md", V1)

    # Then it does not silently turn the edited document back: it is a document of its own
    assert old.status_code == 202, old.text
    assert old.json()["doc_id"] != first["doc_id"]
    assert document(conn, old.json()["doc_id"])["source_uri"] == f"upload://{sha(V1)}"


def _assert_nothing_new(conn, stack_env, before, files) -> None:
    assert counts(conn) == before
    assert stored_files(upload_root(stack_env)) == files


def test_another_tenants_document_is_not_found_and_nothing_is_stored(gateway, tenants, conn,
                                                                     stack_env):
    # Given a document of tenant beta
    owner, intruder = tenants.user(tenant="beta"), tenants.user(tenant="alpha")
    with gateway.client(owner.token) as client:
        theirs = upload(client, "notes.md", V1).json()
    before, files = counts(conn), stored_files(upload_root(stack_env))

    # When a user of tenant alpha uploads a file naming beta's document
    with gateway.client(intruder.token) as client:
        response = new_version(client, theirs["doc_id"], b"# Overwritten by alpha\n")

    # Then the document is not found (as if it did not exist), and nothing is stored
    assert_error(response, 404, "document_not_found")
    _assert_nothing_new(conn, stack_env, before, files)
    assert document(conn, theirs["doc_id"])["source_uri"] == f"upload://{sha(V1)}"


def test_an_unknown_document_is_not_found_and_nothing_is_stored(gateway, tenants, conn,
                                                                stack_env):
    user = tenants.user(role="user")
    # Given no document with this id, When a file names it
    with gateway.client(user.token) as client:
        response = new_version(client, "3f2c1d4e-0000-4000-8000-000000000000", V2)
    # Then it is not found, and nothing is stored
    assert_error(response, 404, "document_not_found")
    _assert_nothing_new(conn, stack_env, dict.fromkeys(counts(conn), 0), [])


def test_a_document_of_an_s3_source_is_versioned_only_by_its_sync(gateway, tenants, conn,
                                                                  stack_env):
    # Given a document that an S3 source's sync created (written here as the sync writes it)
    user = tenants.user(role="admin")
    source_id = conn.execute(
        "INSERT INTO ingestion_sources (tenant_id, name, bucket) VALUES (%s, 'docs', 'acme-docs')"
        " RETURNING source_id", (user.tenant_id,)).fetchone()["source_id"]
    doc_id = conn.execute(
        "INSERT INTO documents (tenant_id, source_type, source_uri, title, source_id) "
        "VALUES (%s, 'md', 's3://acme-docs/notes.md', 'notes.md', %s) RETURNING doc_id",
        (user.tenant_id, source_id)).fetchone()["doc_id"]
    before = counts(conn)

    # When a user uploads a file naming that document
    with gateway.client(user.token) as client:
        response = new_version(client, str(doc_id), V2)

    # Then it is refused: the bucket is the document's source of truth; nothing is stored
    body = assert_error(response, 409, "document_versioned_by_sync")
    assert "S3" in body["detail"]
    _assert_nothing_new(conn, stack_env, before, [])
    assert document(conn, doc_id)["source_uri"] == "s3://acme-docs/notes.md"
