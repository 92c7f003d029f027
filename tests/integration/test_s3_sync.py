"""S3 source syncs against a real gateway process, real Postgres and moto's S3 (and SQS).

Small buckets with short listing pages (SYNC_LIST_PAGE_SIZE=10) so that paging, listing
failures and crashes between pages are cheap to stage. Runs are "processed" by settle_runs (the
worker's result written directly) where a test needs active versions: its docstring says why
that cannot change these tests' verdicts, and tests/e2e/test_s3_sync_worker.py runs a sync's
runs through a real worker.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import psycopg
import pytest
from psycopg import errors as pg_errors

from gateway.operations import crash_guard
from gateway.sources import deactivation
from gateway.sources import definitions as sources
from shared import db, objectstore
from tests.support import s3sync, stack
from tests.support.s3sync import FaultProxy
from tests.support.stack import wait_until
from worker import runs as worker_runs

SYNC_ENV = {
    "SYNC_LIST_PAGE_SIZE": "10",
    "SYNC_HEARTBEAT_S": "0.2",
    "SYNC_STALE_S": "2",
    "SYNC_DOWNLOAD_CONCURRENCY": "3",
    "CRASH_GUARD_INTERVAL_S": "0.5",
    # 10 KB: an "over-size" object is cheap to make.
    "UPLOAD_MAX_SIZE_MB": "0.01",
    # Sources point at moto and fault proxies on loopback: allowed in dev mode only (0066).
    "DEV_MODE": "true",
}


@pytest.fixture
def sync_env(stack_env) -> dict[str, str]:
    return {**stack_env, **SYNC_ENV}


@pytest.fixture
def gw(sync_env, out_dir):
    process = stack.start_gateway(sync_env, out_dir)
    yield process
    process.stop()


@pytest.fixture
def admin(tenants):
    # An operator may sync any bucket; grants for tenant admins: test_sources_api.py (0065).
    return tenants.user(role="operator")


def md(i: int, text: str = "") -> bytes:
    return f"# Document {i}\n\nParagraph about topic {i}. {text}\n".encode()


def docs_listed(client) -> int:
    response = client.get("/v1/documents", params={"limit": 100})
    assert response.status_code == 200, response.text
    return response.json()["total"]


# ── what a first sync queues and skips ──────────────────────────────────────────────────────
def test_first_sync_queues_supported_objects_and_skips_the_rest_with_reasons(
        gw, admin, s3, conn, moto, sync_env):
    # Given a bucket with good files in nested folders and every kind of object we refuse
    good = {f"docs/team-{i % 3}/sub/note-{i:02d}.md": md(i) for i in range(12)}
    good["docs/page.html"] = b"<!doctype html><html><body><p>Hello</p></body></html>"
    good["docs/readme.txt"] = b"plain text\n"
    bucket = s3sync.new_bucket(s3, {
        **good,
        "docs/tool.exe": b"MZ\x90\x00binary",
        "docs/LICENSE": b"no extension",
        "docs/huge.md": b"x" * 20_000,
        "docs/empty.md": b"",
        "docs/fake.pdf": b"this is text, not a PDF",
        "docs/drafts/wip.md": md(99),
        "other/outside.md": md(98),
        "docs/folder/": b"",
    })
    s3sync.put(s3, bucket, {"docs/cold.md": md(97)}, StorageClass="GLACIER")
    with gw.client(admin.token) as client:
        source = s3sync.create_source(client, bucket, prefix="docs/",
                                      exclude_patterns=["drafts/*"], endpoint_url=moto.url)

        # When it is synced
        result = s3sync.sync_now(client, source["source_id"])

    # Then every supported object has a queued s3_sync run, and nothing else does
    counters = result["counters"]
    assert result["status"] == "succeeded", result
    assert result["listing_complete"] is True
    assert counters["new"] == len(good) == 14
    assert counters["listed"] == 21  # under docs/, without the folder marker
    assert counters["excluded"] == 1
    assert counters["skipped"] == 6 and counters["failed"] == 0
    assert counters["bytes"] == sum(len(b) for b in good.values())
    assert result["reasons"]["skipped"] == {
        "unsupported file type '.exe'": 1,
        "unsupported file type (no extension)": 1,
        "larger than the 0.01 MB upload limit": 1,
        "empty object": 1,
        "content is not PDF although the name ends in .pdf": 1,
        "archived in GLACIER; restore it to sync it": 1,
    }
    assert {i["key"] for i in result["issues"]} == {
        "docs/tool.exe", "docs/LICENSE", "docs/huge.md", "docs/empty.md", "docs/fake.pdf",
        "docs/cold.md"}
    rows = conn.execute(
        "SELECT r.run_type, r.source_id, r.status, r.config, d.source_uri, d.title, o.payload "
        "FROM ingestion_runs r JOIN documents d ON d.doc_id = r.doc_id "
        "JOIN job_outbox o ON o.run_id = r.run_id WHERE r.tenant_id = %s",
        (admin.tenant_id,)).fetchall()
    assert {r["source_uri"] for r in rows} == {f"s3://{bucket}/{k}" for k in good}
    for row in rows:
        key = row["source_uri"].removeprefix(f"s3://{bucket}/")
        assert row["run_type"] == "s3_sync" and str(row["source_id"]) == source["source_id"]
        assert row["status"] in ("queued", "running", "succeeded")
        assert row["title"] == key.rsplit("/", 1)[-1]
        # The bytes in the upload store are the object's, hashed on the way.
        assert row["config"]["content_hash"] == s3sync.sha(good[key])
        stored = objectstore.file_path(row["config"]["upload_uri"]).read_bytes()
        assert stored == good[key]
        assert row["payload"]["job_type"] == "s3_sync_ingest"
        assert row["payload"]["source_uri"] == row["source_uri"]
    # No file was kept for the objects that were downloaded and then refused.
    uploads = objectstore.file_path(sync_env["UPLOAD_STORE_URI"])
    assert len([p for p in uploads.rglob("*") if p.is_file()]) == len(good)


def test_resync_without_changes_downloads_nothing_and_queues_nothing(gw, admin, s3, conn):
    # Given a source synced once, its runs still queued (no worker yet)
    bucket = s3sync.new_bucket(s3, {f"n/{i:02d}.md": md(i) for i in range(25)})
    with gw.client(admin.token) as client:
        source = s3sync.create_source(client, bucket)
        first = s3sync.sync_now(client, source["source_id"])
        runs_after_first = s3sync.run_count(conn, admin.tenant_id)

        # When it is synced again, before and after a worker processed the runs
        again = s3sync.sync_now(client, source["source_id"])
        s3sync.settle_runs(conn, admin.tenant_id)
        third = s3sync.sync_now(client, source["source_id"])

    # Then neither sync downloaded or queued anything
    assert first["counters"]["new"] == 25 and runs_after_first == 25
    for result in (again, third):
        assert result["status"] == "succeeded"
        counters = result["counters"]
        assert (counters["unchanged"], counters["new"], counters["changed"],
                counters["deleted"], counters["bytes"]) == (25, 0, 0, 0, 0)
    assert s3sync.run_count(conn, admin.tenant_id) == 25


def test_new_bytes_make_a_new_version_and_same_bytes_make_none(gw, admin, s3, conn):
    # Given a synced and processed source
    bucket = s3sync.new_bucket(s3, {"a.md": md(1), "b.md": md(2), "c.md": md(3)})
    with gw.client(admin.token) as client:
        source = s3sync.create_source(client, bucket)
        s3sync.sync_now(client, source["source_id"])
        s3sync.settle_runs(conn, admin.tenant_id)
        # When one object gets new bytes and another the same bytes again (a new timestamp),
        # written as a multipart upload so that its ETag is no MD5 and differs
        s3.put_object(Bucket=bucket, Key="a.md", Body=md(1, "edited"))
        upload = s3.create_multipart_upload(Bucket=bucket, Key="b.md")
        part = s3.upload_part(Bucket=bucket, Key="b.md", UploadId=upload["UploadId"],
                              PartNumber=1, Body=md(2))
        s3.complete_multipart_upload(Bucket=bucket, Key="b.md", UploadId=upload["UploadId"],
                                     MultipartUpload={"Parts": [{"ETag": part["ETag"],
                                                                 "PartNumber": 1}]})
        result = s3sync.sync_now(client, source["source_id"])

    # Then only the edited object has a new run, on the same document
    assert result["counters"]["changed"] == 1
    assert result["counters"]["unchanged"] == 2
    assert result["counters"]["bytes"] == len(md(1, "edited")) + len(md(2))
    runs = conn.execute("SELECT d.source_uri, count(*) AS n FROM ingestion_runs r JOIN documents d "
                        "USING (doc_id) WHERE r.tenant_id = %s GROUP BY 1",
                        (admin.tenant_id,)).fetchall()
    assert {r["source_uri"].rsplit("/", 1)[-1]: r["n"] for r in runs} == {
        "a.md": 2, "b.md": 1, "c.md": 1}
    s3sync.settle_runs(conn, admin.tenant_id)
    assert s3sync.active_docs(conn, admin.tenant_id)[f"s3://{bucket}/a.md"] == s3sync.sha(
        md(1, "edited"))


# ── deletions ───────────────────────────────────────────────────────────────────────────────
def test_deleted_objects_are_deactivated_and_come_back_as_a_new_version(gw, admin, s3, conn):
    # Given a synced, processed source of 25 objects (three listing pages)
    objects = {f"k/{i:02d}.md": md(i) for i in range(25)}
    bucket = s3sync.new_bucket(s3, objects)
    with gw.client(admin.token) as client:
        source = s3sync.create_source(client, bucket)
        s3sync.sync_now(client, source["source_id"])
        s3sync.settle_runs(conn, admin.tenant_id)
        assert docs_listed(client) == 25

        # When two objects are deleted from the bucket and the source is synced
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k/03.md"},
                                                             {"Key": "k/17.md"}]})
        result = s3sync.sync_now(client, source["source_id"])

        # Then their documents are deactivated, no longer listed, and no row was deleted
        assert result["counters"]["deleted"] == 2 and result["status"] == "succeeded"
        assert docs_listed(client) == 23
        gone = conn.execute(
            "SELECT so.key, so.status, so.deleted_at, d.doc_id, "
            "(SELECT count(*) FROM document_versions v WHERE v.doc_id = d.doc_id) AS versions, "
            "(SELECT count(*) FROM document_versions v WHERE v.doc_id = d.doc_id AND v.is_active) "
            "AS active FROM source_objects so JOIN documents d ON d.doc_id = so.doc_id "
            "WHERE so.status = 'deleted'").fetchall()
        assert {r["key"] for r in gone} == {"k/03.md", "k/17.md"}
        assert all(r["versions"] == 1 and r["active"] == 0 and r["deleted_at"] for r in gone)

        # When a deleted key reappears with the same bytes
        s3sync.put(s3, bucket, {"k/03.md": objects["k/03.md"]})
        back = s3sync.sync_now(client, source["source_id"])
        s3sync.settle_runs(conn, admin.tenant_id)

        # Then it is a new version of the same document, served again
        assert back["counters"]["new"] == 1 and back["counters"]["deleted"] == 0
        versions = conn.execute(
            "SELECT version_number, is_active FROM document_versions v JOIN documents d "
            "USING (doc_id) WHERE d.source_uri = %s ORDER BY 1",
            (f"s3://{bucket}/k/03.md",)).fetchall()
        assert [(v["version_number"], v["is_active"]) for v in versions] == [(1, False), (2, True)]
        assert docs_listed(client) == 24


def test_deletion_cancels_a_queued_run_of_the_gone_object(gw, admin, s3, conn):
    # Given a synced source whose runs are still queued
    bucket = s3sync.new_bucket(s3, {"a.md": md(1), "b.md": md(2)})
    with gw.client(admin.token) as client:
        source = s3sync.create_source(client, bucket)
        s3sync.sync_now(client, source["source_id"])
        # When one object is deleted before a worker got to it
        s3.delete_object(Bucket=bucket, Key="a.md")
        result = s3sync.sync_now(client, source["source_id"])
    # Then its run is failed with the reason (a worker will not bring the object back)
    assert result["counters"]["deleted"] == 1
    runs = {r["source_uri"].rsplit("/", 1)[-1]: r for r in conn.execute(
        "SELECT d.source_uri, r.status, r.error FROM ingestion_runs r JOIN documents d "
        "USING (doc_id) WHERE r.tenant_id = %s", (admin.tenant_id,))}
    assert runs["a.md"]["status"] == "failed"
    assert "deleted from the bucket" in runs["a.md"]["error"]
    assert runs["b.md"]["status"] != "failed"


def test_deletion_also_ends_a_running_run_so_the_gone_object_cannot_come_back(gw, admin, s3,
                                                                              conn):
    # Given a synced source whose run of a.md a worker has started (found by the chaos soak:
    # that run finished after the sync and served the deleted object again)
    bucket = s3sync.new_bucket(s3, {"a.md": md(1), "b.md": md(2)})
    with gw.client(admin.token) as client:
        source = s3sync.create_source(client, bucket)
        s3sync.sync_now(client, source["source_id"])
        run_id = conn.execute(
            "SELECT r.run_id FROM ingestion_runs r JOIN documents d USING (doc_id) "
            "WHERE r.tenant_id = %s AND d.source_uri = %s",
            (admin.tenant_id, f"s3://{bucket}/a.md")).fetchone()["run_id"]
        conn.execute("UPDATE ingestion_runs SET status = 'running', started_at = now() "
                     "WHERE run_id = %s", (run_id,))

        # When the object is deleted and the source synced
        s3.delete_object(Bucket=bucket, Key="a.md")
        s3sync.sync_now(client, source["source_id"])

        # Then the running run is ended too (the worker's final write is fenced on `running`
        # and rolls back), with a code that says a retry cannot help, and a retry is refused
        run = client.get(f"/v1/ingestion-runs/{run_id}").json()
        assert (run["status"], run["error_code"], run["retryable"]) == (
            "failed", "source_object_deleted", False)
        assert "deleted from the bucket" in run["error"]
        retried = client.post(f"/v1/ingestion-runs/{run_id}/retry")
        assert retried.status_code == 409, retried.text
        assert retried.json()["code"] == "source_object_deleted"


def test_a_listing_that_fails_midway_deactivates_nothing(gw, admin, s3, conn, moto):
    # Given a synced, processed source of 25 objects, four of which are then deleted
    objects = {f"k/{i:02d}.md": md(i) for i in range(25)}
    bucket = s3sync.new_bucket(s3, objects)
    # A proxy that goes down for good when the second listing page is asked for.
    proxy = FaultProxy(moto.port, down_when=s3sync.is_later_page).start()
    try:
        with gw.client(admin.token) as client:
            source = s3sync.create_source(client, bucket, endpoint_url=moto.url)
            s3sync.sync_now(client, source["source_id"])
            s3sync.settle_runs(conn, admin.tenant_id)
            s3.delete_objects(Bucket=bucket, Delete={"Objects": [
                {"Key": k} for k in ("k/01.md", "k/04.md", "k/15.md", "k/22.md")]})

            # When the source is synced through the proxy, which fails after the first page
            patched = client.patch(f"/v1/sources/{source['source_id']}",
                                   json={"endpoint_url": proxy.url})
            assert patched.status_code == 200, patched.text
            failed = s3sync.sync_now(client, source["source_id"])

            # Then the sync failed, says that nothing was deactivated, and nothing was
            assert failed["status"] == "failed"
            assert failed["listing_complete"] is False
            assert failed["counters"]["deleted"] == 0
            assert failed["counters"]["listed"] == 10
            assert "no document was deactivated" in failed["error"]
            assert docs_listed(client) == 25
            assert len(s3sync.active_docs(conn, admin.tenant_id)) == 25

            # When the endpoint works again, Then the next sync deactivates the four
            client.patch(f"/v1/sources/{source['source_id']}", json={"endpoint_url": moto.url})
            healed = s3sync.sync_now(client, source["source_id"])
            assert healed["status"] == "succeeded" and healed["counters"]["deleted"] == 4
            assert docs_listed(client) == 21
    finally:
        proxy.stop()


# ── per-object failures ─────────────────────────────────────────────────────────────────────
def test_a_failed_download_is_counted_and_the_others_proceed(gw, admin, s3, conn, moto):
    # Given a bucket where downloading one object always breaks the connection
    objects = {f"f/{i:02d}.md": md(i) for i in range(8)}
    bucket = s3sync.new_bucket(s3, objects)
    proxy = FaultProxy(moto.port, cut_when=s3sync.is_get_of(bucket, "f/05.md")).start()
    try:
        with gw.client(admin.token) as client:
            source = s3sync.create_source(client, bucket, endpoint_url=proxy.url)
            # When the source is synced
            result = s3sync.sync_now(client, source["source_id"])
    finally:
        proxy.stop()

    # Then that object is counted failed with its reason, after retries, and the rest queued
    assert result["status"] == "completed_with_errors"
    assert result["counters"]["failed"] == 1 and result["counters"]["new"] == 7
    assert proxy.cuts >= 2  # retried before giving up
    [issue] = result["issues"]
    assert issue["key"] == "f/05.md" and issue["outcome"] == "failed"
    assert issue["reason"].startswith("download failed: ")
    [(reason, count)] = result["reasons"]["failed"].items()
    assert reason.startswith("download failed: ") and count == 1
    queued = {r["source_uri"] for r in conn.execute(
        "SELECT source_uri FROM documents WHERE tenant_id = %s", (admin.tenant_id,))}
    assert queued == {f"s3://{bucket}/{k}" for k in objects if k != "f/05.md"}

    # And a later sync that can download it picks it up (it was never recorded as synced)
    with gw.client(admin.token) as client:
        client.patch(f"/v1/sources/{source['source_id']}", json={"endpoint_url": moto.url})
        again = s3sync.sync_now(client, source["source_id"])
    assert again["status"] == "succeeded"
    assert again["counters"]["new"] == 1 and again["counters"]["unchanged"] == 7


# ── one sync per source, across replicas and crashes ────────────────────────────────────────
def test_one_sync_per_source_across_replicas_and_a_dead_gateways_sync_is_failed(
        sync_env, out_dir, admin, s3, conn, moto):
    # Given two gateway replicas and a 30-object source whose second listing page hangs
    objects = {f"c/{i:02d}.md": md(i) for i in range(30)}
    bucket = s3sync.new_bucket(s3, objects)
    proxy = FaultProxy(moto.port, hold_when=s3sync.is_later_page).start()
    a = stack.start_gateway(sync_env, out_dir, name="gateway-a")
    b = stack.start_gateway(sync_env, out_dir, name="gateway-b")
    try:
        with a.client(admin.token) as on_a, b.client(admin.token) as on_b:
            source = s3sync.create_source(on_a, bucket, endpoint_url=proxy.url)
            sid = source["source_id"]
            first = s3sync.trigger(on_a, sid)
            wait_until(lambda: on_a.get(f"/v1/sources/{sid}/syncs/{first}").json()
                       ["counters"]["new"] == 10, timeout=30, message="first page queued")

            # When the same source is triggered on either replica while it runs
            for client in (on_a, on_b):
                busy = client.post(f"/v1/sources/{sid}/sync")
                # Then 409 names the running sync
                assert busy.status_code == 409, busy.text
                assert busy.json()["code"] == "sync_in_progress"
                assert busy.json()["sync_id"] == first
            # and deleting the source waits for it as well
            assert on_b.delete(f"/v1/sources/{sid}").json()["code"] == "sync_in_progress"

            # When the gateway running it dies mid-sync
            a.proc.kill()
            a.proc.wait(10)

            # Then the other replica's crash guard fails it for its missing heartbeat
            dead = wait_until(lambda: (lambda s: s if s["status"] != "running" else None)(
                on_b.get(f"/v1/sources/{sid}/syncs/{first}").json()), timeout=30,
                message="crash guard fails the dead gateway's sync")
            assert dead["status"] == "failed" and "no heartbeat" in dead["error"]
            assert dead["listing_complete"] is False

            # and syncing again converges: every object has exactly one run
            proxy.release()
            again = s3sync.sync_now(on_b, sid)
    finally:
        proxy.release()
        proxy.stop()
        a.stop()
        b.stop()
    assert again["status"] == "succeeded"
    assert again["counters"]["new"] == 20 and again["counters"]["unchanged"] == 10
    per_doc = conn.execute("SELECT doc_id, count(*) AS n FROM ingestion_runs WHERE tenant_id = %s "
                           "GROUP BY doc_id", (admin.tenant_id,)).fetchall()
    assert len(per_doc) == 30 and all(r["n"] == 1 for r in per_doc)


def test_gateway_shutdown_records_the_running_sync_as_interrupted(sync_env, out_dir, admin, s3,
                                                                  moto):
    bucket = s3sync.new_bucket(s3, {f"s/{i:02d}.md": md(i) for i in range(15)})
    proxy = FaultProxy(moto.port, hold_when=s3sync.is_later_page).start()
    gw = stack.start_gateway(sync_env, out_dir)
    try:
        with gw.client(admin.token) as client:
            sid = s3sync.create_source(client, bucket, endpoint_url=proxy.url)["source_id"]
            sync_id = s3sync.trigger(client, sid)
            wait_until(proxy.holding.is_set, timeout=30, message="second page requested")
        # When the gateway is stopped (SIGTERM) during the sync (uvicorn re-raises the signal
        # after its graceful shutdown, so the exit status is -15, not a crash)
        code = gw.stop()
        assert code in (0, -15), f"gateway exit {code}; its log ends:\n{gw.logs()[-4000:]}"
        assert "Application shutdown complete" in gw.logs()
    finally:
        proxy.release()
        proxy.stop()
    # Then the sync says it was interrupted by the shutdown, and a new gateway may sync again
    gw2 = stack.start_gateway(sync_env, out_dir, name="gateway-2")
    try:
        with gw2.client(admin.token) as client:
            record = client.get(f"/v1/sources/{sid}/syncs/{sync_id}").json()
            assert record["status"] == "failed" and "shut down" in record["error"]
            client.patch(f"/v1/sources/{sid}", json={"endpoint_url": moto.url})
            assert s3sync.sync_now(client, sid)["status"] == "succeeded"
    finally:
        gw2.stop()


def test_crash_guard_fails_only_syncs_with_a_stale_heartbeat(database_url, conn, admin):
    # Given a running sync whose heartbeat stopped 5 minutes ago, and one beating now
    source_id = conn.execute(
        "INSERT INTO ingestion_sources (tenant_id, name, bucket) VALUES (%s, 's', 'b') "
        "RETURNING source_id", (admin.tenant_id,)).fetchone()["source_id"]
    other_id = conn.execute(
        "INSERT INTO ingestion_sources (tenant_id, name, bucket) VALUES (%s, 't', 'b') "
        "RETURNING source_id", (admin.tenant_id,)).fetchone()["source_id"]
    insert = ("INSERT INTO source_syncs (tenant_id, source_id, status, heartbeat_at) "
              "VALUES (%s, %s, 'running', now() - %s * interval '1 second') RETURNING sync_id")
    stale = conn.execute(insert, (admin.tenant_id, source_id, 300)).fetchone()["sync_id"]
    fresh = conn.execute(insert, (admin.tenant_id, other_id, 1)).fetchone()["sync_id"]

    # When the crash guard sweeps with a 2-minute window
    async def sweep() -> crash_guard.GuardResult:
        pool = db.async_pool(database_url, min_size=1, max_size=2)
        await pool.open()
        try:
            return await crash_guard.sweep(pool, queued_ttl_s=3600, running_stale_s=900,
                                           sync_stale_s=120)
        finally:
            await pool.close()

    result = asyncio.run(sweep())

    # Then only the stale one is failed, with a reason that says what to do
    assert result.failed_syncs == 1
    rows = {r["sync_id"]: r for r in conn.execute("SELECT * FROM source_syncs")}
    assert rows[stale]["status"] == "failed" and rows[stale]["finished_at"] is not None
    assert "no heartbeat" in rows[stale]["error"] and "sync again" in rows[stale]["error"]
    assert rows[fresh]["status"] == "running"


# ── the document lock is the worker's ───────────────────────────────────────────────────────
def test_deactivation_takes_the_workers_document_lock(database_url, conn, tenants):
    # Given a worker holding the lock of a document (while it activates a version)
    doc_id = uuid.uuid4()
    with psycopg.connect(database_url, autocommit=True) as worker:
        worker.execute("SELECT pg_advisory_lock(%s)", (worker_runs.lock_key(doc_id),))
        # When the gateway deactivates that document, Then it waits for that very lock
        with pytest.raises(pg_errors.LockNotAvailable), conn.transaction():
            conn.execute("SET LOCAL lock_timeout = '200ms'")
            conn.execute(deactivation.Q["lock_documents"], {"doc_ids": [doc_id]})


def test_source_lock_keys_differ_from_worker_keys():
    source_id = uuid.uuid4()
    assert sources.lock_key(source_id) != worker_runs.lock_key(source_id)
    assert sources.lock_key(source_id) == sources.lock_key(uuid.UUID(str(source_id)))


def test_sync_record_is_json_with_counters(gw, admin, s3):
    bucket = s3sync.new_bucket(s3, {"x.md": md(1)})
    with gw.client(admin.token) as client:
        source = s3sync.create_source(client, bucket)
        response = client.post(f"/v1/sources/{source['source_id']}/sync")
        assert response.status_code == 202
        assert response.headers["location"].endswith(response.json()["sync_id"])
        s3sync.wait_sync(client, source["source_id"], response.json()["sync_id"])
        listing = client.get(f"/v1/sources/{source['source_id']}/syncs").json()
    assert listing["total"] == 1
    [record] = listing["items"]
    assert set(record["counters"]) == {"listed", "excluded", "new", "changed", "unchanged",
                                       "deleted", "skipped", "failed", "still_failed", "bytes"}
    assert {"list_s", "db_s", "fetch_s", "wall_s"} <= set(record["timings"])
    assert record["runner"] and record["finished_at"]
    json.dumps(record)


def test_a_failed_object_is_listed_as_failed_until_retried_and_an_admins_deactivation_is_kept(
        gw, admin, s3, conn):
    # Given a processed source of three objects
    bucket = s3sync.new_bucket(s3, {"a.md": md(1), "b.md": md(2), "c.md": md(3)})
    with gw.client(admin.token) as client:
        source = s3sync.create_source(client, bucket)
        s3sync.sync_now(client, source["source_id"])
        s3sync.settle_runs(conn, admin.tenant_id)
        # When b.md gets new bytes whose run then fails (say the crash guard failed it) ...
        s3sync.put(s3, bucket, {"b.md": md(2, "v2")})
        s3sync.sync_now(client, source["source_id"])
        failed_run = conn.execute(
            "UPDATE ingestion_runs SET status = 'failed', error = 'x' WHERE tenant_id = %s AND "
            "status = 'queued' RETURNING run_id", (admin.tenant_id,)).fetchone()["run_id"]
        # ... and an admin deactivates c.md's document by hand
        conn.execute("UPDATE document_versions v SET is_active = false, deactivated_at = now() "
                     "FROM documents d WHERE d.doc_id = v.doc_id AND d.source_uri = %s",
                     (f"s3://{bucket}/c.md",))
        runs_before = s3sync.run_count(conn, admin.tenant_id)
        first = s3sync.sync_now(client, source["source_id"])
        second = s3sync.sync_now(client, source["source_id"])

        # Then syncs that find nothing changed neither fetch b.md again nor call it changed:
        # they list it as still failed, with its run, and nothing is queued
        for result in (first, second):
            counters = result["counters"]
            assert counters["changed"] == 0 and counters["still_failed"] == 1, counters
            assert counters["unchanged"] == 2 and counters["bytes"] == 0, counters
            assert result["status"] == "completed_with_errors"
            assert [(i["key"], i["outcome"], i["run_id"]) for i in result["issues"]] == [
                ("b.md", "still_failed", str(failed_run))]
        assert s3sync.run_count(conn, admin.tenant_id) == runs_before

        # When the failed run is retried, the object is no longer failed
        retried = client.post(f"/v1/ingestion-runs/{failed_run}/retry")
        assert retried.status_code == 202, retried.text
        after_retry = s3sync.sync_now(client, source["source_id"])
        assert after_retry["counters"]["still_failed"] == 0
        assert after_retry["counters"]["unchanged"] == 3 and after_retry["status"] == "succeeded"

    # And c.md, deactivated by the admin, was never queued again
    queued = conn.execute("SELECT d.source_uri FROM ingestion_runs r JOIN documents d "
                          "USING (doc_id) WHERE r.status = 'queued'").fetchall()
    assert [r["source_uri"] for r in queued] == [f"s3://{bucket}/b.md"]


def test_a_failed_object_that_changes_is_fetched_again(gw, admin, s3, conn):
    # Given an object whose ingest failed
    bucket = s3sync.new_bucket(s3, {"a.md": md(1)})
    with gw.client(admin.token) as client:
        source = s3sync.create_source(client, bucket)
        s3sync.sync_now(client, source["source_id"])
        conn.execute("UPDATE ingestion_runs SET status = 'failed', error = 'x' "
                     "WHERE tenant_id = %s AND status = 'queued'", (admin.tenant_id,))
        # When it changes in the bucket
        s3sync.put(s3, bucket, {"a.md": md(1, "fixed")})
        result = s3sync.sync_now(client, source["source_id"])
    # Then it is fetched and queued as changed
    assert result["counters"]["changed"] == 1 and result["counters"]["still_failed"] == 0
    assert conn.execute("SELECT count(*) AS n FROM ingestion_runs WHERE tenant_id = %s AND "
                        "status = 'queued'", (admin.tenant_id,)).fetchone()["n"] == 1


def test_a_sync_reports_how_its_files_ingested_with_their_runs(gw, admin, s3, conn):
    # Given a sync of three objects, whose runs then end one each way
    bucket = s3sync.new_bucket(s3, {"a.md": md(1), "b.md": md(2), "c.md": md(3)})
    with gw.client(admin.token) as client:
        source = s3sync.create_source(client, bucket)
        sync = s3sync.sync_now(client, source["source_id"])
        assert sync["ingest"] == {"queued": 3, "running": 0, "succeeded": 0, "failed": 0}
        runs = {r["title"]: r["run_id"] for r in conn.execute(
            "SELECT run_id, config ->> 'title' AS title FROM ingestion_runs WHERE tenant_id = %s",
            (admin.tenant_id,))}
        conn.execute("UPDATE ingestion_runs SET status = 'running', started_at = now() "
                     "WHERE run_id = ANY(%s)", ([runs["a.md"], runs["b.md"]],))
        conn.execute("UPDATE ingestion_runs SET status = 'succeeded', finished_at = now() "
                     "WHERE run_id = %s", (runs["a.md"],))
        conn.execute("UPDATE ingestion_runs SET status = 'failed', finished_at = now(), "
                     "error = 'extract: the file is not Markdown.' WHERE run_id = %s",
                     (runs["c.md"],))
        # When the sync is read again
        read = client.get(f"/v1/sources/{source['source_id']}/syncs/{sync['sync_id']}").json()
        listed = client.get(f"/v1/sources/{source['source_id']}/syncs").json()["items"][0]

    # Then it counts succeeded, failed and still running runs, and links the ones that did not
    # succeed, failed first
    assert read["ingest"] == {"queued": 0, "running": 1, "succeeded": 1, "failed": 1}
    assert listed["ingest"] == read["ingest"]
    assert [(r["run_id"], r["status"]) for r in read["runs"]] == [
        (str(runs["c.md"]), "failed"), (str(runs["b.md"]), "running")]
    assert read["runs"][0]["error"] == "extract: the file is not Markdown."
