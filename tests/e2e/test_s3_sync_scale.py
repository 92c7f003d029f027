"""A 1,200-object bucket through real gateways, moto S3/SQS, real Postgres and a real worker.

Practical limits shape this test. moto's SQS scans every stored message on each call, so 1,200
messages on one queue make every SQS call slow; and a worker embeds about 20 chunks/s on two
cores, so processing 1,200 documents would take many minutes. Hence:
- the first gateway's SQS endpoint is a port where nothing listens: its relay cannot publish,
  and the 1,200 jobs stay in the outbox, where we assert on them (exactly what a sync queued);
- the worker's result for those runs is written directly (s3sync.settle_runs), and their
  outbox rows marked published;
- a second gateway, on the real queue, syncs the changes, and a REAL worker processes only that
  small set (3 new versions + 1 new document).
"""

from __future__ import annotations

import json

import pytest

from gateway.sources import access as source_access
from tests.support import s3sync, stack
from tests.support.stack import wait_until
from tests.support.tcpproxy import TcpProxy

pytestmark = pytest.mark.slow

SUPPORTED = 1200
EXTS = ("md", "txt", "html")


def body(i: int, text: str = "") -> bytes:
    if i % 3 == 2:
        return f"<!doctype html><html><body><h1>Page {i}</h1><p>Topic {i}. {text}</p></body></html>".encode()
    return f"# Note {i}\n\nThis note is about topic {i}. {text}\n".encode()


def key(i: int) -> str:
    return f"kb/dept-{i % 4}/year-{2020 + i % 5}/doc-{i:04d}.{EXTS[i % 3]}"


def uri(bucket: str, i: int) -> str:
    return f"s3://{bucket}/{key(i)}"


def versions(conn, source_uri: str) -> list[tuple[int, bool, str]]:
    return [(r["version_number"], r["is_active"], r["content_hash"]) for r in conn.execute(
        "SELECT v.version_number, v.is_active, v.content_hash FROM document_versions v "
        "JOIN documents d USING (doc_id) WHERE d.source_uri = %s ORDER BY 1", (source_uri,))]


def run_ids(conn, tenant_id) -> set:
    return {r["run_id"] for r in conn.execute(
        "SELECT run_id FROM ingestion_runs WHERE tenant_id = %s", (tenant_id,))}


def titled(client, title: str) -> int:
    return client.get("/v1/documents", params={"search": title}).json()["total"]


