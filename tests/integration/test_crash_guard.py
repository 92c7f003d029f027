"""The crash guard finishes off runs that can no longer finish (spec §11.1), and only those,
without racing the workers' takeover: a run no live worker owns gets its job re-published
(bounded, recorded on the run) before it is ever failed (docs/decisions/0076)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

from gateway.operations import crash_guard
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
        # Published when the run was created, as the relay does within seconds.
        conn.execute("INSERT INTO job_outbox (run_id, tenant_id, payload, published_at) "
                     "VALUES (%s, %s, %s, now() - %s)",
                     (run_id, tenant_id, Jsonb({"run_id": str(run_id)}), created_ago))
    return run_id


def owner(database_url: str, run_id) -> psycopg.Connection:
    """A live worker's session: holds the run's advisory lock until closed."""
    session = psycopg.connect(database_url, autocommit=True)
    session.execute("SELECT pg_advisory_lock(run_lock_key(%s))", (run_id,))
    return session


def republished_long_ago(conn, run_id) -> None:
    """As if the last republish happened a whole window ago and helped nothing."""
    conn.execute("UPDATE ingestion_runs SET republished_at = now() - interval '1 hour' "
                 "WHERE run_id = %s", (run_id,))


def is_due_for_publishing(conn, run_id) -> bool:
    return conn.execute("SELECT published_at IS NULL AND next_attempt_at <= now() AS due "
                        "FROM job_outbox WHERE run_id = %s", (run_id,)).fetchone()["due"]


def run(conn, run_id) -> dict:
    return conn.execute("SELECT * FROM ingestion_runs WHERE run_id = %s", (run_id,)).fetchone()


def job(conn, run_id) -> dict:
    return conn.execute("SELECT * FROM job_outbox WHERE run_id = %s", (run_id,)).fetchone()


def sweep(database_url: str, *, queued_ttl_s: float = HOUR,
          running_stale_s: float = QUARTER) -> crash_guard.GuardResult:
    """One pass with the product's default republish window (5 min) and bound (3)."""
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


def test_queued_run_past_its_ttl_is_republished_then_failed_when_that_did_not_help(
        database_url, conn, tenant_id):
    # Given a run queued two hours ago whose published job no worker ever took
    stale = insert_run(conn, tenant_id, "queued", created_ago=timedelta(hours=2), with_job=True)

    # When the crash guard passes, Then it first re-publishes the job through the outbox
    result = sweep(database_url)
    assert result == crash_guard.GuardResult(ran=True, republished=1)
    row = run(conn, stale)
    assert row["status"] == "queued" and row["republish_count"] == 1
    assert is_due_for_publishing(conn, stale)

    # and a pass within the republish window does nothing more
    assert sweep(database_url) == crash_guard.GuardResult(ran=True)

    # When the bounded republishes did not help
    for count in (2, 3):
        republished_long_ago(conn, stale)
        assert sweep(database_url).republished == 1
        assert run(conn, stale)["republish_count"] == count
    republished_long_ago(conn, stale)
    result = sweep(database_url)

    # Then the run is failed with a reason the user can act on, and its job parked
    assert result == crash_guard.GuardResult(ran=True, failed_queued=1)
    row = run(conn, stale)
    assert row["status"] == "failed" and "never picked up" in row["error"]
    assert row["finished_at"] is not None
    assert _is_parked(conn, stale)


def test_queued_run_past_its_ttl_without_a_job_is_failed_at_once(database_url, conn, tenant_id):
    # Given a run queued two hours ago with nothing in the outbox to republish
    stale = insert_run(conn, tenant_id, "queued", created_ago=timedelta(hours=2),
                       updated_ago=timedelta(minutes=1))
    assert sweep(database_url).failed_queued == 1
    assert run(conn, stale)["status"] == "failed"


def _is_parked(conn, run_id) -> bool:
    """Unpublished and never due again (psycopg cannot load 'infinity', so SQL compares)."""
    return conn.execute("SELECT next_attempt_at = 'infinity' AND published_at IS NULL AS parked"
                        " FROM job_outbox WHERE run_id = %s", (run_id,)).fetchone()["parked"]


def test_fresh_queued_run_is_untouched(database_url, conn, tenant_id):
    fresh = insert_run(conn, tenant_id, "queued", created_ago=timedelta(minutes=10),
                       with_job=True)
    before_run, before_job = run(conn, fresh), job(conn, fresh)
    assert sweep(database_url) == crash_guard.GuardResult(ran=True)
    assert run(conn, fresh) == before_run and job(conn, fresh) == before_job


def test_running_run_without_a_live_owner_is_republished_not_failed(database_url, conn,
                                                                     tenant_id):
    # Given a running run whose worker died six minutes ago (no session holds its lock)
    orphan = insert_run(conn, tenant_id, "running", created_ago=timedelta(hours=1),
                        updated_ago=timedelta(minutes=6), with_job=True)

    # When the crash guard passes (republish window five minutes)
    result = sweep(database_url)

    # Then its job goes back to the queue through the outbox and the run keeps running:
    # a worker that receives it takes the run over
    assert result == crash_guard.GuardResult(ran=True, republished=1)
    row = run(conn, orphan)
    assert row["status"] == "running" and row["republish_count"] == 1
    assert row["republished_at"] is not None
    assert is_due_for_publishing(conn, orphan)


