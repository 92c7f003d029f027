"""At most three imports of one tenant parse or promote at once, across worker processes, and
a fourth waits without ever dead-lettering (docs/decisions/0097); a tenant's imports never take
a worker's last free slot, so a lone worker always has room for another tenant
(docs/decisions/0261): real gateway (intake, outbox relay), moto SQS with a receive limit of 2,
real `ingest worker` processes, real Postgres. Imports are held after their first chunk at the
worker's test-only pause point."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from shared import aws, queue
from tests.support import ad_exports, records, stack
from tests.support.stack import wait_until
from worker.handler import AT_LIMIT, LAST_SLOT
from worker.records.pipeline import WAITING

ACTIVE = ("processing", "staging_complete", "promoting")
# Past one staging chunk (10,000 rows), so a job reaches the parse pause point.
ROWS = 10_050
RECEIVE_LIMIT = 2


def judgments(prefix: str, rows: int) -> bytes:
    lines = [f"2024-{prefix}-{i:06d},Acme Collections LLC,John Q. Public,100,01/15/2024,,\n"
             for i in range(rows)]
    return (records.CSV_HEADER + "".join(lines)).encode()


def ad_metrics(rows: int) -> bytes:
    """A Meta daily export of ``rows`` rows (10 days of rows/10 ads)."""
    return ad_exports.meta(ad_exports.grid(10, 50, rows // 10, 10))


def submit(gateway, user, data: bytes, **fields: str) -> str:
    with gateway.client(user.token) as client:
        response = records.upload(client, "export.csv", data, **fields)
    assert response.status_code == 202, response.text
    return response.json()["batch_id"]


def statuses(conn, tenant_id) -> dict[str, str]:
    return {str(r["batch_id"]): r["status"] for r in conn.execute(
        "SELECT batch_id, status FROM import_batches WHERE tenant_id = %s", (tenant_id,))}


def outbox(conn, batch_id: str) -> dict:
    return conn.execute("SELECT o.* FROM job_outbox o JOIN ingestion_runs r USING (run_id) "
                        "WHERE r.batch_id = %s", (batch_id,)).fetchone()


def held(stack_env: dict[str, str], strict: queue.Queue, flag) -> dict[str, str]:
    """Workers of three slots on ``strict``, holding records jobs at the pause point while
    ``flag`` exists (it is made here); a waiting job comes back after a second."""
    flag.touch()
    return {**stack_env, "SQS_QUEUE_URL": strict.url, "SQS_DLQ_URL": strict.dlq_url,
            "SQS_MAX_RECEIVE_COUNT": str(RECEIVE_LIMIT), "WORKER_MAX_CONCURRENT_JOBS": "3",
            "RECORDS_TENANT_SLOTS": "3", "RECORDS_SLOT_WAIT_S": "1",
            "WORKER_PAUSE_AT_STAGE": "parse", "WORKER_PAUSE_FILE": str(flag)}


@pytest.fixture
def strict_queues(moto) -> Iterator[queue.Queue]:
    """This test's queue pair, dead-lettering a message on its third receive."""
    sqs = aws.client("sqs", endpoint_url=moto.url, region="us-east-1")
    url, dlq_url = queue.ensure_queues(sqs, f"q-{uuid.uuid4().hex[:10]}",
                                       max_receive_count=RECEIVE_LIMIT, visibility_timeout_s=30)
    yield queue.Queue(sqs, url, dlq_url)
    for u in (url, dlq_url):
        sqs.delete_queue(QueueUrl=u)


class Sampler:
    """Counts, every few milliseconds until stopped, the tenant's batches parsing or promoting."""

    def __init__(self, database_url: str, tenant_id) -> None:
        self.database_url, self.tenant_id = database_url, tenant_id
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        from shared import db

        with db.connect(self.database_url, autocommit=True) as conn:
            while not self._stop.wait(0.02):
                self.samples.append(conn.execute(
                    "SELECT count(*) AS n FROM import_batches WHERE tenant_id = %s "
                    "AND status = ANY(%s)", (self.tenant_id, list(ACTIVE))).fetchone()["n"])


