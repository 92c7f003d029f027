"""A worker reads and deletes a job's upload only inside ``<store>/<tenant_id>/<run_id>/``.

Job messages are written by hand and sent to the real queue, as someone who can write to it
would; a real `ingest worker --once` processes them (docs/decisions/0068).
"""

from __future__ import annotations

import uuid

import pytest

from tests.support import documents, ops, stack, submit

pytestmark = pytest.mark.slow


def test_a_job_naming_a_file_outside_its_run_is_failed_and_nothing_is_read_or_deleted(
        conn, queues, tenants, stack_env, store_root, tmp_path, out_dir):
    # Given another tenant's stored upload (its job not yet sent) and a file outside the store
    victim = tenants.user(tenant="globex")
    theirs = submit.submit(conn, None, store_root, victim, documents.make_markdown(1), copies=0)
    their_bytes = theirs.upload_path.read_bytes()
    outside = tmp_path / "outside" / "secret.md"
    outside.parent.mkdir()
    outside.write_bytes(b"# Secret\n\nNot an upload.\n")

    # and runs of tenant acme whose hand-made jobs name those files
    attacker = tenants.user(tenant="acme")
    store = store_root.resolve().as_uri()
    hostile = {
        "other_tenant": theirs.upload_path.as_uri(),
        "outside_store": outside.as_uri(),
        "etc_passwd": "file:///etc/passwd",
        "traversal": "{store}/{tenant}/{run}/../../" + f"{victim.tenant_id}/{theirs.run_id}/doc.md",
        "other_bucket": f"s3://not-the-store/{attacker.tenant_id}/x/doc.md",
    }
    runs = {}
    for name, uri in hostile.items():
        own = submit.submit(conn, None, store_root, attacker, documents.make_markdown(2),
                            copies=0)
        uri = uri.format(store=store, tenant=attacker.tenant_id, run=own.run_id)
        queues.queue.send(submit.jobs.encode(own.job.model_copy(update={"upload_uri": uri})))
        runs[name] = own
    # and a job of a run that does not exist, naming the other tenant's file
    ghost = theirs.job.model_copy(update={"run_id": uuid.uuid4(), "tenant_id": attacker.tenant_id})
    queues.queue.send(submit.jobs.encode(ghost))

    # When a real worker processes the queue
    worker = stack.start_worker(stack_env, out_dir, once=True)
    assert worker.proc.wait(300) == 0, worker.logs()[-3000:]

    # Then every run failed at read with the reason, and wrote no version
    for name, own in runs.items():
        row = submit.run_row(conn, own.run_id)
        assert row["status"] == "failed", (name, row["status"])
        assert row["error"].startswith("read: the job's upload_uri is not "), (name, row["error"])
        assert "neither read nor deleted" in row["error"]
        assert submit.versions(conn, own.doc_id) == []
        # and the run's own file was not touched either (nothing was deleted)
        assert own.upload_path.exists()
    # the job of a missing run was dead-lettered with its reason
    assert ops.depth(queues, queues.dlq_url) == 1 and ops.depth(queues) == 0
    assert f"run {ghost.run_id} does not exist" in worker.logs()
    # and the files they named are still there, unchanged, and still the other tenant's alone
    assert theirs.upload_path.read_bytes() == their_bytes
    assert outside.read_bytes() == b"# Secret\n\nNot an upload.\n"
    assert submit.status(conn, theirs.run_id) == "queued"
    assert conn.execute("SELECT count(*) AS n FROM chunks").fetchone()["n"] == 0
