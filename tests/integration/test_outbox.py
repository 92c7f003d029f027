"""The outbox: an accepted upload reaches the queue even when SQS is away at upload time."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.integration.test_upload import upload
from tests.support import stack
from tests.support.stack import wait_until
from tests.support.tcpproxy import TcpProxy


@pytest.fixture
def sqs_proxy(moto) -> Iterator[TcpProxy]:
    """A cuttable link between the gateway and the SQS endpoint."""
    proxy = TcpProxy(moto.port).start()
    yield proxy
    proxy.stop()


@pytest.fixture
def proxied_gateway(stack_env, out_dir: Path, sqs_proxy: TcpProxy) -> Iterator[stack.Process]:
    process = stack.start_gateway({**stack_env, "AWS_ENDPOINT_URL": sqs_proxy.url}, out_dir,
                                  "gateway-proxied")
    yield process
    process.stop()


def outbox(conn) -> list[dict]:
    return conn.execute("SELECT * FROM job_outbox ORDER BY created_at").fetchall()


def drain(queues, *, quiet_s: float = 3.0, timeout: float = 30) -> list[str]:
    """Receive every message until the queue stays empty for ``quiet_s``; return run_ids."""
    run_ids: list[str] = []
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - quiet_since < quiet_s:
        messages = queues.queue.receive(10, wait_s=1)
        if messages:
            quiet_since = time.monotonic()
            run_ids += [orjson.loads(m.body)["run_id"] for m in messages]
    return run_ids


def ready(gateway) -> httpx.Response:
    with gateway.client() as client:
        return client.get("/health/ready", timeout=30)


def test_uploads_during_a_queue_outage_are_published_once_it_returns(proxied_gateway, sqs_proxy,
                                                                    tenants, conn, queues):
    # Given a gateway whose queue is unreachable
    user = tenants.user(role="user")
    sqs_proxy.stop()

    # When three files are uploaded
    with proxied_gateway.client(user.token) as client:
        responses = [upload(client, f"doc{i}.txt", f"Document number {i}.\n".encode() * 20)
                     for i in range(3)]

    # Then every upload is accepted and its run is queued
    assert [r.status_code for r in responses] == [202, 202, 202], [r.text for r in responses]
    run_ids = {r.json()["run_id"] for r in responses}
    runs = conn.execute("SELECT run_id, status FROM ingestion_runs").fetchall()
    assert {str(r["run_id"]): r["status"] for r in runs} == dict.fromkeys(run_ids, "queued")
    # and the jobs wait in the outbox, with the failed attempts and the reason recorded
    wait_until(lambda: all(row["attempts"] > 0 for row in outbox(conn)), timeout=20,
               message="every job tried at least once")
    rows = outbox(conn)
    assert {str(r["run_id"]) for r in rows} == run_ids
    assert all(r["published_at"] is None and r["last_error"] for r in rows), rows
    assert all("queue publish failed" in r["last_error"].lower() for r in rows)
    assert drain(queues, quiet_s=1) == []

    # When the queue comes back on the same address
    restored = TcpProxy(sqs_proxy.target_port, listen_port=sqs_proxy.port).start()
    try:
        # Then within seconds every job is published and marked so
        wait_until(lambda: all(row["published_at"] for row in outbox(conn)), timeout=15,
                   interval=0.2, message="all jobs published after the queue returned")
        # and each is on the queue exactly once
        assert Counter(drain(queues)) == Counter(dict.fromkeys(run_ids, 1))
        assert all(row["last_error"] is None for row in outbox(conn))
    finally:
        restored.stop()


READY = {"database": "ok", "queue": "ok", "object_store": "ok", "event_writer": "ok",
         "query_model": "on first use"}


def test_readiness_is_503_while_the_queue_is_unreachable_and_ok_once_it_returns(
        proxied_gateway, sqs_proxy):
    # Given a healthy gateway
    assert ready(proxied_gateway).json() == {"status": "ok", "checks": READY}

    # When its queue becomes unreachable
    sqs_proxy.stop()

    # Then it is not ready (it cannot serve every route: ADR 0321), says which check holds it
    # back, and when to ask again
    response = ready(proxied_gateway)
    assert response.status_code == 503, response.text
    assert response.json()["code"] == "not_ready" and response.headers["retry-after"] == "5"
    checks = response.json()["checks"]
    assert checks["database"] == "ok" and checks["queue"].startswith("unreachable")
    assert "queue" in response.json()["detail"]

    # When the queue returns, Then readiness is fully ok again
    restored = TcpProxy(sqs_proxy.target_port, listen_port=sqs_proxy.port).start()
    try:
        response = wait_until(lambda: (r := ready(proxied_gateway)).status_code == 200 and r,
                              timeout=15, message="ok again")
        assert response.json()["checks"] == READY
    finally:
        restored.stop()


def test_jobs_left_in_the_outbox_by_a_dead_gateway_are_published_by_the_next(
        stack_env, out_dir, tenants, conn, queues):
    # Given a job committed to the outbox that no gateway published (it died after commit)
    user = tenants.user(role="user")
    first = stack.start_gateway({**stack_env, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"},
                                out_dir, "gateway-no-queue")
    try:
        with first.client(user.token) as client:
            accepted = upload(client, "orphan.txt", b"Left behind.\n" * 10)
        assert accepted.status_code == 202, accepted.text
    finally:
        first.stop()
    assert outbox(conn)[0]["published_at"] is None

    # When another gateway starts
    second = stack.start_gateway(stack_env, out_dir, "gateway-next")
    try:
        # Then it publishes the job it inherited, once
        wait_until(lambda: outbox(conn)[0]["published_at"], timeout=15,
                   message="inherited job published")
        assert drain(queues) == [accepted.json()["run_id"]]
    finally:
        second.stop()
