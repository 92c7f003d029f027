"""Every fault of the worker issues leaves the system correct and live: real worker processes,
real Postgres, real moto SQS, with the product's windows divided by one factor
(stack.WORKER_TEST_ENV, stack.TIME_SCALE). Jobs that must be in flight when a fault hits are
held at a stage by the worker's test-only pause point, never by hoping embedding is slow."""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

import psycopg
import pytest

from cli.embedded import EmbeddedPostgres
from shared import db
from shared.db import migrate
from shared.settings import WorkerSettings
from tests.conftest import Tenants
from tests.support import crashers, documents, stack, submit
from tests.support.stack import wait_until

pytestmark = pytest.mark.slow


def _queues_empty(queues) -> bool:
    depth, dead = queues.queue.depth(), queues.queue.depth(url=queues.dlq_url)
    return depth["visible"] + depth["in_flight"] + dead["visible"] + dead["in_flight"] == 0


# The windows a takeover may take, from the scaled settings the workers run with.
_VISIBILITY_S = float(stack.WORKER_TEST_ENV["SQS_VISIBILITY_TIMEOUT_S"])
_POLL_S = float(stack.WORKER_TEST_ENV["SQS_WAIT_TIME_S"])
_GRACE_S = float(stack.WORKER_TEST_ENV["SHUTDOWN_GRACE_S"])
# Process start, claim and scheduling on a loaded two-core machine; far below the stale window
# (stack.WORKER_TEST_ENV["RUNNING_STALE_AFTER_S"]) that takeovers waited for before.
_SLACK_S = 8.0


