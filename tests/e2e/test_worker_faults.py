"""Every fault of the worker issue leaves the system correct: real worker processes, real
Postgres, real moto SQS with short visibility timeouts and stale windows (stack.WORKER_TEST_ENV)."""

from __future__ import annotations

import signal
import time

import pytest

from tests.support import documents, stack, submit
from tests.support.stack import wait_until

pytestmark = pytest.mark.slow


def _queues_empty(queues) -> bool:
    depth, dead = queues.queue.depth(), queues.queue.depth(url=queues.dlq_url)
    return depth["visible"] + depth["in_flight"] + dead["visible"] + dead["in_flight"] == 0


def _long_markdown(sections: int = 150) -> bytes:
    """Long enough that embedding takes well over ten seconds on two idle cores (~200 chunks)."""
    return documents.make_markdown(sections)


def test_same_job_delivered_five_times_makes_one_version(conn, queues, store_root, tenants,
                                                         stack_env, out_dir):
    # Given one job whose message was delivered five times
    user = tenants.user()
    job = submit.submit(conn, queues.queue, store_root, user, documents.make_markdown(3), copies=5)

    # When a worker drains the queue
    worker = stack.start_worker(stack_env, out_dir, once=True)
    assert worker.proc.wait(240) == 0, worker.logs()[-3000:]

    # Then the run succeeded once, with one version, and every copy was deleted
    run = submit.run_row(conn, job.run_id)
    assert run["status"] == "succeeded"
    assert len(submit.versions(conn, job.doc_id)) == 1
    # Copies that arrived while the first held the run came back once more, then were deleted.
    assert run["delivery_count"] >= 5
    wait_until(lambda: _queues_empty(queues), timeout=10, message="queue and DLQ empty")
    assert '"event":"worker started"' in worker.logs() and '"queued":1' in worker.logs()


def test_new_content_for_same_source_leaves_one_active_version(conn, queues, store_root, tenants,
                                                               stack_env, out_dir):
    # Given a document (path-based identity, as S3 sync makes) already processed once
    user = tenants.user()
    uri = "s3://bucket/handbook.md"
    first = submit.submit(conn, queues.queue, store_root, user, documents.make_markdown(2),
                          source_uri=uri)
    worker = stack.start_worker(stack_env, out_dir)
    wait_until(lambda: submit.status(conn, first.run_id) == "succeeded", timeout=180, message="v1")

    # When new content arrives for the same source
    second = submit.submit(conn, queues.queue, store_root, user, documents.make_markdown(3),
                           source_uri=uri)
    wait_until(lambda: submit.status(conn, second.run_id) == "succeeded", timeout=120, message="v2")
    worker.stop()

    # Then the same document has two versions and exactly one is active: the newest
    assert first.doc_id == second.doc_id
    versions = submit.versions(conn, first.doc_id)
    assert [v["version_number"] for v in versions] == [1, 2]
    assert [v["is_active"] for v in versions] == [False, True]
    assert versions[0]["deactivated_at"] is not None
    assert versions[1]["content_hash"] == second.job.content_hash


def test_two_workers_ten_jobs_process_each_run_once(conn, queues, store_root, tenants, stack_env,
                                                    out_dir):
    # Given ten queued jobs, each delivered twice, and two workers on the same queue
    user = tenants.user()
    jobs = [submit.submit(conn, queues.queue, store_root, user,
                          documents.make_markdown(1) + f"\n\nJob {i}.\n".encode(), copies=2)
            for i in range(10)]
    workers = [stack.start_worker(stack_env, out_dir, name=f"worker-{i}") for i in range(2)]

    # When both have drained the queue
    wait_until(lambda: all(submit.status(conn, j.run_id) == "succeeded" for j in jobs), timeout=300,
               message="all ten runs succeeded")
    for w in workers:
        assert w.stop() == 0

    # Then each run was processed by exactly one worker, exactly once
    logs = "".join(w.logs() for w in workers)
    for job in jobs:
        assert logs.count(f'"event":"job started","run_id":"{job.run_id}"') == 1
        assert len(submit.versions(conn, job.doc_id)) == 1
    assert all(w.logs().count('"event":"job started"') > 0 for w in workers), "both worked"


