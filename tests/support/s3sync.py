"""Helpers for S3 source tests: buckets of objects, a fault-injecting proxy in front of moto,
waiting for a sync, and standing in for the worker where a real one would be too slow."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import psycopg

from tests.support.tcpproxy import TcpProxy

Match = Callable[[bytes], bool]


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def new_bucket(s3: Any, objects: dict[str, bytes] | None = None) -> str:
    bucket = f"src-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    put(s3, bucket, objects or {})
    return bucket


def put(s3: Any, bucket: str, objects: dict[str, bytes], **kwargs: Any) -> None:
    for key, body in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body, **kwargs)


def create_source(client: httpx.Client, bucket: str, **fields: Any) -> dict:
    response = client.post("/v1/sources", json={"bucket": bucket, **fields})
    assert response.status_code == 201, response.text
    return response.json()


def trigger(client: httpx.Client, source_id: str) -> str:
    response = client.post(f"/v1/sources/{source_id}/sync")
    assert response.status_code == 202, response.text
    return response.json()["sync_id"]


def wait_sync(client: httpx.Client, source_id: str, sync_id: str, timeout: float = 120) -> dict:
    """Poll the sync until it is no longer running; return its record."""
    deadline = time.monotonic() + timeout
    while True:
        response = client.get(f"/v1/sources/{source_id}/syncs/{sync_id}")
        assert response.status_code == 200, response.text
        body = response.json()
        if body["status"] != "running":
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"sync still running after {timeout}s: {body}")
        time.sleep(0.1)


def sync_now(client: httpx.Client, source_id: str, timeout: float = 120) -> dict:
    return wait_sync(client, source_id, trigger(client, source_id), timeout)


def run_count(conn: psycopg.Connection, tenant_id: Any) -> int:
    return conn.execute("SELECT count(*) AS n FROM ingestion_runs WHERE tenant_id = %s",
                        (tenant_id,)).fetchone()["n"]


def active_docs(conn: psycopg.Connection, tenant_id: Any) -> dict[str, str]:
    """source_uri -> content hash of the active version."""
    rows = conn.execute(
        "SELECT d.source_uri, v.content_hash FROM documents d JOIN document_versions v "
        "ON v.doc_id = d.doc_id AND v.is_active WHERE d.tenant_id = %s", (tenant_id,))
    return {r["source_uri"]: r["content_hash"] for r in rows}


def settle_runs(conn: psycopg.Connection, tenant_id: Any) -> int:
    """Do what a worker would do with every queued s3_sync run, directly in the database.

    Why not a real worker: embedding thousands of documents takes minutes on two cores, and
    moto's SQS scans every stored message per call. These tests are about the gateway's sync;
    the worker's own tests cover processing. Each run gets the version the worker would write
    (next number, the job's hash, active, the previous one deactivated), and its outbox row is
    marked published so no gateway publishes it later.

    Why the shortcut cannot change a sync test's verdict: what a sync reads of the worker's
    result (gateway/sources/sources.sql `touch_known_objects`, `missing_objects`, `source_served_objects`)
    is a version's `content_hash` and `is_active` and a run's `status`, written here as the
    worker writes them; it never reads chunks, and the worker's per-document lock is held only
    while a worker writes, which no worker does here. tests/e2e/test_s3_sync_worker.py runs the
    same sequence (sync, process, re-sync, change, delete) against a real `ingest worker`.
    """
    with conn.transaction():
        runs = conn.execute(
            "SELECT run_id, doc_id, config ->> 'content_hash' AS content_hash FROM ingestion_runs "
            "WHERE tenant_id = %s AND status = 'queued' AND run_type = 's3_sync' "
            "ORDER BY created_at", (tenant_id,)).fetchall()
        for run in runs:
            conn.execute("UPDATE document_versions SET is_active = false, deactivated_at = now() "
                         "WHERE tenant_id = %s AND doc_id = %s AND is_active",
                         (tenant_id, run["doc_id"]))
            conn.execute(
                "INSERT INTO document_versions (tenant_id, doc_id, run_id, version_number, "
                "content_hash, is_active, embedding_model, embedding_dim) "
                "SELECT %s, %s, %s, COALESCE(max(version_number), 0) + 1, %s, true, "
                "'sentence-transformers/all-MiniLM-L6-v2', 384 FROM document_versions "
                "WHERE doc_id = %s",
                (tenant_id, run["doc_id"], run["run_id"], run["content_hash"], run["doc_id"]))
        ids = [r["run_id"] for r in runs]
        # Through running, as the transition trigger requires.
        conn.execute("UPDATE ingestion_runs SET status = 'running', started_at = now() "
                     "WHERE run_id = ANY(%s)", (ids,))
        conn.execute("UPDATE ingestion_runs SET status = 'succeeded', finished_at = now() "
                     "WHERE run_id = ANY(%s)", (ids,))
        conn.execute("UPDATE job_outbox SET published_at = COALESCE(published_at, now()) "
                     "WHERE run_id = ANY(%s)", (ids,))
    return len(runs)


class FaultProxy(TcpProxy):
    """A TcpProxy in front of moto that looks at each request as it passes:

    - ``cut_when``: close this connection (the client sees a reset);
    - ``down_when``: stop the whole proxy (new connections are refused from then on);
    - ``hold_when``: keep the request until ``release()``.
    Requests are small, so one recv holds a whole request line and its headers.
    """

    def __init__(self, target_port: int, *, cut_when: Match | None = None,
                 down_when: Match | None = None, hold_when: Match | None = None) -> None:
        super().__init__(target_port)
        self.cut_when, self.down_when, self.hold_when = cut_when, down_when, hold_when
        self.released = threading.Event()
        self.holding = threading.Event()
        self.cuts = 0

    def release(self) -> None:
        self.released.set()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            # Accepted (client-side) sockets share the listening port; upstream ones do not.
            from_client = src.getsockname()[1] == self.port
            while data := src.recv(65536):
                if from_client and self._intercept(data):
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def _intercept(self, data: bytes) -> bool:
        """True when the connection must end here."""
        if self.down_when and self.down_when(data):
            self.stop()
            return True
        if self.cut_when and self.cut_when(data):
            self.cuts += 1
            return True
        if self.hold_when and self.hold_when(data) and not self.released.is_set():
            self.holding.set()
            self.released.wait()
        return False


def is_listing(data: bytes) -> bool:
    return data.startswith(b"GET ") and b"list-type=2" in data.split(b"\r\n", 1)[0]


def is_later_page(data: bytes) -> bool:
    return is_listing(data) and b"continuation-token=" in data.split(b"\r\n", 1)[0]


def is_get_of(bucket: str, key: str) -> Match:
    line = f"GET /{bucket}/{key} ".encode()
    return lambda data: data.startswith(line)
