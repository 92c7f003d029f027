"""A worker's lock sessions between jobs, and its stage writes (docs/decisions/0232): a job that
ended cleanly leaves its session to the next job with no lock held; a session that may still
hold something is closed; a new stage right after another write waits a fifth of a heartbeat
instead of costing a write of its own. Real Postgres, the worker's own lease."""

from __future__ import annotations

import time

from shared import db
from tests.support import submit
from worker import runs


def _job(conn, tenants, tmp_path, text: bytes = b"# T\n\nText.\n"):
    return submit.submit(conn, None, tmp_path, tenants.user(), text, copies=0)


def _lease(database_url, job, sessions=None, heartbeat_s: float = 5.0) -> runs.RunLease:
    return runs.RunLease(database_url, job.job, stale_after_s=60, heartbeat_s=heartbeat_s,
                         connections=sessions)


def _lock_is_free(database_url: str, run_id) -> bool:
    with db.connect(database_url, autocommit=True) as other:
        got = other.execute("SELECT pg_try_advisory_lock(run_lock_key(%s)) AS ok",
                            (run_id,)).fetchone()["ok"]
        other.execute("SELECT pg_advisory_unlock_all()")
    return bool(got)


def test_a_clean_jobs_session_serves_the_next_job_with_no_lock_left(database_url, conn,
                                                                    tenants, tmp_path):
    # Given a job that claimed its run and ended cleanly
    sessions = runs.LeaseConnections(database_url, keep=2)
    first, second = _job(conn, tenants, tmp_path), _job(conn, tenants, tmp_path, b"# U\n\nOther.\n")
    lease = _lease(database_url, first, sessions)
    assert lease.claim().claim is runs.Claim.STARTED
    pid = lease.conn.info.backend_pid
    assert not _lock_is_free(database_url, first.run_id)
    lease.close()

    # When the next job takes a session
    following = _lease(database_url, second, sessions)

    # Then it is the same session, the first run's lock went with the first job, and the
    # second run is claimed on it
    assert following.conn.info.backend_pid == pid
    assert _lock_is_free(database_url, first.run_id)
    assert following.claim().claim is runs.Claim.STARTED
    following.close()
    sessions.close()


def test_a_lost_lease_closes_its_session(database_url, conn, tenants, tmp_path):
    sessions = runs.LeaseConnections(database_url, keep=2)
    job = _job(conn, tenants, tmp_path)
    lease = _lease(database_url, job, sessions)
    lease.claim()
    lease.lost.set()  # as the heartbeat does when a write finds the run no longer ours

    lease.close()

    assert lease.conn.closed
    assert sessions.take()[1] is False  # nothing kept: a new session


def test_a_kept_session_that_died_is_replaced_at_claim(database_url, conn, tenants, tmp_path):
    # Given a kept session whose backend was ended while idle (a restart, an operator)
    sessions = runs.LeaseConnections(database_url, keep=2)
    first = _lease(database_url, _job(conn, tenants, tmp_path), sessions)
    first.claim()
    pid = first.conn.info.backend_pid
    first.close()
    conn.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))

    # When the next job claims on it
    job = _job(conn, tenants, tmp_path, b"# V\n\nNext.\n")
    lease = _lease(database_url, job, sessions)

    # Then the claim succeeds on a new session, and the delivery was counted once
    assert lease.claim().claim is runs.Claim.STARTED
    assert lease.conn.info.backend_pid != pid
    assert submit.run_row(conn, job.run_id)["delivery_count"] == 1
    lease.close()


def test_stages_in_quick_succession_cost_one_write_and_the_last_one_lands(database_url, conn,
                                                                          tenants, tmp_path):
    # Given a claimed run with its heartbeat going (a fifth of it: 0.2 s)
    job = _job(conn, tenants, tmp_path)
    lease = _lease(database_url, job, heartbeat_s=1.0)
    lease.claim()
    lease.start_heartbeat()
    writes: list[str] = []
    execute = lease.conn.execute

    def counting(query, params=None, **kwargs):
        if query == runs.Q["heartbeat"]:
            writes.append(params["stage"])
        return execute(query, params, **kwargs)

    lease.conn.execute = counting  # type: ignore[method-assign]  # a spy; the database is real

    # When five stages follow each other within a few milliseconds, right after the claim
    for stage in ("read", "extract", "chunk", "embed", "index"):
        lease.report(stage, 0.5)

    # Then none is written at once; within a fifth of the heartbeat one write carries the last
    assert writes == []
    deadline = time.monotonic() + 2
    while submit.run_row(conn, job.run_id)["stage"] != "index":
        assert time.monotonic() < deadline, "the last stage never reached the run"
        time.sleep(0.02)
    assert writes == ["index"]
    # and a stage that comes after a quiet spell is written at once, as before
    time.sleep(0.3)
    lease.report("done-ish", 0.9)
    assert writes[-1] == "done-ish"
    lease.close()