def test_corrupt_pdf_fails_with_reason_and_leaves_queue_and_dlq_empty(conn, queues, store_root,
                                                                     tenants, stack_env, out_dir):
    user = tenants.user()
    job = submit.submit(conn, queues.queue, store_root, user, documents.make_corrupt_pdf(),
                        name="broken.pdf")

    worker = stack.start_worker(stack_env, out_dir, once=True)
    assert worker.proc.wait(240) == 0, worker.logs()[-3000:]

    run = submit.run_row(conn, job.run_id)
    assert run["status"] == "failed" and run["finished_at"] is not None
    assert run["error"].startswith("extract:") and "PDF" in run["error"]
    assert run["error"].count(".") >= 1 and "\n" not in run["error"]
    assert submit.versions(conn, job.doc_id) == []
    # the raw upload is kept for debugging
    assert job.upload_path.exists()
    wait_until(lambda: _queues_empty(queues), timeout=10, message="queue and DLQ empty")


def test_bad_documents_fail_naming_their_stage(conn, queues, store_root, tenants, stack_env,
                                               out_dir):
    # Given an encrypted PDF, a scanned PDF without text, a zip bomb posing as DOCX,
    # an empty file, and a job whose upload has vanished
    user = tenants.user()
    cases = {
        "encrypted.pdf": (documents.make_encrypted_pdf("secret plans"), "password"),
        "scan.pdf": (documents.make_scanned_pdf(), "no extractable text"),
        "bomb.docx": (documents.make_zip_bomb_docx(), "zip bomb"),
        "empty.txt": (b"", "empty"),
        "gone.md": (b"# soon gone\n\ntext", "no longer in the upload store"),
    }
    jobs = {name: submit.submit(conn, queues.queue, store_root, user, data, name=name)
            for name, (data, _) in cases.items()}
    jobs["gone.md"].upload_path.unlink()

    worker = stack.start_worker(stack_env, out_dir, once=True)
    assert worker.proc.wait(240) == 0, worker.logs()[-3000:]

    # Then each run failed with one sentence that names the stage and the problem
    for name, (_, expected) in cases.items():
        run = submit.run_row(conn, jobs[name].run_id)
        assert run["status"] == "failed", name
        stage = "read" if name == "gone.md" else "extract"
        assert run["error"].startswith(f"{stage}:"), (name, run["error"])
        assert expected in run["error"].lower(), (name, run["error"])
    wait_until(lambda: _queues_empty(queues), timeout=10, message="queue and DLQ empty")


def test_garbage_message_goes_to_dlq_with_reason(queues, stack_env, out_dir):
    queues.queue.send("this is not a job")
    queues.queue.send('{"job_type": "upload_ingest", "run_id": "not-a-uuid"}')

    worker = stack.start_worker(stack_env, out_dir, once=True)
    assert worker.proc.wait(240) == 0, worker.logs()[-3000:]

    dead: list = []

    def collected() -> bool:
        dead.extend(_dlq(queues))
        return len(dead) >= 2

    wait_until(collected, timeout=15, message="two dead letters")
    reasons = sorted(m.attributes["dlq_reason"] for m in dead)
    assert "not JSON" in reasons[1] or "not JSON" in reasons[0]
    assert any("run_id" in r for r in reasons)
    assert queues.queue.depth()["visible"] == 0


def _dlq(queues) -> list:
    from shared.queue import Queue

    return Queue(queues.client, queues.dlq_url).receive(10, 1)


def test_database_down_while_persisting_failure_keeps_the_message(conn, queues, store_root,
                                                                  tenants, stack_env, out_dir):
    # Given a database that drops the connection of whoever writes a failed status
    conn.execute("""
        CREATE FUNCTION drop_connection() RETURNS trigger AS $$
        BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$
        LANGUAGE plpgsql;
        CREATE TRIGGER zz_drop_on_failed BEFORE UPDATE OF status ON ingestion_runs
        FOR EACH ROW WHEN (NEW.status = 'failed') EXECUTE FUNCTION drop_connection();
    """)
    user = tenants.user()
    job = submit.submit(conn, queues.queue, store_root, user, documents.make_corrupt_pdf(),
                        name="broken.pdf")

    # When a worker fails the document but cannot persist the failure
    worker = stack.start_worker(stack_env, out_dir)
    wait_until(lambda: submit.run_row(conn, job.run_id)["delivery_count"] >= 2, timeout=90,
               message="the message was delivered again")

    # Then the message was not deleted: SQS redelivered it and, after maxReceiveCount, the DLQ
    # holds it; the run was never marked failed
    dead = wait_until(lambda: _dlq(queues), timeout=60, message="message in the DLQ")
    worker.stop()
    assert dead[0].body == job.body
    assert submit.status(conn, job.run_id) == "running"
    assert "could not persist the failure" in worker.logs()


