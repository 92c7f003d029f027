"""S3 syncs end to end with a REAL worker: the versions, chunks and locks a later sync relies on
are the ones `ingest worker` writes, not a stand-in's (tests/support/s3sync.settle_runs)."""

from __future__ import annotations

import pytest

from gateway.sources import access as source_access
from tests.support import s3sync, stack
from tests.support.stack import wait_until

pytestmark = pytest.mark.slow

SYNC_ENV = {"SYNC_LIST_PAGE_SIZE": "2", "SYNC_HEARTBEAT_S": "0.5", "SYNC_STALE_S": "10"}


def _md(title: str, words: str) -> bytes:
    return f"# {title}\n\n{words} This paragraph is long enough to make a chunk.\n".encode()


def _versions(conn, source_uri: str) -> list[tuple[int, bool, str, int]]:
    """(number, active, hash, chunks stored) of each version of one document."""
    return [(r["version_number"], r["is_active"], r["content_hash"], r["chunks"])
            for r in conn.execute(
                "SELECT v.version_number, v.is_active, v.content_hash, "
                "(SELECT count(*) FROM chunks c WHERE c.doc_version_id = v.doc_version_id) "
                "AS chunks FROM document_versions v JOIN documents d USING (doc_id) "
                "WHERE d.source_uri = %s ORDER BY 1", (source_uri,))]


def _all_runs_done(conn, tenant_id) -> bool:
    rows = conn.execute("SELECT status, error FROM ingestion_runs WHERE tenant_id = %s",
                        (tenant_id,)).fetchall()
    assert not [r for r in rows if r["status"] == "failed"], rows
    return bool(rows) and all(r["status"] == "succeeded" for r in rows)


def test_a_real_worker_processes_a_syncs_runs_and_the_next_sync_builds_on_its_versions(
        stack_env, out_dir, tenants, conn, s3):
    # Given a bucket of four documents, a gateway and a real worker on the same queue
    admin = tenants.user(role="admin")
    objects = {"kb/a.md": _md("Alpha", "Apples."), "kb/b.txt": b"Bananas, plain text. " * 5,
               "kb/c.html": b"<!doctype html><html><body><h1>Cherry</h1><p>Cherries and "
                            b"more cherries.</p></body></html>",
               "kb/d.md": _md("Delta", "Dates.")}
    bucket = s3sync.new_bucket(s3, objects)
    source_access.grant(conn, tenant_id=admin.tenant_id, bucket=bucket, prefix="",
                        granted_by="test", platform=())  # tenant admins need a grant (0065)
    uri = {key: f"s3://{bucket}/{key}" for key in objects}
    env = {**stack_env, **SYNC_ENV}
    gateway = stack.start_gateway(env, out_dir)
    worker = stack.start_worker(env, out_dir)
    try:
        with gateway.client(admin.token) as client:
            source = s3sync.create_source(client, bucket, prefix="kb/")

            # When a first sync queues them and the worker processes every run
            first = s3sync.sync_now(client, source["source_id"])
            assert first["counters"]["new"] == 4, first
            wait_until(lambda: _all_runs_done(conn, admin.tenant_id), timeout=180,
                       interval=0.5, message="the worker finished the first sync's runs")

            # Then each document has one active version with chunks, as the worker wrote it
            for key, data in objects.items():
                [(number, active, digest, chunks)] = _versions(conn, uri[key])
                assert (number, active, digest) == (1, True, s3sync.sha(data)), key
                assert chunks > 0, key

            # When the source is synced again with nothing changed
            again = s3sync.sync_now(client, source["source_id"])

            # Then the worker's versions count as settled: nothing downloaded or queued
            assert again["status"] == "succeeded", again
            counters = again["counters"]
            assert (counters["unchanged"], counters["new"], counters["changed"],
                    counters["deleted"], counters["bytes"]) == (4, 0, 0, 0, 0), counters
            assert s3sync.run_count(conn, admin.tenant_id) == 4

            # When one object gets new bytes, one is deleted, one gets its own bytes again
            s3sync.put(s3, bucket, {"kb/a.md": _md("Alpha", "Apricots now."),
                                    "kb/b.txt": objects["kb/b.txt"]})
            s3.delete_object(Bucket=bucket, Key="kb/d.md")
            changed = s3sync.sync_now(client, source["source_id"])
            assert (changed["counters"]["changed"], changed["counters"]["unchanged"],
                    changed["counters"]["deleted"]) == (1, 2, 1), changed
            wait_until(lambda: _all_runs_done(conn, admin.tenant_id), timeout=120,
                       interval=0.5, message="the worker processed the changed object")

            # Then the edit is version 2 (the only active one), the deleted key is inactive,
            # and the re-put bytes made no version
            a = _versions(conn, uri["kb/a.md"])
            assert [(n, active) for n, active, _, _ in a] == [(1, False), (2, True)]
            assert a[1][2] == s3sync.sha(_md("Alpha", "Apricots now.")) and a[1][3] > 0
            assert [(n, active) for n, active, _, _ in _versions(conn, uri["kb/d.md"])] == [
                (1, False)]
            assert len(_versions(conn, uri["kb/b.txt"])) == 1
            assert client.get("/v1/documents").json()["total"] == 3

            # And a last sync sees the worker's version 2 as settled too
            last = s3sync.sync_now(client, source["source_id"])
            assert (last["counters"]["unchanged"], last["counters"]["bytes"]) == (3, 0), last
            assert s3sync.run_count(conn, admin.tenant_id) == 5
    finally:
        worker.stop()
        gateway.stop()
