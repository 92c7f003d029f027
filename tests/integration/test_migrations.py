"""Migrations apply once, concurrently, append-only; the schema and the run state machine."""

from __future__ import annotations

import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import errors as pg_errors

from shared import db
from shared.db import migrate


@pytest.fixture
def fresh_database(pg) -> Iterator[str]:
    """An empty database on the test server (no template, no migrations)."""
    name = f"fresh_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg.url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield pg.url(name)
    with psycopg.connect(pg.url(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def applied_versions(url: str) -> list[str]:
    with db.connect(url) as conn:
        return [r["version"] for r in conn.execute(
            "SELECT version FROM schema_migrations ORDER BY version")]


# ── applying ────────────────────────────────────────────────────────────────────────────────
def test_applying_again_is_a_no_op(database_url):
    # Given a migrated database (cloned from the template)
    before = applied_versions(database_url)
    assert before == [m.version for m in migrate.discover()]
    # When migrations are applied again, Then nothing is applied and nothing changes
    assert migrate.apply(database_url) == []
    assert applied_versions(database_url) == before


def test_two_concurrent_migrators_on_a_fresh_database_both_succeed(fresh_database):
    # Given an empty database and two processes that migrate on start at the same moment
    results: list[object] = [None, None]
    start = threading.Barrier(2)

    def migrate_one(i: int) -> None:
        start.wait()
        try:
            results[i] = migrate.apply(fresh_database)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            results[i] = exc

    threads = [threading.Thread(target=migrate_one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    # Then both succeed, one applied everything and the other found nothing to do
    every = [m.version for m in migrate.discover()]
    assert not any(isinstance(r, Exception) for r in results), results
    assert sorted(results, key=len) == [[], every], results  # type: ignore[arg-type]
    # and each version is recorded once
    assert applied_versions(fresh_database) == every


def test_a_migration_changed_after_it_was_applied_is_refused(fresh_database, tmp_path: Path):
    # Given migrations applied from a folder
    folder = tmp_path / "migrations"
    shutil.copytree(migrate.DEFAULT_DIR, folder)
    migrate.apply(fresh_database, folder)
    # When an applied file is edited
    first = sorted(folder.glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- a harmless-looking edit\n")
    # Then applying again is refused and says what to do instead
    with pytest.raises(migrate.MigrationError, match="changed after it was applied.*new migration"):
        migrate.apply(fresh_database, folder)


def test_a_new_migration_is_applied_after_the_others(fresh_database, tmp_path: Path):
    folder = tmp_path / "migrations"
    shutil.copytree(migrate.DEFAULT_DIR, folder)
    migrate.apply(fresh_database, folder)
    (folder / "9999_extra.sql").write_text("CREATE TABLE extra (id int);")
    assert migrate.apply(fresh_database, folder) == ["9999"]
    assert applied_versions(fresh_database)[-1] == "9999"


def test_a_failing_migration_leaves_no_trace(fresh_database, tmp_path: Path):
    # Given a new migration that fails half-way
    folder = tmp_path / "migrations"
    shutil.copytree(migrate.DEFAULT_DIR, folder)
    migrate.apply(fresh_database, folder)
    (folder / "9999_broken.sql").write_text("CREATE TABLE half (id int); SELECT 1/0;")
    # When it is applied, Then it raises and neither its table nor its record remains
    with pytest.raises(psycopg.Error):
        migrate.apply(fresh_database, folder)
    with db.connect(fresh_database) as conn:
        assert conn.execute("SELECT to_regclass('half') AS t").fetchone()["t"] is None
    assert "9999" not in applied_versions(fresh_database)


# ── the schema the spec requires ────────────────────────────────────────────────────────────
def indexes(conn) -> dict[str, str]:
    return {r["indexname"]: r["indexdef"] for r in conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'")}


def test_schema_has_the_required_tables(conn):
    tables = {r["table_name"] for r in conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")}
    assert {"tenants", "users", "ingestion_sources", "source_objects", "documents",
            "document_versions", "ingestion_runs", "job_outbox", "chunks", "chunk_embeddings",
            "chunk_fts", "schema_migrations"} <= tables


def test_schema_has_the_required_indexes(conn):
    idx = indexes(conn)
    one_active = idx["idx_doc_versions_one_active"]
    assert "UNIQUE" in one_active and "(tenant_id, doc_id)" in one_active
    assert "WHERE (is_active = true)" in one_active
    assert "USING hnsw (embedding halfvec_cosine_ops)" in idx["idx_chunk_embeddings_hnsw"]
    assert "USING gin (tsv)" in idx["idx_chunk_fts_gin"]
    assert "UNIQUE" in idx["idx_documents_source_uri"]
    assert "(tenant_id, source_uri)" in idx["idx_documents_source_uri"]
    assert "WHERE (is_active = true)" in idx["idx_doc_versions_dedup"]
    assert "(status, updated_at)" in idx["idx_ingestion_runs_stale"]
    assert "(tenant_id, status)" in idx["idx_ingestion_runs_tenant_status"]


def test_document_identity_is_unique_per_tenant(conn, tenants):
    # Given a document in tenant A
    a, b = tenants.user(tenant="alpha"), tenants.user(tenant="beta")
    insert = ("INSERT INTO documents (tenant_id, source_type, source_uri, title) "
              "VALUES (%s, 'txt', 'upload://sha256:abc', 't')")
    conn.execute(insert, (a.tenant_id,))
    # Then the same identity is allowed in tenant B but not twice in A
    conn.execute(insert, (b.tenant_id,))
    with pytest.raises(pg_errors.UniqueViolation):
        conn.execute(insert, (a.tenant_id,))


def test_a_document_has_at_most_one_active_version(conn, tenants):
    user = tenants.user()
    doc_id = conn.execute(
        "INSERT INTO documents (tenant_id, source_type, source_uri, title) "
        "VALUES (%s, 'txt', 'upload://x', 't') RETURNING doc_id", (user.tenant_id,)
    ).fetchone()["doc_id"]
    insert = ("INSERT INTO document_versions (tenant_id, doc_id, version_number, content_hash,"
              " is_active, embedding_model, embedding_dim) VALUES (%s, %s, %s, 'h', %s, 'm', 384)")
    conn.execute(insert, (user.tenant_id, doc_id, 1, True))
    conn.execute(insert, (user.tenant_id, doc_id, 2, False))
    with pytest.raises(pg_errors.UniqueViolation):
        conn.execute(insert, (user.tenant_id, doc_id, 3, True))


# ── the run state machine (the transition trigger) ──────────────────────────────────────────
@pytest.fixture
def new_run(conn, tenants):
    tenant_id = tenants.user().tenant_id

    def make(*path: str) -> uuid.UUID:
        """A run walked through ``path`` of statuses (the first is how it is inserted)."""
        run_id = uuid.uuid4()
        conn.execute("INSERT INTO ingestion_runs (run_id, tenant_id, status) VALUES (%s, %s, %s)",
                     (run_id, tenant_id, path[0]))
        for status in path[1:]:
            set_status(conn, run_id, status)
        return run_id

    return make


def set_status(conn, run_id, status: str) -> None:
    conn.execute("UPDATE ingestion_runs SET status = %s WHERE run_id = %s", (status, run_id))


def status_of(conn, run_id) -> str:
    return conn.execute("SELECT status FROM ingestion_runs WHERE run_id = %s",
                        (run_id,)).fetchone()["status"]


@pytest.mark.parametrize(("path", "target"), [
    (("queued", "running", "succeeded"), "running"),
    (("queued", "running", "succeeded"), "failed"),
    (("queued", "running", "succeeded"), "queued"),
    (("queued", "failed"), "running"),
    (("queued", "failed"), "succeeded"),
    (("queued",), "succeeded"),
    (("queued", "running"), "queued"),
], ids=["succeeded_to_running", "succeeded_to_failed", "succeeded_to_queued", "failed_to_running",
        "failed_to_succeeded", "queued_to_succeeded", "running_to_queued"])
def test_trigger_rejects_invalid_transition(conn, new_run, path, target):
    run_id = new_run(*path)
    with pytest.raises(pg_errors.CheckViolation, match="invalid run transition|cannot change"):
        set_status(conn, run_id, target)
    assert status_of(conn, run_id) == path[-1]


def test_succeeded_run_cannot_change_at_all(conn, new_run):
    run_id = new_run("queued", "running", "succeeded")
    with pytest.raises(pg_errors.CheckViolation):
        conn.execute("UPDATE ingestion_runs SET status = 'succeeded', error = 'x' "
                     "WHERE run_id = %s", (run_id,))


@pytest.mark.parametrize("path", [
    ("queued", "running", "succeeded"),
    ("queued", "running", "failed"),
    ("queued", "failed"),
    ("queued", "running", "running"),
], ids=["queued_running_succeeded", "queued_running_failed", "queued_failed", "takeover"])
def test_trigger_allows_valid_transitions(conn, new_run, path):
    run_id = new_run(*path)
    assert status_of(conn, run_id) == path[-1]


def test_failed_run_reopens_only_when_the_transaction_declares_it(conn, new_run):
    # Given a failed run
    run_id = new_run("queued", "failed")

    # When it is set back to queued without declaring the reopen, Then it is refused
    with pytest.raises(pg_errors.CheckViolation):
        set_status(conn, run_id, "queued")
    # and declaring another run's reopen does not help
    with pytest.raises(pg_errors.CheckViolation), conn.transaction():
        conn.execute("SELECT set_config('ingest.reopen_run', %s, true)", (str(uuid.uuid4()),))
        set_status(conn, run_id, "queued")
    assert status_of(conn, run_id) == "failed"

    # When the same transaction declares the reopen of this run, Then it is queued again
    with conn.transaction():
        conn.execute(f"SET LOCAL ingest.reopen_run = '{run_id}'")
        set_status(conn, run_id, "queued")
    assert status_of(conn, run_id) == "queued"

    # and the declaration ended with its transaction: failing and reopening again is refused
    set_status(conn, run_id, "failed")
    with pytest.raises(pg_errors.CheckViolation):
        set_status(conn, run_id, "queued")


def test_one_key_of_ids_keeps_stored_records_and_their_links(fresh_database, tmp_path: Path):
    """Migration 0300 swaps judgments' and plaintiffs' keys under stored, linked rows (an
    upgrade, not a fresh install): the rows and links stay, and the links still refuse another
    tenant's row and go with their judgment."""
    # Given a database migrated up to just before 0300, holding a tenant's linked records
    folder = tmp_path / "migrations"
    shutil.copytree(migrate.DEFAULT_DIR, folder)
    later = [p for p in folder.glob("*.sql") if p.name.split("_")[0] >= "0300"]
    held = {p: p.read_text() for p in later}
    for path in later:
        path.unlink()
    migrate.apply(fresh_database, folder)
    with db.connect(fresh_database, autocommit=True) as conn:
        a, b = (conn.execute("INSERT INTO tenants (name) VALUES (%s) RETURNING tenant_id",
                             (name,)).fetchone()["tenant_id"] for name in ("acme", "globex"))
        judgment = conn.execute(
            "INSERT INTO judgments (tenant_id, case_number, plaintiff_name, defendant_name, "
            "amount, filed_date) VALUES (%s, 'CV-1', 'Acme', 'Doe', 1, '2024-01-15') "
            "RETURNING id", (a,)).fetchone()["id"]
        plaintiff = conn.execute(
            "INSERT INTO plaintiffs (tenant_id, name, address_line1, zip, source) "
            "VALUES (%s, 'Acme LLC', '1 Main St', '10001', 'manual') RETURNING id",
            (a,)).fetchone()["id"]
        link = ("INSERT INTO plaintiff_judgments (tenant_id, plaintiff_id, judgment_id) "
                "VALUES (%s, %s, %s)")
        conn.execute(link, (a, plaintiff, judgment))

    # When 0300 and the rest are applied
    for path, text in held.items():
        path.write_text(text)
    assert migrate.apply(fresh_database, folder)[0] == "0300"

    # Then the link is there, another tenant still cannot link to the rows, and deleting the
    # judgment takes its link
    with db.connect(fresh_database, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) AS n FROM plaintiff_judgments WHERE tenant_id = %s",
                            (a,)).fetchone()["n"] == 1
        with pytest.raises(pg_errors.ForeignKeyViolation):
            conn.execute(link, (b, plaintiff, judgment))
        conn.execute("DELETE FROM judgments WHERE tenant_id = %s AND id = %s", (a, judgment))
        assert conn.execute("SELECT count(*) AS n FROM plaintiff_judgments WHERE tenant_id = %s",
                            (a,)).fetchone()["n"] == 0