def test_a_fourth_import_waits_in_the_outbox_never_in_the_dlq(
        tenants, conn, stack_env, database_url, strict_queues, out_dir, tmp_path):
    # Given two workers of three job slots each on a queue that dead-letters on the 3rd receive,
    # holding every records job after its first staged chunk
    flag = tmp_path / "hold"
    env = held(stack_env, strict_queues, flag)
    gateway = stack.start_gateway(env, out_dir)
    workers = [stack.start_worker(env, out_dir, name=f"worker-{i}") for i in (1, 2)]
    user, other = tenants.user("acme"), tenants.user("globex")
    try:
        for worker in workers:
            stack.wait_for_log(worker, '"event":"worker started"', timeout=120)
        with Sampler(database_url, user.tenant_id) as sampler:
            # When one tenant imports four files, two of them ad-metrics exports (one slot
            # pool for every contract)
            batches = [submit(gateway, user, judgments(f"T{i}", ROWS)) for i in range(2)]
            batches += [submit(gateway, user, ad_metrics(rows), contract="ad_metrics",
                               platform="meta") for rows in (ROWS, ROWS + 10)]

            # Then three parse (and are held), and the fourth waits pending in the outbox,
            # published again and again, more often than the queue's receive limit
            wait_until(lambda: sum(1 for b in batches if conn.execute(
                "SELECT last_staged_row FROM import_batches WHERE batch_id = %s",
                (b,)).fetchone()["last_staged_row"] == 10_000) == 3, timeout=240,
                       message="three imports held after their first chunk")
            waiting = next(b for b, s in statuses(conn, user.tenant_id).items() if s == "pending")
            wait_until(lambda: outbox(conn, waiting)["attempts"] > RECEIVE_LIMIT + 1,
                       timeout=120, message="the waiting job republished past the receive limit")
            assert statuses(conn, user.tenant_id)[waiting] == "pending"
            run = conn.execute("SELECT status FROM ingestion_runs WHERE batch_id = %s",
                               (waiting,)).fetchone()
            assert run["status"] == "queued"
            assert depth(strict_queues, strict_queues.dlq_url) == 0

            # and another tenant's import is not held back by the first tenant's three
            small = submit(gateway, other, judgments("G", 5))
            wait_until(lambda: statuses(conn, other.tenant_id)[small] == "completed",
                       timeout=120, message="the other tenant's import completed")
            assert sum(s in ACTIVE for s in statuses(conn, user.tenant_id).values()) == 3

            # When the three are let go
            flag.unlink()

            # Then all four complete, the fourth once a slot was free
            wait_until(lambda: all(s == "completed" for s in statuses(conn, user.tenant_id)
                                   .values()), timeout=300, message="all four imports completed")

        # and never more than three of the tenant's imports were active at once
        assert sampler.samples and max(sampler.samples) == 3, sampler.samples[-50:]
        # and nothing went to the DLQ; the queue is empty
        wait_until(lambda: depth(strict_queues) == 0, timeout=60, message="queue drained")
        assert depth(strict_queues, strict_queues.dlq_url) == 0
        logs = "".join(w.logs() for w in workers)
        # (why it waited depends on which worker got each delivery: one running none of the
        # tenant's three says the tenant is at its limit, one running two of them says it keeps
        # its last slot for another tenant; seen both ways, so either reason is the outbox wait)
        assert AT_LIMIT in logs or LAST_SLOT in logs, logs[-3000:]
    finally:
        for worker in workers:
            worker.stop()
        gateway.stop()


def test_one_tenants_imports_leave_a_lone_worker_a_slot_for_another_tenant(
        tenants, conn, stack_env, strict_queues, out_dir, tmp_path):
    # Given one worker of three job slots, holding every records job after its first chunk
    flag = tmp_path / "hold"
    env = held(stack_env, strict_queues, flag)
    gateway = stack.start_gateway(env, out_dir)
    worker = stack.start_worker(env, out_dir)
    user, other = tenants.user("acme"), tenants.user("globex")
    try:
        stack.wait_for_log(worker, '"event":"worker started"', timeout=120)
        # When one tenant sends three large imports, within its own limit of three
        batches = [submit(gateway, user, judgments(f"T{i}", ROWS)) for i in range(3)]

        # Then two run and are held, and the third waits pending in the outbox
        wait_until(lambda: sum(1 for b in batches if conn.execute(
            "SELECT last_staged_row FROM import_batches WHERE batch_id = %s",
            (b,)).fetchone()["last_staged_row"] == 10_000) == 2, timeout=240,
                   message="two imports held after their first chunk")
        waiting = wait_until(lambda: next((b for b in batches if statuses(
            conn, user.tenant_id)[b] == "pending" and outbox(conn, b)["last_error"] == WAITING),
            None), timeout=60, message="the third import waiting in the outbox")

        # and another tenant's import takes the free slot and completes while they are held
        small = submit(gateway, other, judgments("G", 5))
        wait_until(lambda: statuses(conn, other.tenant_id)[small] == "completed", timeout=60,
                   message="the other tenant's import completed beside the first tenant's")
        assert sum(s in ACTIVE for s in statuses(conn, user.tenant_id).values()) == 2
        assert statuses(conn, user.tenant_id)[waiting] == "pending"

        # When the two are let go, all three complete, and nothing was dead-lettered
        flag.unlink()
        wait_until(lambda: all(s == "completed" for s in statuses(conn, user.tenant_id)
                               .values()), timeout=300, message="all three imports completed")
        assert depth(strict_queues, strict_queues.dlq_url) == 0
        assert LAST_SLOT in worker.logs()
    finally:
        worker.stop()
        gateway.stop()


def depth(q: queue.Queue, url: str | None = None) -> int:
    d = q.depth(url=url)
    return d["visible"] + d["in_flight"]
