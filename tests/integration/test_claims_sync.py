"""Claims of docs/decisions/0020, 0021 and 0022 about S3 sources, each against a real gateway,
Postgres and moto: a document another live source lists survives a DELETE; an excluded key is
deactivated; a document that became active again after its key was deleted is deactivated
again; a sync whose heartbeat cannot be written stops; a trigger fails a row left behind.

Runs are "processed" with s3sync.settle_runs where a test needs active versions; its docstring
says why that cannot change these verdicts."""

from __future__ import annotations

import uuid

import pytest

from gateway.sources import definitions as sources
from tests.support import ops, s3sync, stack
from tests.support.s3sync import FaultProxy
from tests.support.stack import wait_until

SYNC_ENV = {"SYNC_LIST_PAGE_SIZE": "10", "SYNC_HEARTBEAT_S": "0.2", "SYNC_STALE_S": "60",
            "CRASH_GUARD_INTERVAL_S": "0.5",
            # Sources point at fault proxies on loopback: allowed in dev mode only (0066).
            "DEV_MODE": "true"}


@pytest.fixture
def gw(stack_env, out_dir):
    process = stack.start_gateway({**stack_env, **SYNC_ENV}, out_dir)
    yield process
    process.stop()


@pytest.fixture
def admin(tenants):
    # An operator may sync any bucket; grants for tenant admins: test_sources_api.py (0065).
    return tenants.user(role="operator")


def md(i: int, text: str = "") -> bytes:
    return f"# Document {i}\n\nParagraph about topic {i}. {text}\n".encode()


def active(conn, uri: str) -> bool:
    return conn.execute("SELECT EXISTS (SELECT 1 FROM document_versions v JOIN documents d "
                        "USING (doc_id) WHERE d.source_uri = %s AND v.is_active) AS a",
                        (uri,)).fetchone()["a"]


# ── 0020: deleting a source ─────────────────────────────────────────────────────────────────
def test_a_document_another_live_source_lists_stays_active_when_one_source_is_deleted(
        gw, admin, s3, conn):
    # Given two sources of one tenant over the same bucket, synced and processed: they share
    # the documents (identity s3://bucket/key), and a key only the first one lists
    bucket = s3sync.new_bucket(s3, {"shared/a.md": md(1), "only-first/b.md": md(2)})
    shared, own = f"s3://{bucket}/shared/a.md", f"s3://{bucket}/only-first/b.md"
    with gw.client(admin.token) as client:
        first = s3sync.create_source(client, bucket, name="everything")
        second = s3sync.create_source(client, bucket, name="shared only", prefix="shared/")
        s3sync.sync_now(client, first["source_id"])
        s3sync.settle_runs(conn, admin.tenant_id)
        s3sync.sync_now(client, second["source_id"])
        assert active(conn, shared) and active(conn, own)

        # When the first source is deleted
        deleted = client.delete(f"/v1/sources/{first['source_id']}")
        assert deleted.status_code == 200, deleted.text

        # Then only the document no other live source lists stops being served
        assert deleted.json()["documents_deactivated"] == 1
        assert active(conn, shared) and not active(conn, own)

        # When the second source is deleted too, Then the shared document goes as well
        assert client.delete(f"/v1/sources/{second['source_id']}").json()[
            "documents_deactivated"] == 1
        assert not active(conn, shared)


def test_deleting_again_deactivates_what_a_running_run_activated_after_the_delete(
        gw, admin, s3, conn):
    # Given a synced source whose only run a worker is running when the source is deleted
    bucket = s3sync.new_bucket(s3, {"a.md": md(1)})
    uri = f"s3://{bucket}/a.md"
    with gw.client(admin.token) as client:
        source = s3sync.create_source(client, bucket)
        s3sync.sync_now(client, source["source_id"])
        [run] = conn.execute("SELECT run_id FROM ingestion_runs").fetchall()
        ops.set_status(conn, run["run_id"], "running")
        first = client.delete(f"/v1/sources/{source['source_id']}").json()
        assert first["runs_still_running"] == 1 and first["documents_deactivated"] == 0

        # When that run then activates its version (the worker owns running runs)
        _finish_running_run(conn, run["run_id"])
        assert active(conn, uri)

        # Then repeating the DELETE deactivates it again
        again = client.delete(f"/v1/sources/{source['source_id']}")
        assert again.status_code == 200, again.text
        assert again.json()["already_deleted"] is True
        assert again.json()["documents_deactivated"] == 1
        assert not active(conn, uri)


def _finish_running_run(conn, run_id) -> None:
    """The worker's end of a run: its version active, the run succeeded (see settle_runs)."""
    with conn.transaction():
        conn.execute(
            "INSERT INTO document_versions (tenant_id, doc_id, run_id, version_number, "
            "content_hash, is_active, embedding_model, embedding_dim) "
            "SELECT tenant_id, doc_id, run_id, 1, config ->> 'content_hash', true, "
            "'sentence-transformers/all-MiniLM-L6-v2', 384 FROM ingestion_runs WHERE run_id = %s",
            (run_id,))
        conn.execute("UPDATE ingestion_runs SET status = 'succeeded', finished_at = now() "
                     "WHERE run_id = %s", (run_id,))


def _activate_version(conn, run_id) -> None:
    """An active version of the run's bytes, the run left as it is."""
    conn.execute(
        "INSERT INTO document_versions (tenant_id, doc_id, run_id, version_number, "
        "content_hash, is_active, embedding_model, embedding_dim) "
        "SELECT tenant_id, doc_id, run_id, 1, config ->> 'content_hash', true, "
        "'sentence-transformers/all-MiniLM-L6-v2', 384 FROM ingestion_runs WHERE run_id = %s",
        (run_id,))


