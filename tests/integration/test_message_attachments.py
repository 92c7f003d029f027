"""E-mail attachments as child documents (docs/decisions/0250), on a real Postgres with the
worker's own index stage and attachment store and the gateway's own relay feeder, admin and
cleanup code: children made once each, in their tenant; served only with their message
version; their stored files kept while they wait. The whole path through real processes is
tests/e2e/test_email_attachments.py."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from pgvector.psycopg import register_vector

from gateway.documents import admin, attachments
from gateway.operations import cleanup
from shared import db, errors, jobs, objectstore
from tests.support import ops, submit
from worker.pipeline import attachments as kept
from worker.pipeline import extract, index
from worker.pipeline.chunk import Chunk

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture
def store(tmp_path) -> Path:
    return tmp_path / "uploads"


def _content(text: str, stored: list[kept.Stored] | tuple = ()) -> index.VersionContent:
    chunks = [Chunk(0, text, 5, 0, len(text), None)]
    return index.VersionContent(uuid.uuid4(), chunks, np.ones((1, 384), dtype=np.float32),
                                len(text), None, None, MODEL, attachments=stored)


def _write(conn, job: jobs.IngestJob, content: index.VersionContent) -> None:
    index.write(conn, job, content, {"stages": {}}, started=time.monotonic(),
                fts_config="english", fence=0)


def _message(conn, store: Path, user, files: dict[str, bytes], *, body: bytes = b"# Hi\n",
             source_uri: str | None = None) -> tuple[submit.Submitted, list[kept.Stored]]:
    """A message version written by the worker's index stage, its attachments stored by the
    worker's attachment store, as the pipeline does after extracting an e-mail."""
    register_vector(conn)
    sub = submit.submit(conn, None, store, user, body, name="mail.md", copies=0,
                        source_uri=source_uri)
    ops.set_status(conn, sub.run_id, "running")
    folder = store.parent / f"kept-{sub.run_id}"
    folder.mkdir()
    found = []
    for ordinal, (name, data) in enumerate(files.items(), start=1):
        path = folder / f"{ordinal}"
        path.write_bytes(data)
        found.append(extract.Attachment(ordinal, name, extract.type_for_name(name) or "txt",
                                        len(data), f"sha256:{hashlib.sha256(data).hexdigest()}",
                                        str(path)))
    stored = kept.store(found, sub.job, store.as_uri(), None)
    _write(conn, sub.job, _content("the message", stored))
    return sub, stored


def _make(database_url: str, limit: int = attachments.BATCH, replicas: int = 1) -> list[int]:
    async def go() -> list[int]:
        pool = db.async_pool(database_url, min_size=replicas, max_size=replicas)
        await pool.open()
        try:
            return list(await asyncio.gather(*(attachments.make_children(pool, limit=limit)
                                               for _ in range(replicas))))
        finally:
            await pool.close()

    return asyncio.run(go())


def _admin(database_url: str, action, **keys):
    async def go():
        pool = db.async_pool(database_url, min_size=1, max_size=1)
        await pool.open()
        try:
            return await action(pool, **keys)
        finally:
            await pool.close()

    return asyncio.run(go())


def _children(conn, parent_doc_id) -> list[dict]:
    return conn.execute(
        "SELECT d.*, a.attachment_id, a.ordinal FROM message_attachments a "
        "JOIN documents d ON d.doc_id = a.child_doc_id WHERE a.doc_id = %s ORDER BY a.ordinal",
        (parent_doc_id,)).fetchall()


def _child_job(conn, child: dict) -> jobs.IngestJob:
    payload = conn.execute("SELECT payload FROM job_outbox WHERE run_id = %s",
                           (child["attachment_id"],)).fetchone()["payload"]
    return jobs.decode(jobs.encode(jobs.IngestJob.model_validate(payload)))


def _ingest_child(conn, child: dict, text: str = "the attachment") -> jobs.IngestJob:
    """What the worker does with the child's job: run it to a version."""
    job = _child_job(conn, child)
    ops.set_status(conn, job.run_id, "running")
    _write(conn, job, _content(text))
    return job


def _served(conn, doc_id) -> bool:
    return conn.execute("SELECT count(*) AS n FROM document_versions WHERE doc_id = %s "
                        "AND is_active", (doc_id,)).fetchone()["n"] == 1


