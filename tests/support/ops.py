"""Runs in a chosen state and messages in the dead-letter queue, for the operations tests."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg

from tests.support import documents, submit


def make_run(conn: psycopg.Connection, store_root: Path, user, *, status: str = "failed",
             data: bytes | None = None, name: str = "doc.md",
             error: str = "read: S3Timeout (transient).") -> submit.Submitted:
    """A run (with its stored upload and document) moved to ``status`` as the system would."""
    data = data if data is not None else (
        documents.make_markdown(1) + f"\n\nUnique {uuid.uuid4()}.\n".encode())
    job = submit.submit(conn, None, store_root, user, data, name=name, copies=0)
    set_status(conn, job.run_id, status, error=error)
    return job


def set_status(conn: psycopg.Connection, run_id: uuid.UUID, status: str, *,
               error: str = "failed for the test.") -> None:
    """Walk the run along allowed transitions (the trigger refuses shortcuts)."""
    if status in ("running", "succeeded"):
        conn.execute("UPDATE ingestion_runs SET status = 'running', started_at = now() "
                     "WHERE run_id = %s", (run_id,))
    if status == "succeeded":
        conn.execute("UPDATE ingestion_runs SET status = 'succeeded', finished_at = now() "
                     "WHERE run_id = %s", (run_id,))
    if status == "failed":
        conn.execute("UPDATE ingestion_runs SET status = 'failed', error = %s, "
                     "finished_at = now() WHERE run_id = %s", (error, run_id))


def to_dlq(queues, body: str, attributes: dict[str, str] | None = None) -> str:
    """Put a message straight into the DLQ, as SQS or the worker would have."""
    kwargs = {"QueueUrl": queues.dlq_url, "MessageBody": body}
    if attributes:
        kwargs["MessageAttributes"] = {k: {"DataType": "String", "StringValue": v}
                                       for k, v in attributes.items()}
    return queues.client.send_message(**kwargs)["MessageId"]


def depth(queues, url: str | None = None) -> int:
    d = queues.queue.depth(url=url)
    return d["visible"] + d["in_flight"]


def drain(queues, url: str, wait_s: int = 1) -> list[dict]:
    """Receive (and delete) everything in a queue; returns the raw messages."""
    got: list[dict] = []
    while True:
        response = queues.client.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=wait_s,
            MessageAttributeNames=["All"], AttributeNames=["All"])
        messages = response.get("Messages", [])
        if not messages:
            return got
        for m in messages:
            queues.client.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        got += messages


def actions(conn: psycopg.Connection, run_id: uuid.UUID) -> list[dict]:
    return conn.execute("SELECT * FROM run_actions WHERE run_id = %s ORDER BY action_id",
                        (run_id,)).fetchall()
