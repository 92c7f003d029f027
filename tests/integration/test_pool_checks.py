"""The gateway's pool checks a connection before lending it only when it has rested
(shared/db, docs/decisions/0336): a connection just given back is lent at once, and one whose
server session died while it rested is replaced before anyone gets it."""

from __future__ import annotations

import asyncio
import time

from psycopg_pool import AsyncConnectionPool

from shared import db


def test_a_just_returned_connection_is_lent_unchecked_and_a_rested_dead_one_is_replaced(
        database_url, conn, monkeypatch):
    checks: list[float] = []
    real_check = AsyncConnectionPool.check_connection

    async def counted(connection) -> None:
        checks.append(time.monotonic())
        await real_check(connection)

    monkeypatch.setattr(AsyncConnectionPool, "check_connection", counted)
    monkeypatch.setattr(db, "RESTED_S", 0.3)

    async def scenario() -> tuple[int, int, int]:
        pool = db.async_pool(database_url, min_size=1, max_size=1)
        await pool.open(wait=True)
        try:
            async with pool.connection() as c:  # a fresh connection: checked
                first_pid = (await (await c.execute("SELECT pg_backend_pid() AS p")).fetchone())["p"]
            for _ in range(20):  # given back a moment ago each time: never checked
                async with pool.connection() as c:
                    await c.execute("SELECT 1")
            hot_checks = len(checks)
            # Its server session is killed while it rests past RESTED_S…
            conn.execute("SELECT pg_terminate_backend(%s)", (first_pid,))
            await asyncio.sleep(0.4)
            # …so the next loan checks it, finds it dead, and lends a new one that works.
            async with pool.connection() as c:
                pid = (await (await c.execute("SELECT pg_backend_pid() AS p")).fetchone())["p"]
            return hot_checks, first_pid, pid
        finally:
            await pool.close()

    hot_checks, first_pid, pid = asyncio.run(scenario())
    assert hot_checks == 1  # the first loan only
    assert pid != first_pid and len(checks) >= 2