def test_each_attachment_becomes_one_child_document_with_its_run_and_job(database_url, conn,
                                                                          tenants, store):
    # Given a message version with two attachments the worker stored
    user = tenants.user()
    message, stored = _message(conn, store, user, {"report.pdf": b"%PDF-1.4 x",
                                                   "notes.txt": b"plain notes"})

    # When the relay's feeder runs, twice
    assert _make(database_url) == [2]
    assert _make(database_url) == [0]

    # Then each attachment is one document of the tenant, naming its message, with one queued
    # run (its id the attachment's, so its stored file lies in the run's own folder) and a job
    children = _children(conn, message.doc_id)
    assert [(c["title"], c["source_type"], c["parent_doc_id"], c["tenant_id"])
            for c in children] == [("report.pdf", "pdf", message.doc_id, user.tenant_id),
                                   ("notes.txt", "txt", message.doc_id, user.tenant_id)]
    for child, item in zip(children, stored, strict=True):
        run = submit.run_row(conn, child["attachment_id"])
        assert (run["status"], run["run_type"], run["doc_id"], run["initiated_by"]) == (
            "queued", "attachment", child["doc_id"], user.user_id)
        assert run["config"]["original_filename"] == child["title"]
        job = _child_job(conn, child)
        assert (job.doc_id, job.upload_uri, job.content_hash, job.attachment_depth) == (
            child["doc_id"], item.upload_uri, item.content_hash, 1)
        assert objectstore.confine_upload(job.upload_uri, store_uri=store.as_uri(),
                                          tenant_id=user.tenant_id, run_id=job.run_id)
        assert objectstore.file_path(job.upload_uri).read_bytes() in (b"%PDF-1.4 x",
                                                                       b"plain notes")
    assert conn.execute("SELECT count(*) AS n FROM documents").fetchone()["n"] == 3
    assert conn.execute("SELECT count(*) AS n FROM job_outbox").fetchone()["n"] == 2


def test_replicas_at_once_make_each_child_once(database_url, conn, tenants, store):
    # Given a message with five attachments, and three relays claiming one at a time at once
    user = tenants.user()
    message, _ = _message(conn, store, user, {f"{n}.txt": b"x%d" % n for n in range(5)})
    made = []
    while sum(batch := _make(database_url, limit=1, replicas=3)):
        made += batch
    # Then five children exist, each made by exactly one of them
    assert sum(made) == 5
    assert len(_children(conn, message.doc_id)) == 5
    assert conn.execute("SELECT count(*) AS n FROM ingestion_runs WHERE run_type = 'attachment'"
                        ).fetchone()["n"] == 5


def test_children_stay_in_their_tenant(database_url, conn, tenants, store):
    # Given two tenants' messages, each with an attachment of the same name and bytes
    acme, other = tenants.user("acme"), tenants.user("globex")
    mine, _ = _message(conn, store, acme, {"contract.txt": b"same bytes"})
    theirs, _ = _message(conn, store, other, {"contract.txt": b"same bytes"})
    _make(database_url)
    # Then each child belongs to its message's tenant, and neither tenant sees the other's
    # family from either side
    for sub, user in ((mine, acme), (theirs, other)):
        (child,) = _children(conn, sub.doc_id)
        assert child["tenant_id"] == user.tenant_id
        assert submit.run_row(conn, child["attachment_id"])["tenant_id"] == user.tenant_id

    async def family(tenant_id, doc_id):
        pool = db.async_pool(database_url, min_size=1, max_size=1)
        await pool.open()
        try:
            async with pool.connection() as c:
                return await attachments.family(c, tenant_id=tenant_id, doc_id=doc_id)
        finally:
            await pool.close()

    (child,) = _children(conn, mine.doc_id)
    assert asyncio.run(family(acme.tenant_id, mine.doc_id))["attachments"][0]["doc_id"] == \
        child["doc_id"]
    assert asyncio.run(family(other.tenant_id, mine.doc_id)) == {"parent": None,
                                                                  "attachments": []}
    assert asyncio.run(family(other.tenant_id, child["doc_id"])) == {"parent": None,
                                                                      "attachments": []}


def test_children_are_served_only_with_their_message(database_url, conn, tenants, store):
    # Given a message whose attachment has become a served document
    admin_user = tenants.user()
    message, _ = _message(conn, store, admin_user, {"a.txt": b"attached"})
    _make(database_url)
    (child,) = _children(conn, message.doc_id)
    _ingest_child(conn, child)
    assert _served(conn, child["doc_id"])
    keys = {"tenant_id": admin_user.tenant_id}

    # When an admin takes the message down, Then the attachment goes with it
    _admin(database_url, admin.deactivate, **keys, doc_id=message.doc_id)
    assert not _served(conn, child["doc_id"])
    # and the attachment alone cannot be served while its message is not
    with pytest.raises(errors.Conflict, match="reactivate the e-mail"):
        _admin(database_url, admin.reactivate, **keys, doc_id=child["doc_id"])
    assert not _served(conn, child["doc_id"])

    # When the message is served again, Then so is its attachment
    _admin(database_url, admin.reactivate, **keys, doc_id=message.doc_id)
    assert _served(conn, child["doc_id"])
    # An attachment alone can be taken down and served again while its message is served
    _admin(database_url, admin.deactivate, **keys, doc_id=child["doc_id"])
    assert _served(conn, message.doc_id) and not _served(conn, child["doc_id"])
    _admin(database_url, admin.reactivate, **keys, doc_id=child["doc_id"])
    assert _served(conn, child["doc_id"])


