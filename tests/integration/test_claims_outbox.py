"""docs/decisions/0001: every gateway replica runs a relay; two at once publish each job once."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

from psycopg.types.json import Jsonb

from gateway import outbox
from shared import db
from tests.support import ops

JOBS = 60


def _outbox_rows(conn, tenant_id) -> list[uuid.UUID]:
    run_ids = [uuid.uuid4() for _ in range(JOBS)]
    for run_id in run_ids:
        conn.execute("INSERT INTO ingestion_runs (run_id, tenant_id, status) "
                     "VALUES (%s, %s, 'queued')", (run_id, tenant_id))
        conn.execute("INSERT INTO job_outbox (run_id, tenant_id, payload) VALUES (%s, %s, %s)",
                     (run_id, tenant_id, Jsonb({"run_id": str(run_id)})))
    return run_ids


async def _relays_at_once(database_url: str, queue) -> list[int]:
    """Two relays, each with its own pool (two gateway replicas), drain the outbox together."""

    async def drain(relay: outbox.OutboxRelay) -> int:
        claimed = 0
        while n := await relay.publish_due():
            claimed += n
        return claimed

    pools = [db.async_pool(database_url, min_size=1, max_size=2, name=f"relay-{i}")
             for i in range(2)]
    for pool in pools:
        await pool.open()
    try:
        relays = [outbox.OutboxRelay(pool, queue) for pool in pools]
        return list(await asyncio.gather(*(drain(r) for r in relays)))
    finally:
        for pool in pools:
            await pool.close()


def test_two_relays_at_once_publish_each_job_once(database_url, conn, queues, tenants):
    # Given sixty committed jobs in the outbox
    user = tenants.user()
    run_ids = _outbox_rows(conn, user.tenant_id)

    # When two relays publish at the same moment
    claimed = asyncio.run(_relays_at_once(database_url, queues.queue))

    # Then both took part, between them they claimed each job once, every row is published,
    # and the queue holds exactly one message per job
    assert sum(claimed) == JOBS and all(claimed), claimed
    assert conn.execute("SELECT count(*) AS n FROM job_outbox WHERE published_at IS NULL"
                        ).fetchone()["n"] == 0
    published = Counter(m["Body"] for m in ops.drain(queues, queues.url))
    assert sorted(published) == sorted(f'{{"run_id":"{r}"}}' for r in run_ids)
    assert set(published.values()) == {1}