def _held(env: dict[str, str], tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A worker env whose jobs wait at the embed stage while the returned file exists."""
    flag = tmp_path / "hold-at-embed"
    flag.touch()
    return {**env, "WORKER_PAUSE_AT_STAGE": "embed", "WORKER_PAUSE_FILE": str(flag)}, flag


def _worker(env: dict[str, str], out_dir: Path, name: str) -> stack.Process:
    """A worker whose log holds only this test's lines; returns once it polls."""
    (out_dir / f"{name}.log").unlink(missing_ok=True)
    worker = stack.start_worker(env, out_dir, name=name)
    stack.wait_for_log(worker, '"event":"worker started"', timeout=120)
    return worker


def _at_embed(conn, run_id) -> None:
    wait_until(lambda: submit.run_row(conn, run_id)["stage"] == "embed", timeout=120,
               message="job held at the embed stage")


def _has_live_owner(conn, run_id) -> bool:
    return conn.execute("SELECT run_has_live_owner(%s) AS live", (run_id,)).fetchone()["live"]


def test_same_job_delivered_five_times_makes_one_version(conn, queues, store_root, tenants,
                                                         stack_env, out_dir):
    # Given one job whose message was delivered five times
    user = tenants.user()
    job = submit.submit(conn, queues.queue, store_root, user, documents.make_markdown(3), copies=5)

    # When a worker drains the queue (copies that find the run held come back when its owner
    # would look stale: 6 s here rather than the scaled 30 s, still ~36 heartbeats)
    worker = stack.start_worker({**stack_env, "RUNNING_STALE_AFTER_S": "6"}, out_dir, once=True)
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
    # (maxReceiveCount receives, each after the scaled visibility timeout)
    dead = wait_until(lambda: _dlq(queues), timeout=180, message="message in the DLQ")
    worker.stop()
    assert dead[0].body == job.body
    assert submit.status(conn, job.run_id) == "running"
    assert "could not persist the failure" in worker.logs()


def test_sigkill_mid_embed_is_taken_over_within_visibility_plus_a_poll(
        conn, queues, store_root, tenants, stack_env, out_dir, tmp_path):
    # Given a worker holding a job at the embed stage, and a second worker polling the queue
    user = tenants.user()
    job = submit.submit(conn, queues.queue, store_root, user, documents.make_markdown(3))
    held_env, _ = _held(stack_env, tmp_path)
    first = _worker(held_env, out_dir, "worker-killed")
    _at_embed(conn, job.run_id)
    second = _worker(stack_env, out_dir, "worker-second")

    # When the first is killed without warning
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    killed = time.monotonic()

    # Then its lock went with its session, and the second takes the run over as soon as the
    # message comes back (visibility timeout plus one poll), whatever the heartbeat says
    wait_until(lambda: submit.run_row(conn, job.run_id)["takeover_count"] == 1,
               timeout=_VISIBILITY_S + _POLL_S + 4 * _SLACK_S, message="run taken over")
    took = time.monotonic() - killed
    assert took < _VISIBILITY_S + _POLL_S + _SLACK_S, f"takeover after {took:.1f}s"
    # and finishes it with no operator action: one version, chunks once each
    wait_until(lambda: submit.status(conn, job.run_id) == "succeeded", timeout=120,
               message="run succeeded after takeover")
    assert second.stop() == 0
    assert "took over a run with no live owner" in second.logs()
    [version] = submit.versions(conn, job.doc_id)
    chunks = conn.execute("SELECT count(*) AS n, count(DISTINCT ordinal) AS d FROM chunks "
                          "WHERE doc_version_id = %s", (version["doc_version_id"],)).fetchone()
    assert chunks["n"] == chunks["d"] == version["chunk_count"]
    assert _dlq_empty(queues)


def _dlq_empty(queues) -> bool:
    dead = queues.queue.depth(url=queues.dlq_url)
    return dead["visible"] + dead["in_flight"] == 0


def test_job_three_times_longer_than_visibility_is_received_once(conn, queues, store_root,
                                                                 tenants, stack_env, out_dir,
                                                                 tmp_path):
    # Given a visibility timeout of 2 s and a job held at the embed stage (the pause point, not
    # a slow model: embedding speed is not what this test is about)
    user = tenants.user()
    job = submit.submit(conn, queues.queue, store_root, user, documents.make_markdown(3))
    held_env, flag = _held({**stack_env, "SQS_VISIBILITY_TIMEOUT_S": "2",
                            "HEARTBEAT_INTERVAL_S": "0.5"}, tmp_path)
    worker = _worker(held_env, out_dir, "worker-long")
    _at_embed(conn, job.run_id)

    # When the job stays in flight for more than three visibility timeouts (the duration is
    # the condition under test: the heartbeat must keep extending the message meanwhile)
    started = submit.run_row(conn, job.run_id)["started_at"]
    wait_until(lambda: conn.execute("SELECT now() - %s > interval '6.5 seconds' AS past",
                                    (started,)).fetchone()["past"],
               timeout=60, interval=0.25, message="three visibility timeouts passed")
    # Then nobody could receive the message meanwhile
    assert queues.client.receive_message(QueueUrl=queues.url, WaitTimeSeconds=0).get(
        "Messages") is None
    flag.unlink()  # and the job, released, finishes

    wait_until(lambda: submit.status(conn, job.run_id) == "succeeded", timeout=120, message="done")
    worker.stop()
    run = submit.run_row(conn, job.run_id)
    elapsed = (run["finished_at"] - run["started_at"]).total_seconds()
    assert elapsed > 6, f"the job was in flight only {elapsed:.1f}s"
    assert run["delivery_count"] == 1 and run["takeover_count"] == 0
    assert len(submit.versions(conn, job.doc_id)) == 1


def test_sigterm_mid_job_releases_message_and_run_at_once(conn, queues, store_root, tenants,
                                                          stack_env, out_dir, tmp_path):
    # Given a worker holding a job at the embed stage
    user = tenants.user()
    job = submit.submit(conn, queues.queue, store_root, user, documents.make_markdown(3))
    held_env, _ = _held(stack_env, tmp_path)
    first = _worker(held_env, out_dir, "worker-terminated")
    _at_embed(conn, job.run_id)
    assert _has_live_owner(conn, job.run_id)

    # When it gets SIGTERM mid-job
    started = time.monotonic()
    assert first.stop(timeout=30) == 0, first.logs()[-3000:]
    assert time.monotonic() - started < _GRACE_S + _SLACK_S

    # Then the message is visible again at once: received within a second
    received = queues.queue.receive(1, wait_s=1, visibility_s=0)
    assert [m.body for m in received] == [job.body]
    # and the run is still running (a shutdown never fails it) with no owner holding it
    assert submit.status(conn, job.run_id) == "running"
    assert not _has_live_owner(conn, job.run_id)
    assert "released unfinished jobs at shutdown" in first.logs()


def test_sigterm_mid_job_hands_the_run_to_the_other_worker_within_seconds(
        conn, queues, store_root, tenants, stack_env, out_dir, tmp_path):
    # Given a worker holding a job at the embed stage, and a second one polling
    user = tenants.user()
    job = submit.submit(conn, queues.queue, store_root, user, documents.make_markdown(3))
    held_env, _ = _held(stack_env, tmp_path)
    first = _worker(held_env, out_dir, "worker-terminated")
    _at_embed(conn, job.run_id)
    second = _worker(stack_env, out_dir, "worker-other")

    # When the first gets SIGTERM
    started = time.monotonic()
    assert first.stop(timeout=30) == 0, first.logs()[-3000:]

    # Then the other takes the run over within the grace period plus one poll (scaled), not
    # after a stale window, and finishes it once
    wait_until(lambda: submit.run_row(conn, job.run_id)["takeover_count"] == 1,
               timeout=4 * _SLACK_S, message="run taken over")
    took = time.monotonic() - started
    assert took < _GRACE_S + _POLL_S + _SLACK_S, f"takeover after {took:.1f}s"
    wait_until(lambda: submit.status(conn, job.run_id) == "succeeded", timeout=120,
               message="run succeeded")
    assert second.stop() == 0
    assert len(submit.versions(conn, job.doc_id)) == 1
    assert _dlq_empty(queues)


def test_lost_lock_connection_aborts_the_job_and_it_is_taken_over(conn, queues, store_root,
                                                                  tenants, stack_env, out_dir,
                                                                  tmp_path):
    # Given a worker holding a job at the embed stage, with the run's advisory lock
    user = tenants.user()
    job = submit.submit(conn, queues.queue, store_root, user, documents.make_markdown(3))
    held_env, flag = _held(stack_env, tmp_path)
    worker = _worker(held_env, out_dir, "worker")
    _at_embed(conn, job.run_id)

    # When the connection that holds the lock is cut (and the hold released)
    killed = conn.execute(
        "SELECT pg_terminate_backend(pid) AS ok FROM pg_locks "
        "WHERE locktype = 'advisory' AND granted AND database = "
        "(SELECT oid FROM pg_database WHERE datname = current_database())").fetchall()
    assert killed and all(k["ok"] for k in killed)
    flag.unlink()

    # Then the job aborts instead of writing without the lock, and the run is taken over
    stack.wait_for_log(worker, "the run's lock is gone", timeout=30)
    wait_until(lambda: submit.status(conn, job.run_id) == "succeeded", timeout=120,
               message="run succeeded after takeover")
    worker.stop()
    assert submit.run_row(conn, job.run_id)["takeover_count"] == 1
    assert len(submit.versions(conn, job.doc_id)) == 1


def test_a_pdf_that_crashes_its_parser_fails_alone_and_the_worker_lives(
        conn, queues, store_root, tenants, stack_env, out_dir):
    # Given three good PDFs and one that inflates past the parser's memory limit, queued at once
    user = tenants.user()
    good = [submit.submit(conn, queues.queue, store_root, user,
                          documents.make_pdf([documents.prose(300, seed=i)] * 2), name=f"g{i}.pdf")
            for i in range(3)]
    limit_mb = WorkerSettings.model_fields["extract_memory_mb"].default
    bad = submit.submit(conn, queues.queue, store_root, user,
                        crashers.make_pdf_bomb(limit_mb * 3 // 2), name="bomb.pdf")

    # When one worker (three slots) takes them
    worker = _worker(stack_env, out_dir, "worker")
    wait_until(lambda: all(submit.status(conn, j.run_id) in ("succeeded", "failed")
                           for j in [*good, bad]), timeout=240, message="all four settled")

    # Then the good ones succeed, the bad one fails with its reason, and the worker still runs
    assert [submit.status(conn, j.run_id) for j in good] == ["succeeded"] * 3
    run = submit.run_row(conn, bad.run_id)
    assert run["status"] == "failed"
    assert run["error"].startswith("extract: the PDF crashed the PDF reader"), run["error"]
    assert "the file may be damaged" in run["error"]
    assert worker.proc.poll() is None, worker.logs()[-3000:]
    assert worker.stop() == 0
    wait_until(lambda: _queues_empty(queues), timeout=10, message="queue and DLQ empty")


@pytest.fixture
def own_pg(tmp_path: Path):
    """A Postgres of this test's own, to stop and restart without touching other tests'."""
    server = EmbeddedPostgres(tmp_path / "pg", disposable=True)
    server.start()
    migrate.apply(server.ensure_database("ingest"))
    yield server
    server.stop("immediate")


def test_postgres_restarted_under_four_inflight_jobs_all_succeed_on_their_own(
        own_pg, queues, store_root, stack_env, out_dir, tmp_path):
    # Given four jobs held in flight on two workers, and a gateway, all on their own Postgres
    url = own_pg.url("ingest")
    env = {**stack_env, "DATABASE_URL": url}
    conn = db.connect(url, autocommit=True)
    user = Tenants(conn).user()
    jobs = [submit.submit(conn, queues.queue, store_root, user,
                          documents.make_markdown(2) + f"\n\nJob {i}.\n".encode())
            for i in range(4)]
    held_env, flag = _held(env, tmp_path)
    workers = [_worker(held_env, out_dir, f"worker-{i}") for i in range(2)]
    gateway = stack.start_gateway({**env, **stack.GATEWAY_TEST_ENV}, out_dir)
    try:
        for job in jobs:
            _at_embed(conn, job.run_id)
        conn.close()

        # When Postgres stops
        own_pg.stop("fast")

        # Then reads answer 503 database_unavailable within seconds, readiness says so, and
        # the workers stay up
        with gateway.client(user.token) as client:
            started = time.monotonic()
            response = client.get("/v1/ingestion-runs")
            took = time.monotonic() - started
            assert response.status_code == 503, response.text
            assert response.json()["code"] == "database_unavailable"
            assert took < 5, f"answered after {took:.1f}s"
            ready = client.get("/health/ready")
            assert ready.status_code == 503 and ready.json()["checks"]["database"] != "ok"
        for worker in workers:
            stack.wait_for_log(worker, "the run's lock is gone", timeout=30)
            assert worker.proc.poll() is None

        # When it comes back (and the jobs are no longer held)
        own_pg.start()
        flag.unlink()

        # Then all four succeed with no operator action, one version each
        conn = db.connect(url, autocommit=True)
        wait_until(lambda: all(submit.status(conn, j.run_id) == "succeeded" for j in jobs),
                   timeout=240, interval=0.5, message="all four runs succeeded")
        assert all(len(submit.versions(conn, j.doc_id)) == 1 for j in jobs)
        with gateway.client(user.token) as client:
            assert client.get("/health/ready").status_code == 200
            assert client.get("/v1/ingestion-runs").status_code == 200
    finally:
        gateway.stop()
        for worker in workers:
            worker.stop()
        with contextlib.suppress(psycopg.Error):
            conn.close()
