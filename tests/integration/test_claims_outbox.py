"""docs/decisions/0001: every gateway replica runs a relay, two at once publish each job once;
only a message the queue itself refuses (SenderFault) fails its run."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Iterator

import orjson
import pytest
from psycopg.types.json import Jsonb

from gateway import outbox
from shared import db
from tests.integration.test_upload import upload
from tests.support import ops, stack
from tests.support.sqsfaults import REFUSED, TRANSIENT, SqsFaultProxy
from tests.support.stack import wait_until

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


@pytest.fixture
def sqs_faults(moto) -> Iterator[SqsFaultProxy]:
    """The real SQS endpoint, behind a proxy that can make it refuse chosen messages."""
    proxy = SqsFaultProxy(moto.port).start()
    yield proxy
    proxy.stop()


@pytest.fixture
def faulty_queue_gateway(stack_env, out_dir, sqs_faults) -> Iterator[stack.Process]:
    # AWS_ENDPOINT_URL routes both SQS and S3; the upload store is file://, so only SQS passes.
    process = stack.start_gateway({**stack_env, "AWS_ENDPOINT_URL": sqs_faults.url}, out_dir,
                                  "gateway-sqs-faults")
    yield process
    process.stop()


def _outbox_row(conn, run_id: str) -> dict:
    # A parked row's next_attempt_at is 'infinity', which Python's datetime cannot hold.
    return conn.execute("SELECT published_at, attempts, last_error, "
                        "next_attempt_at = 'infinity' AS parked FROM job_outbox "
                        "WHERE run_id = %s", (run_id,)).fetchone()


def test_only_a_message_the_queue_refuses_fails_its_run(faulty_queue_gateway, sqs_faults,
                                                        tenants, conn, queues):
    user = tenants.user(role="user")
    with faulty_queue_gateway.client(user.token) as client:
        # Given the relay is busy sending one job, so the next uploads pile up into one batch
        sqs_faults.hold()
        first = upload(client, "first.txt", b"Published before the others.\n" * 10)
        assert first.status_code == 202, first.text
        wait_until(lambda: sqs_faults.held == 1, timeout=15, message="relay sending the first job")
        uploads = {name: upload(client, f"{name}.txt", f"The {name} document.\n".encode() * 10)
                   for name in ("refused", "flaky", "plain")}
        assert {n: r.status_code for n, r in uploads.items()} == dict.fromkeys(uploads, 202)
        ids = {name: r.json()["run_id"] for name, r in uploads.items()}

        # When the queue refuses one message (SenderFault) and fails another on its side
        sqs_faults.faults = {ids["refused"]: REFUSED, ids["flaky"]: TRANSIENT}
        sqs_faults.release()

        # Then the three went out in one SendMessageBatch
        wait_until(lambda: all(sqs_faults.entries_for(r) for r in ids.values()), timeout=15,
                   message="the three jobs sent")
        assert len({sqs_faults.entries_for(r)[0].batch for r in ids.values()}) == 1
        # and the refused upload's run failed with the queue's reason, visible to its owner
        reason = f"Queue publish failed: {REFUSED.code}: {REFUSED.message}."
        refused = wait_until(lambda: (r := client.get(f"/v1/ingestion-runs/{ids['refused']}")
                                      ).json()["status"] != "queued" and r.json(),
                             timeout=15, message="refused run settled")
        assert (refused["status"], refused["error"]) == ("failed", reason), refused
        # and the plain upload of the same batch was published
        wait_until(lambda: _outbox_row(conn, ids["plain"])["published_at"], timeout=15,
                   message="plain job published")
        # while the transient failure is retried, its run still queued with the reason recorded
        wait_until(lambda: _outbox_row(conn, ids["flaky"])["attempts"] >= 3, timeout=30,
                   message="transient failure retried")
        flaky = _outbox_row(conn, ids["flaky"])
        assert flaky["published_at"] is None and TRANSIENT.code in flaky["last_error"], flaky
        assert client.get(f"/v1/ingestion-runs/{ids['flaky']}").json()["status"] == "queued"

        # When the queue stops failing
        sqs_faults.faults = {ids["refused"]: REFUSED}

        # Then the retried job is published and its run is still queued for a worker
        wait_until(lambda: _outbox_row(conn, ids["flaky"])["published_at"], timeout=15,
                   message="retried job published")
        assert client.get(f"/v1/ingestion-runs/{ids['flaky']}").json()["status"] == "queued"
        assert _outbox_row(conn, ids["flaky"])["last_error"] is None

    # and the refused job was offered to the queue once, never retried: its row is settled
    # (parked, not pending), though the relay kept passing while the other job was retried
    assert len(sqs_faults.entries_for(ids["refused"])) == 1
    row = _outbox_row(conn, ids["refused"])
    assert row["published_at"] is None and row["last_error"] == reason
    assert row["attempts"] == 1 and row["parked"], row
    # and the queue holds every other job exactly once, and nothing of the refused one
    published = Counter(orjson.loads(m["Body"])["run_id"] for m in ops.drain(queues, queues.url))
    expected = [first.json()["run_id"], ids["plain"], ids["flaky"]]
    assert published == Counter(expected), published