# ── 0021: what a sync deactivates ───────────────────────────────────────────────────────────
def test_a_key_that_becomes_excluded_is_deactivated(gw, admin, s3, conn):
    # Given a synced, processed source with a draft
    bucket = s3sync.new_bucket(s3, {"docs/a.md": md(1), "docs/drafts/wip.md": md(2)})
    with gw.client(admin.token) as client:
        source = s3sync.create_source(client, bucket, prefix="docs/")
        s3sync.sync_now(client, source["source_id"])
        s3sync.settle_runs(conn, admin.tenant_id)

        # When drafts are excluded and the source is synced
        patched = client.patch(f"/v1/sources/{source['source_id']}",
                               json={"exclude_patterns": ["drafts/*"]})
        assert patched.status_code == 200, patched.text
        result = s3sync.sync_now(client, source["source_id"])

    # Then the draft is deactivated like a deleted key, and the rest is untouched
    counters = result["counters"]
    assert (counters["excluded"], counters["deleted"], counters["unchanged"]) == (1, 1, 1), result
    assert not active(conn, f"s3://{bucket}/docs/drafts/wip.md")
    assert active(conn, f"s3://{bucket}/docs/a.md")


def test_a_deleted_keys_document_active_again_is_deactivated_by_the_next_sync(
        gw, admin, s3, conn):
    # Given a key deleted from the bucket while a worker was running its run, synced
    bucket = s3sync.new_bucket(s3, {"a.md": md(1), "b.md": md(2)})
    uri = f"s3://{bucket}/a.md"
    with gw.client(admin.token) as client:
        source = s3sync.create_source(client, bucket)
        s3sync.sync_now(client, source["source_id"])
        run_id = conn.execute("SELECT r.run_id FROM ingestion_runs r JOIN documents d "
                              "USING (doc_id) WHERE d.source_uri = %s", (uri,)).fetchone()["run_id"]
        ops.set_status(conn, run_id, "running")
        s3.delete_object(Bucket=bucket, Key="a.md")
        gone = s3sync.sync_now(client, source["source_id"])
        assert gone["counters"]["deleted"] == 1
        # (the sync ends that run: its worker's fenced write cannot activate it, ADR 0241)
        assert conn.execute("SELECT status, error_code FROM ingestion_runs WHERE run_id = %s",
                            (run_id,)).fetchone() == {"status": "failed",
                                                      "error_code": "source_object_deleted"}

        # When its document is active again all the same (a version written beside the run)
        _activate_version(conn, run_id)
        assert active(conn, uri)

        # Then the next sync deactivates it again
        s3sync.sync_now(client, source["source_id"])
    assert not active(conn, uri)


# ── 0022: the sync's lease ──────────────────────────────────────────────────────────────────
def test_a_sync_whose_heartbeat_fails_stops_and_says_why(gw, admin, s3, conn, moto):
    # Given a sync held on its second listing page
    bucket = s3sync.new_bucket(s3, {f"k/{i:02d}.md": md(i) for i in range(15)})
    proxy = FaultProxy(moto.port, hold_when=s3sync.is_later_page).start()
    try:
        with gw.client(admin.token) as client:
            sid = s3sync.create_source(client, bucket, endpoint_url=proxy.url)["source_id"]
            sync_id = s3sync.trigger(client, sid)
            wait_until(proxy.holding.is_set, timeout=30, message="second page requested")

            # When Postgres ends the connection that holds the source's lock (and beats)
            # (a bigint advisory key shows in pg_locks as its high and low 32 bits)
            key = sources.lock_key(uuid.UUID(sid)) & 0xFFFFFFFFFFFFFFFF
            [holder] = conn.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1",
                (key >> 32, key & 0xFFFFFFFF)).fetchall()
            conn.execute("SELECT pg_terminate_backend(%s)", (holder["pid"],))

            # Then the sync stops at its next heartbeat, while its listing is still held, and
            # records why; nothing was deactivated
            record = wait_until(lambda: (lambda r: r if r["status"] != "running" else None)(
                client.get(f"/v1/sources/{sid}/syncs/{sync_id}").json()), timeout=30,
                message="the sync stops")
            assert not proxy.released.is_set()
            assert record["status"] == "failed", record
            assert "lost its database lock (heartbeat failed)" in record["error"]
            assert record["listing_complete"] is False and record["counters"]["deleted"] == 0
            # and the source can be synced again
            proxy.release()
            client.patch(f"/v1/sources/{sid}", json={"endpoint_url": moto.url})
            assert s3sync.sync_now(client, sid)["status"] == "succeeded"
    finally:
        proxy.release()
        proxy.stop()


def test_a_trigger_fails_a_running_row_left_behind(gw, admin, s3, conn):
    # Given a source with a `running` sync row nobody holds the lock of (a dead gateway's),
    # whose heartbeat is still fresh enough that the crash guard leaves it alone
    bucket = s3sync.new_bucket(s3, {"a.md": md(1)})
    with gw.client(admin.token) as client:
        sid = s3sync.create_source(client, bucket)["source_id"]
        left = conn.execute(
            "INSERT INTO source_syncs (tenant_id, source_id, status, heartbeat_at) "
            "VALUES (%s, %s, 'running', now()) RETURNING sync_id",
            (admin.tenant_id, sid)).fetchone()["sync_id"]

        # When the source is synced
        result = s3sync.sync_now(client, sid)

        # Then the new sync ran, and the row left behind is failed with the reason
        assert result["status"] == "succeeded" and result["sync_id"] != str(left)
        old = client.get(f"/v1/sources/{sid}/syncs/{left}").json()
    assert old["status"] == "failed" and old["finished_at"]
    assert "the gateway running this sync stopped" in old["error"]