def test_a_new_version_of_the_message_retires_the_old_attachments(database_url, conn, tenants,
                                                                   store):
    # Given a message (an S3 object, versioned by its key) with two attachments: one already a
    # served document, one whose run is still under way
    user = tenants.user()
    first, _ = _message(conn, store, user, {"old.txt": b"v1 attachment", "slow.txt": b"slow"},
                        source_uri="s3://mail/inbox/1.eml")
    _make(database_url)
    done, slow = _children(conn, first.doc_id)
    _ingest_child(conn, done)

    # When the message gets a new version with an attachment of its own
    second, _ = _message(conn, store, user, {"new.txt": b"v2 attachment"}, body=b"# Hi v2\n",
                         source_uri="s3://mail/inbox/1.eml")
    assert second.doc_id == first.doc_id

    # Then the old version's attachment is no longer served, and the slow one, finishing
    # after the message moved on, stores its version unserved
    assert not _served(conn, done["doc_id"])
    job = _ingest_child(conn, slow)
    assert submit.run_row(conn, job.run_id)["status"] == "succeeded"
    assert not _served(conn, slow["doc_id"])
    # and the new version's attachment becomes a document that is served
    assert _make(database_url) == [1]
    (new,) = [c for c in _children(conn, first.doc_id) if c["title"] == "new.txt"]
    _ingest_child(conn, new)
    assert _served(conn, new["doc_id"])


def test_an_attachment_of_a_version_taken_down_first_waits(database_url, conn, tenants, store):
    # Given a message taken down before the relay made its attachment a document
    user = tenants.user()
    message, _ = _message(conn, store, user, {"a.txt": b"attached"})
    _admin(database_url, admin.deactivate, tenant_id=user.tenant_id, doc_id=message.doc_id)
    # Then the relay leaves it; served again, the message gets its attachment
    assert _make(database_url) == [0]
    _admin(database_url, admin.reactivate, tenant_id=user.tenant_id, doc_id=message.doc_id)
    assert _make(database_url) == [1]


def _age(path: Path, days: float) -> None:
    stamp = time.time() - days * 86400
    os.utime(path, (stamp, stamp))


def test_cleanup_keeps_a_waiting_attachments_file_while_its_message_is_served(database_url, conn,
                                                                              tenants, store, s3,
                                                                              tmp_path):
    # Given a stored attachment the relay has not made a document of yet, older than the TTL
    user = tenants.user()
    message, (item,) = _message(conn, store, user, {"a.txt": b"attached"})
    path = objectstore.file_path(item.upload_uri)
    _age(path, 3)
    policy = cleanup.Policy(upload_ttl_s=86400, failed_ttl_s=7 * 86400, artifact_retention_s=-1)

    def sweep() -> None:
        cleanup.run(database_url, s3, upload_store_uri=store.as_uri(),
                    artifact_store_uri=(tmp_path / "artifacts").as_uri(), policy=policy)

    # When cleanup runs, Then the file stays: the attachment's run-to-be needs it
    sweep()
    assert path.is_file()
    # Once its message is taken down, nothing will read it: it goes
    _admin(database_url, admin.deactivate, tenant_id=user.tenant_id, doc_id=message.doc_id)
    sweep()
    assert not path.exists()


def test_a_superseded_message_run_records_no_attachments_and_leaves_no_files(conn, tenants,
                                                                             store):
    # Given an S3 message changed twice, the newer run already written
    user = tenants.user()
    register_vector(conn)
    older = submit.submit(conn, None, store, user, b"# v1\n", source_uri="s3://mail/k.eml",
                          copies=0)
    newer = submit.submit(conn, None, store, user, b"# v2\n", source_uri="s3://mail/k.eml",
                          copies=0)
    for sub in (older, newer):
        ops.set_status(conn, sub.run_id, "running")
    _write(conn, newer.job, _content("v2"))
    # When the older run, whose attachment the worker stored, finishes last
    folder = store.parent / "kept-older"
    folder.mkdir()
    (folder / "1.txt").write_bytes(b"old attachment")
    found = [extract.Attachment(1, "a.txt", "txt", 14, "sha256:x", str(folder / "1.txt"))]
    (item,) = kept.store(found, older.job, store.as_uri(), None)
    version, _ = index.write(conn, older.job, _content("v1", [item]), {"stages": {}},
                             started=time.monotonic(), fts_config="english", fence=0)
    kept.settle([item], version, None)
    # Then it is superseded: no attachment row, and its stored file is gone
    assert version == 0
    assert conn.execute("SELECT count(*) AS n FROM message_attachments").fetchone()["n"] == 0
    assert not objectstore.file_path(item.upload_uri).exists()
