"""The crash guard fails runs that can no longer finish (spec §11.1), and only those."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from psycopg.types.json import Jsonb

from gateway import crash_guard
from shared import db
from tests.support import stack
from tests.support.stack import wait_until

HOUR = 3600.0
QUARTER = 15 * 60.0


def insert_run(conn, tenant_id, status: str, *, created_ago: timedelta,
               updated_ago: timedelta | None = None, with_job: bool = False) -> uuid.UUID:
    """A run backdated as if created ``created_ago`` and last heartbeat ``updated_ago`` ago."""
    run_id = uuid.uuid4()
    updated_ago = created_ago if updated_ago is None else updated_ago
    conn.execute(
        "INSERT INTO ingestion_runs (run_id, tenant_id, status, created_at, updated_at) "
        "VALUES (%s, %s, 'queued', now() - %s, now() - %s)",
        (run_id, tenant_id, created_ago, updated_ago))
    if status == "running":
        # The way a worker gets there: queued → running, keeping the backdated heartbeat.
        conn.execute("UPDATE ingestion_runs SET status = 'running', started_at = created_at "
                     "WHERE run_id = %s", (run_id,))
    if with_job:
        conn.execute("INSERT INTO job_outbox (run_id, tenant_id, payload) VALUES (%s, %s, %s)",
                     (run_id, tenant_id, Jsonb({"run_id": str(run_id)})))
    return run_id


def run(conn, run_id) -> dict:
    return conn.execute("SELECT * FROM ingestion_runs WHERE run_id = %s", (run_id,)).fetchone()


def job(conn, run_id) -> dict:
    return conn.execute("SELECT * FROM job_outbox WHERE run_id = %s", (run_id,)).fetchone()


def sweep(database_url: str, *, queued_ttl_s: float = HOUR,
          running_stale_s: float = QUARTER) -> crash_guard.GuardResult:
    async def go() -> crash_guard.GuardResult:
        pool = db.async_pool(database_url, min_size=1, max_size=2)
        await pool.open()
        try:
            return await crash_guard.sweep(pool, queued_ttl_s=queued_ttl_s,
                                           running_stale_s=running_stale_s)
        finally:
            await pool.close()

    return asyncio.run(go())


@pytest.fixture
def tenant_id(tenants):
    return tenants.user().tenant_id


def test_queued_run_older_than_ttl_is_failed_as_never_picked_up(database_url, conn, tenant_id):
    # Given a run queued two hours ago, with its job never published
    stale = insert_run(conn, tenant_id, "queued", created_ago=timedelta(hours=2), with_job=True)

    # When the crash guard runs with a one-hour TTL
    result = sweep(database_url)

    # Then the run is failed with a reason the user can act on, and finished
    assert result == crash_guard.GuardResult(ran=True, failed_queued=1, failed_running=0)
    row = run(conn, stale)
    assert row["status"] == "failed" and "never picked up" in row["error"]
    assert row["finished_at"] is not None
    # and its unpublished job is parked, so a returning queue cannot revive a failed run
    assert _is_parked(conn, stale)


def _is_parked(conn, run_id) -> bool:
    """Unpublished and never due again (psycopg cannot load 'infinity', so SQL compares)."""
    return conn.execute("SELECT next_attempt_at = 'infinity' AND published_at IS NULL AS parked"
                        " FROM job_outbox WHERE run_id = %s", (run_id,)).fetchone()["parked"]


def test_fresh_queued_run_is_untouched(database_url, conn, tenant_id):
    # Given a run queued ten minutes ago, with its job waiting
    fresh = insert_run(conn, tenant_id, "queued", created_ago=timedelta(minutes=10),
                       with_job=True)
    before_run, before_job = run(conn, fresh), job(conn, fresh)

    # When the crash guard runs with a one-hour TTL
    result = sweep(database_url)

    # Then nothing about it changes
    assert result.failed_queued == 0
    assert run(conn, fresh) == before_run and job(conn, fresh) == before_job
    assert not _is_parked(conn, fresh)


def test_queued_ttl_counts_from_creation_not_last_update(database_url, conn, tenant_id):
    # Given a run created two hours ago but touched a minute ago (still never picked up)
    stale = insert_run(conn, tenant_id, "queued", created_ago=timedelta(hours=2),
                       updated_ago=timedelta(minutes=1))
    sweep(database_url)
    assert run(conn, stale)["status"] == "failed"


def test_running_run_with_stale_heartbeat_is_failed_as_stopped_responding(database_url, conn,
                                                                         tenant_id):
    # Given a run that started an hour ago and last sent a heartbeat twenty minutes ago
    stale = insert_run(conn, tenant_id, "running", created_ago=timedelta(hours=1),
                       updated_ago=timedelta(minutes=20))

    # When the crash guard runs with a fifteen-minute staleness limit
    result = sweep(database_url)

    # Then the run is failed as abandoned by its worker
    assert result == crash_guard.GuardResult(ran=True, failed_queued=0, failed_running=1)
    row = run(conn, stale)
    assert row["status"] == "failed" and "stopped responding" in row["error"]
    assert row["finished_at"] is not None


def test_running_run_with_fresh_heartbeat_is_untouched(database_url, conn, tenant_id):
    # Given a run that started two hours ago (longer than the queued TTL) but is heartbeating
    alive = insert_run(conn, tenant_id, "running", created_ago=timedelta(hours=2),
                       updated_ago=timedelta(seconds=30))
    before = run(conn, alive)

    # When the crash guard runs
    result = sweep(database_url)

    # Then it keeps running
    assert result.failed_running == 0 and result.failed_queued == 0
    assert run(conn, alive) == before


def test_finished_runs_are_never_touched(database_url, conn, tenant_id):
    # Given old runs that already finished
    done = insert_run(conn, tenant_id, "running", created_ago=timedelta(days=2))
    conn.execute("UPDATE ingestion_runs SET status = 'succeeded', finished_at = now() - "
                 "interval '2 days' WHERE run_id = %s", (done,))
    failed = insert_run(conn, tenant_id, "queued", created_ago=timedelta(days=2))
    conn.execute("UPDATE ingestion_runs SET status = 'failed', error = 'original reason' "
                 "WHERE run_id = %s", (failed,))
    before = (run(conn, done), run(conn, failed))

    # When the crash guard runs
    sweep(database_url)

    # Then they keep their outcome and reason
    assert (run(conn, done), run(conn, failed)) == before


def test_only_one_concurrent_sweep_does_the_work(database_url, conn, tenant_id):
    # Given stale runs and two gateway replicas sweeping at the same moment
    for _ in range(3):
        insert_run(conn, tenant_id, "queued", created_ago=timedelta(hours=2))

    async def both() -> list[crash_guard.GuardResult]:
        pool = db.async_pool(database_url, min_size=2, max_size=2)
        await pool.open()
        try:
            # Hold the lock in a third session so the race is deterministic
            async with pool.connection() as holder, holder.transaction():
                await holder.execute("SELECT pg_advisory_xact_lock(%s)", (crash_guard._LOCK_KEY,))
                skipped = await crash_guard.sweep(pool, queued_ttl_s=HOUR,
                                                  running_stale_s=QUARTER)
            done = await crash_guard.sweep(pool, queued_ttl_s=HOUR, running_stale_s=QUARTER)
            return [skipped, done]
        finally:
            await pool.close()

    # When one holds the guard's lock, Then the other skips its pass; the next pass does it
    skipped, done = asyncio.run(both())
    assert skipped == crash_guard.GuardResult(ran=False)
    assert done.failed_queued == 3


def test_gateway_guard_fails_stale_runs_periodically(stack_env, out_dir, conn, tenant_id):
    # Given a running gateway whose guard passes every half second (TTL 1 h, staleness 1 min)
    gateway = stack.start_gateway({**stack_env, "CRASH_GUARD_INTERVAL_S": "0.5",
                                   "CRASH_GUARD_QUEUED_TTL_HOURS": "1",
                                   "CRASH_GUARD_RUNNING_STALE_MIN": "1"}, out_dir)
    try:
        # When runs go stale after it started
        stale_queued = insert_run(conn, tenant_id, "queued", created_ago=timedelta(hours=2))
        stale_running = insert_run(conn, tenant_id, "running", created_ago=timedelta(hours=1),
                                   updated_ago=timedelta(minutes=5))
        fresh_queued = insert_run(conn, tenant_id, "queued", created_ago=timedelta(minutes=5))
        alive = insert_run(conn, tenant_id, "running", created_ago=timedelta(hours=1),
                           updated_ago=timedelta(seconds=5))

        # Then a later pass fails the stale ones with their reasons
        wait_until(lambda: run(conn, stale_queued)["status"] == "failed"
                   and run(conn, stale_running)["status"] == "failed", timeout=10,
                   message="gateway crash guard failed the stale runs")
        assert "never picked up" in run(conn, stale_queued)["error"]
        assert "stopped responding" in run(conn, stale_running)["error"]
        # and leaves the live ones alone
        assert run(conn, fresh_queued)["status"] == "queued"
        assert run(conn, alive)["status"] == "running"
    finally:
        gateway.stop()