def test_running_run_republished_in_vain_is_failed(database_url, conn, tenant_id):
    # Given an ownerless running run whose job was re-published three times without effect
    orphan = insert_run(conn, tenant_id, "running", created_ago=timedelta(hours=1),
                        updated_ago=timedelta(minutes=30), with_job=True)
    conn.execute("UPDATE ingestion_runs SET republish_count = 3 WHERE run_id = %s", (orphan,))
    republished_long_ago(conn, orphan)

    result = sweep(database_url)

    assert result == crash_guard.GuardResult(ran=True, failed_running=1)
    assert result.run_ids == (orphan,)
    row = run(conn, orphan)
    assert row["status"] == "failed" and "no worker could finish the run" in row["error"]
    assert "3 times" in row["error"] and row["finished_at"] is not None


def test_running_run_with_a_live_owner_is_left_to_it(database_url, conn, tenant_id):
    # Given a run whose owner's session lives and which went quiet for six minutes (less than
    # the fifteen-minute stale window that the workers' own takeover uses for a wedged owner)
    quiet = insert_run(conn, tenant_id, "running", created_ago=timedelta(hours=1),
                       updated_ago=timedelta(minutes=6), with_job=True)
    session = owner(database_url, quiet)
    try:
        before = run(conn, quiet)
        assert sweep(database_url) == crash_guard.GuardResult(ran=True)
        assert run(conn, quiet) == before

        # When it stays silent past the stale window, its owner is wedged: republished
        conn.execute("UPDATE ingestion_runs SET updated_at = now() - interval '20 minutes' "
                     "WHERE run_id = %s", (quiet,))
        assert sweep(database_url) == crash_guard.GuardResult(ran=True, republished=1)
    finally:
        session.close()


def test_running_run_with_fresh_heartbeat_is_untouched(database_url, conn, tenant_id):
    alive = insert_run(conn, tenant_id, "running", created_ago=timedelta(hours=2),
                       updated_ago=timedelta(seconds=30), with_job=True)
    before = run(conn, alive)
    assert sweep(database_url) == crash_guard.GuardResult(ran=True)
    assert run(conn, alive) == before


def test_finished_runs_are_never_touched(database_url, conn, tenant_id):
    # Given old runs that already finished
    done = insert_run(conn, tenant_id, "running", created_ago=timedelta(days=2), with_job=True)
    conn.execute("UPDATE ingestion_runs SET status = 'succeeded', finished_at = now() - "
                 "interval '2 days' WHERE run_id = %s", (done,))
    failed = insert_run(conn, tenant_id, "queued", created_ago=timedelta(days=2), with_job=True)
    conn.execute("UPDATE ingestion_runs SET status = 'failed', error = 'original reason' "
                 "WHERE run_id = %s", (failed,))
    before = (run(conn, done), run(conn, failed), job(conn, done), job(conn, failed))

    assert sweep(database_url) == crash_guard.GuardResult(ran=True)
    assert (run(conn, done), run(conn, failed), job(conn, done), job(conn, failed)) == before


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


def test_gateway_guard_republishes_an_ownerless_run_onto_the_queue(stack_env, out_dir, conn,
                                                                   tenant_id, queues):
    # Given a gateway with the product's windows scaled down by the tests' one time factor
    gateway = stack.start_gateway({**stack_env, **stack.GATEWAY_TEST_ENV}, out_dir)
    try:
        # When a running run loses its worker (older than the scaled republish window) and a
        # queued run without a job passes its scaled TTL
        window = float(stack.GATEWAY_TEST_ENV["CRASH_GUARD_REPUBLISH_AFTER_S"])
        orphan = insert_run(conn, tenant_id, "running", created_ago=timedelta(hours=1),
                            updated_ago=timedelta(seconds=window * 2), with_job=True)
        ttl_s = float(stack.GATEWAY_TEST_ENV["CRASH_GUARD_QUEUED_TTL_HOURS"]) * 3600
        lost = insert_run(conn, tenant_id, "queued", created_ago=timedelta(seconds=ttl_s * 2))

        # Then its job reaches the queue again, through the outbox, and the run still runs
        messages = wait_until(lambda: queues.queue.receive(10, 1), timeout=20,
                              message="republished job on the queue")
        assert [m.body for m in messages] == [f'{{"run_id":"{orphan}"}}']
        assert run(conn, orphan)["status"] == "running"
        assert run(conn, orphan)["republish_count"] == 1
        # and the jobless queued run is failed as never picked up
        wait_until(lambda: run(conn, lost)["status"] == "failed", timeout=10,
                   message="jobless queued run failed")
        assert "never picked up" in run(conn, lost)["error"]
    finally:
        gateway.stop()
