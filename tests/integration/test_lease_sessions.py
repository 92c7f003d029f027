"""A worker's lock sessions between jobs, and its stage writes (docs/decisions/0232, 0301): a
job that ended cleanly leaves its session to the next job with no lock held; a session that may
still hold something is closed; a new stage right after another write waits a fifth of a
heartbeat instead of costing a write of its own; a shared session holds many document runs,
beats them in one statement, lets each go alone, and loses them all when it dies. Real
Postgres, the worker's own lease."""

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
    sessions = runs.LockSessions(database_url, keep=2)
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
    sessions = runs.LockSessions(database_url, keep=2)
    job = _job(conn, tenants, tmp_path)
    lease = _lease(database_url, job, sessions)
    lease.claim()
    lease.lost.set()  # as the heartbeat does when a write finds the run no longer ours

    lease.close()

    assert lease.conn.closed
    assert sessions.take()[1] is False  # nothing kept: a new session


def test_a_kept_session_that_died_is_replaced_at_claim(database_url, conn, tenants, tmp_path):
    # Given a kept session whose backend was ended while idle (a restart, an operator)
    sessions = runs.LockSessions(database_url, keep=2)
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
    writes: list[list[str]] = []
    execute = lease.conn.execute

    def counting(query, params=None, **kwargs):
        if query == runs.Q["heartbeat_many"]:
            writes.append(params["stages"])
        return execute(query, params, **kwargs)

    lease.conn.execute = counting  # type: ignore[method-assign]  # a spy; the database is real

    # When five stages follow each other within a few milliseconds, right after the claim
    reported = time.monotonic()
    for stage in ("read", "extract", "chunk", "embed", "index"):
        lease.report(stage, 0.5)

    # Then one write, a fifth of the heartbeat after the claim, carries the last of them
    _wait_for_stage(conn, job.run_id, "index")
    assert writes == [["index"]]
    assert time.monotonic() - reported >= 0.1
    # and a stage that comes after a quiet spell is written at once (by the heartbeat thread)
    time.sleep(0.3)
    quiet = time.monotonic()
    lease.report("done-ish", 0.9)
    _wait_for_stage(conn, job.run_id, "done-ish")
    assert time.monotonic() - quiet < 0.15
    assert writes[-1] == ["done-ish"]
    lease.close()


def test_a_shared_session_holds_many_runs_and_lets_each_go_alone(database_url, conn, tenants,
                                                                   tmp_path):
    # Given three document runs claimed on one shared session (docs/decisions/0301)
    sessions = runs.LockSessions(database_url, keep=0, shared=1, heartbeat_s=1.0)
    jobs = [_job(conn, tenants, tmp_path, f"# S{k}\n\nText {k}.\n".encode()) for k in range(3)]
    leases = [runs.RunLease(database_url, j.job, stale_after_s=60, heartbeat_s=1.0,
                            connections=sessions, shared=True) for j in jobs]
    for lease in leases:
        assert lease.claim().claim is runs.Claim.STARTED
        lease.start_heartbeat()
    assert len({lease.conn.info.backend_pid for lease in leases}) == 1

    # When a second delivery of the first run is claimed in the same process
    again = runs.RunLease(database_url, jobs[0].job, stale_after_s=60, heartbeat_s=1.0,
                          connections=sessions, shared=True)

    # Then it is busy (the session would have granted the lock twice), and leaves the lock
    assert again.claim().claim is runs.Claim.BUSY
    again.close()
    assert not _lock_is_free(database_url, jobs[0].run_id)
    # and one heartbeat statement beats all three runs
    for k, lease in enumerate(leases):
        lease.report(f"stage-{k}", 0.5)
    for k, j in enumerate(jobs):
        _wait_for_stage(conn, j.run_id, f"stage-{k}")
    # and ending one run lets go of its lock only
    leases[1].close()
    assert _lock_is_free(database_url, jobs[1].run_id)
    assert not _lock_is_free(database_url, jobs[0].run_id)
    assert not _lock_is_free(database_url, jobs[2].run_id)
    for lease in (leases[0], leases[2]):
        lease.close()
    sessions.close()


def test_a_dead_shared_session_loses_every_run_on_it(database_url, conn, tenants, tmp_path):
    # Given two runs on one shared session, heartbeating, each with a callback for its loss
    sessions = runs.LockSessions(database_url, keep=0, shared=1, heartbeat_s=0.5)
    jobs = [_job(conn, tenants, tmp_path, f"# D{k}\n\nText {k}.\n".encode()) for k in range(2)]
    leases = [runs.RunLease(database_url, j.job, stale_after_s=60, heartbeat_s=0.5,
                            connections=sessions, shared=True) for j in jobs]
    lost: list[int] = []
    for k, lease in enumerate(leases):
        lease.claim()
        lease.start_heartbeat()
        lease.when_lost(lambda k=k: lost.append(k))

    # When its backend is ended (an operator, a restart)
    conn.execute("SELECT pg_terminate_backend(%s, 5000)", (leases[0].conn.info.backend_pid,))

    # Then the next heartbeat finds out: both leases are lost, both callbacks ran, the locks
    # are free, and a new lease gets a live session
    deadline = time.monotonic() + 5
    while sorted(lost) != [0, 1]:
        assert time.monotonic() < deadline, lost
        time.sleep(0.02)
    assert all(lease.lost.is_set() for lease in leases)
    assert _lock_is_free(database_url, jobs[0].run_id)
    for lease in leases:
        lease.close()
    fresh = runs.RunLease(database_url, _job(conn, tenants, tmp_path, b"# N\n\nNew.\n").job,
                          stale_after_s=60, heartbeat_s=0.5, connections=sessions, shared=True)
    assert fresh.claim().claim is runs.Claim.STARTED
    fresh.close()
    sessions.close()


def _wait_for_stage(conn, run_id, stage: str, timeout: float = 3) -> None:
    deadline = time.monotonic() + timeout
    while submit.run_row(conn, run_id)["stage"] != stage:
        assert time.monotonic() < deadline, f"stage {stage} never reached the run"
        time.sleep(0.01)