def test_a_bucket_of_1200_objects_syncs_changes_and_deletions(stack_env, out_dir, tenants, conn,
                                                              s3, moto):
    admin = tenants.user(role="admin")
    env = {**stack_env, "UPLOAD_MAX_SIZE_MB": "0.01", "SYNC_DOWNLOAD_CONCURRENCY": "4",
           "SOURCE_ENDPOINT_ALLOWLIST": json.dumps([moto.url])}
    # Given a bucket of 1,200 small documents in nested prefixes (more than one listing page of
    # 1,000), plus unsupported and over-size objects
    objects = {key(i): body(i) for i in range(SUPPORTED)}
    extras = {"kb/tools/setup.exe": b"MZ\x90\x00", "kb/media/intro.mp4": b"\x00\x00\x00\x18ftypmp42",
              "kb/Makefile": b"all:\n", "kb/big/manual.md": b"# Big\n" + b"x" * 20_000,
              "kb/big/export.txt": b"y" * 30_000}
    bucket = s3sync.new_bucket(s3, {**objects, **extras})
    source_access.grant(conn, tenant_id=admin.tenant_id, bucket=bucket, prefix="",
                        granted_by="test", platform=())

    # ── first sync: the relay cannot publish, so the outbox shows exactly what was queued ──
    dead = TcpProxy(moto.port).start()
    dead.stop()  # its port now refuses connections
    offline_sqs = {"AWS_ENDPOINT_URL": dead.url, "SQS_QUEUE_URL": f"{dead.url}/0/none",
                   "SQS_DLQ_URL": f"{dead.url}/0/none-dlq", "OUTBOX_MAX_BACKOFF_S": "60"}
    gw1 = stack.start_gateway({**env, **offline_sqs}, out_dir, name="gateway-offline-sqs")
    try:
        with gw1.client(admin.token) as client:
            sid = s3sync.create_source(client, bucket, prefix="kb/",
                                       endpoint_url=moto.url)["source_id"]
            first_id = s3sync.trigger(client, sid)
            # A second trigger while it runs is refused with the running sync's id
            busy = client.post(f"/v1/sources/{sid}/sync")
            assert busy.status_code == 409, busy.text
            assert busy.json() | {"detail": ""} == {"code": "sync_in_progress",
                                                    "sync_id": first_id, "detail": ""}
            first = s3sync.wait_sync(client, sid, first_id, timeout=600)
    finally:
        gw1.stop()

    # Then exactly the supported objects were queued, and the others skipped with reasons
    assert first["status"] == "succeeded", first
    assert first["counters"]["listed"] == SUPPORTED + len(extras)
    assert first["counters"]["new"] == SUPPORTED
    assert first["counters"]["skipped"] == len(extras) and first["counters"]["failed"] == 0
    assert first["reasons"]["skipped"] == {
        "unsupported file type '.exe'": 1, "unsupported file type '.mp4'": 1,
        "unsupported file type (no extension)": 1, "larger than the 0.01 MB upload limit": 2}
    assert {i["key"] for i in first["issues"]} == set(extras)
    queued = conn.execute(
        "SELECT d.source_uri, r.status, r.run_type, o.published_at FROM ingestion_runs r "
        "JOIN documents d USING (doc_id) JOIN job_outbox o USING (run_id) "
        "WHERE r.tenant_id = %s", (admin.tenant_id,)).fetchall()
    assert sorted(r["source_uri"] for r in queued) == sorted(uri(bucket, i) for i in range(SUPPORTED))
    assert all(r["status"] == "queued" and r["run_type"] == "s3_sync" and r["published_at"] is None
               for r in queued)

    # The worker's result for those 1,200 runs, written directly (see the module docstring).
    assert s3sync.settle_runs(conn, admin.tenant_id) == SUPPORTED

    gw2 = stack.start_gateway(env, out_dir, name="gateway")
    try:
        with gw2.client(admin.token) as client:
            # ── a second sync with no change queues nothing ────────────────────────────────
            again = s3sync.sync_now(client, sid, timeout=300)
            assert again["status"] == "succeeded"
            assert again["counters"]["unchanged"] == SUPPORTED
            assert (again["counters"]["new"], again["counters"]["changed"],
                    again["counters"]["bytes"]) == (0, 0, 0)
            assert s3sync.run_count(conn, admin.tenant_id) == SUPPORTED

            # ── modify 3, delete 2, add 1, re-upload 1 with identical bytes ─────────────────
            modified, deleted, same = (7, 500, 1199), (42, 999), 300
            s3sync.put(s3, bucket, {key(i): body(i, "Revised edition.") for i in modified})
            s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": key(i)} for i in deleted]})
            added = "kb/dept-9/new/fresh-doc.md"
            s3sync.put(s3, bucket, {added: b"# Fresh\n\nA brand new document.\n",
                                    key(same): body(same)})
            runs_before = run_ids(conn, admin.tenant_id)
            changes = s3sync.sync_now(client, sid, timeout=300)

            # Then: 3 changed, 1 new, 2 deleted; the re-upload was downloaded but is unchanged
            counters = changes["counters"]
            assert changes["status"] == "succeeded", changes
            assert (counters["changed"], counters["new"], counters["deleted"]) == (3, 1, 2)
            assert counters["unchanged"] == SUPPORTED - 3 - 2
            assert counters["bytes"] == (sum(len(body(i, "Revised edition.")) for i in modified)
                                         + len(b"# Fresh\n\nA brand new document.\n")
                                         + len(body(same)))
            new_runs = run_ids(conn, admin.tenant_id) - runs_before
            assert len(new_runs) == 4

            # When a real worker processes the queue (only those four jobs are on it)
            wait_until(lambda: conn.execute(
                "SELECT count(*) AS n FROM job_outbox WHERE tenant_id = %s AND published_at IS "
                "NULL", (admin.tenant_id,)).fetchone()["n"] == 0, timeout=60,
                message="the four jobs published")
            worker = stack.start_worker(env, out_dir, once=True)
            assert worker.proc.wait(600) == 0, worker.logs()[-3000:]

            # Then exactly three documents have a new active version
            for i in modified:
                assert [(n, active) for n, active, _ in versions(conn, uri(bucket, i))] == [
                    (1, False), (2, True)]
                assert versions(conn, uri(bucket, i))[1][2] == s3sync.sha(
                    body(i, "Revised edition."))
            # one new document, two deactivated ones, and no run for the unchanged bytes
            assert [(n, a) for n, a, _ in versions(conn, f"s3://{bucket}/{added}")] == [(1, True)]
            for i in deleted:
                assert [(n, a) for n, a, _ in versions(conn, uri(bucket, i))] == [(1, False)]
            assert [(n, a) for n, a, _ in versions(conn, uri(bucket, same))] == [(1, True)]
            assert conn.execute(
                "SELECT count(*) AS n FROM ingestion_runs r JOIN documents d USING (doc_id) "
                "WHERE d.source_uri = %s", (uri(bucket, same),)).fetchone()["n"] == 1
            # The four runs were processed by the worker for real: chunks and embeddings.
            done = conn.execute(
                "SELECT r.status, v.chunk_count, (SELECT count(*) FROM chunk_embeddings e "
                "WHERE e.doc_version_id = v.doc_version_id) AS vectors FROM ingestion_runs r "
                "JOIN document_versions v USING (run_id) WHERE r.run_id = ANY(%s)",
                (list(new_runs),)).fetchall()
            assert len(done) == 4
            assert all(d["status"] == "succeeded" and d["chunk_count"] > 0
                       and d["vectors"] == d["chunk_count"] for d in done)

            # and the deleted documents are no longer listed; the others are
            listing = client.get("/v1/documents").json()
            assert listing["total"] == SUPPORTED - 2 + 1
            for i in deleted:
                assert titled(client, f"doc-{i:04d}") == 0
            for i in (*modified, same):
                assert titled(client, f"doc-{i:04d}") == 1
            assert titled(client, "fresh-doc") == 1
    finally:
        gw2.stop()