def test_sigkill_mid_job_is_taken_over_without_duplicates(conn, queues, store_root, tenants,
                                                          stack_env, out_dir):
    # Given a worker in the middle of embedding a long document
    user = tenants.user()
    job = submit.submit(conn, queues.queue, store_root, user, _long_markdown())
    first = stack.start_worker(stack_env, out_dir, name="worker-killed")
    wait_until(lambda: submit.run_row(conn, job.run_id)["stage"] == "embed", timeout=120,
               message="embedding started")

    # When it is killed without warning and another worker starts
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    second = stack.start_worker(stack_env, out_dir, name="worker-second")

    # Then the second takes the run over after the stale window and finishes it once
    wait_until(lambda: submit.status(conn, job.run_id) == "succeeded", timeout=240,
               message="run succeeded after takeover")
    second.stop()
    run = submit.run_row(conn, job.run_id)
    assert run["takeover_count"] == 1
    assert "stale takeover" in second.logs()
    [version] = submit.versions(conn, job.doc_id)
    chunks = conn.execute("SELECT count(*) AS n, count(DISTINCT ordinal) AS d FROM chunks "
                          "WHERE doc_version_id = %s", (version["doc_version_id"],)).fetchone()
    assert chunks["n"] == chunks["d"] == version["chunk_count"]


def test_job_three_times_longer_than_visibility_is_received_once(conn, queues, store_root,
                                                                 tenants, stack_env, out_dir):
    # Given a visibility timeout of 2 s and a job that takes well over 6 s
    user = tenants.user()
    job = submit.submit(conn, queues.queue, store_root, user, _long_markdown())
    env = {**stack_env, "SQS_VISIBILITY_TIMEOUT_S": "2", "HEARTBEAT_INTERVAL_S": "0.5"}
    worker = stack.start_worker(env, out_dir)

    wait_until(lambda: submit.status(conn, job.run_id) == "succeeded", timeout=240, message="done")
    worker.stop()

    run = submit.run_row(conn, job.run_id)
    elapsed = (run["finished_at"] - run["started_at"]).total_seconds()
    assert elapsed > 6, f"the job took only {elapsed:.1f}s; make the document longer"
    assert run["delivery_count"] == 1 and run["takeover_count"] == 0
    assert len(submit.versions(conn, job.doc_id)) == 1


def test_sigterm_mid_job_exits_cleanly_and_run_completes_on_restart(conn, queues, store_root,
                                                                    tenants, stack_env, out_dir):
    user = tenants.user()
    job = submit.submit(conn, queues.queue, store_root, user, _long_markdown())
    first = stack.start_worker(stack_env, out_dir, name="worker-terminated")
    wait_until(lambda: submit.run_row(conn, job.run_id)["stage"] == "embed", timeout=120,
               message="embedding started")

    # When it gets SIGTERM mid-job
    started = time.monotonic()
    assert first.stop(timeout=30) == 0, first.logs()[-3000:]
    assert time.monotonic() - started < 15
    assert "released unfinished jobs at shutdown" in first.logs()
    # The shutdown itself never fails the run
    assert submit.status(conn, job.run_id) == "running"

    # Then a restarted worker completes it
    second = stack.start_worker(stack_env, out_dir, name="worker-restarted")
    wait_until(lambda: submit.status(conn, job.run_id) == "succeeded", timeout=240, message="done")
    second.stop()
    assert len(submit.versions(conn, job.doc_id)) == 1


def test_lost_lock_connection_aborts_the_job_and_it_is_taken_over(conn, queues, store_root,
                                                                  tenants, stack_env, out_dir):
    # Given a worker embedding a long document while holding the run's advisory lock
    user = tenants.user()
    job = submit.submit(conn, queues.queue, store_root, user, _long_markdown())
    worker = stack.start_worker(stack_env, out_dir)
    wait_until(lambda: submit.run_row(conn, job.run_id)["stage"] == "embed", timeout=120,
               message="embedding started")

    # When the connection that holds the lock is cut
    killed = conn.execute(
        "SELECT pg_terminate_backend(pid) AS ok FROM pg_locks "
        "WHERE locktype = 'advisory' AND granted AND database = "
        "(SELECT oid FROM pg_database WHERE datname = current_database())").fetchall()
    assert killed and all(k["ok"] for k in killed)

    # Then the job aborts instead of writing without the lock, and the run is finished later
    stack.wait_for_log(worker, "the run's lock is gone", timeout=30)
    wait_until(lambda: submit.status(conn, job.run_id) == "succeeded", timeout=240,
               message="run succeeded after takeover")
    worker.stop()
    assert submit.run_row(conn, job.run_id)["takeover_count"] == 1
    assert len(submit.versions(conn, job.doc_id)) == 1
