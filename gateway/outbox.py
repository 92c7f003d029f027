"""Publish committed jobs from job_outbox to SQS, retrying with backoff while SQS is away.

Intake wakes the relay after each commit, so a job normally reaches the queue within
milliseconds; the periodic pass picks up whatever a dead gateway or a queue outage left behind.
Publishing twice is harmless (the worker deduplicates on run_id); not publishing is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
from botocore.exceptions import BotoCoreError, ClientError

from shared import db, retry
from shared.queue import Queue

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("queries.sql"))
BATCH = 10  # SQS SendMessageBatch takes at most ten entries
Failure = tuple[UUID, str]  # a run id and why its job was not sent
# Work that adds jobs to the outbox before each pass (e-mail attachments becoming documents,
# gateway/documents/attachments.py); returns True when it may have more to do at once.
Feeder = Callable[[], Awaitable[bool]]


class OutboxRelay:
    def __init__(self, pool: db.AsyncPool, queue: Queue, *,
                 poll_s: float = 2.0, max_backoff_s: float = 60.0,
                 feeders: Sequence[Feeder] = ()) -> None:
        self.pool = pool
        self.queue = queue
        self.poll_s = poll_s
        self.max_backoff_s = max_backoff_s
        self.feeders = list(feeders)
        self._wake = asyncio.Event()
        self.published_total = 0
        self.publish_failures_total = 0

    def wake(self) -> None:
        self._wake.set()

    async def run_forever(self) -> None:
        while True:
            more = await self.feed()
            try:
                while await self.publish_due() == BATCH:
                    pass
            except Exception:
                log.exception("outbox relay pass failed")
            if more:
                continue  # a feeder has more: its jobs before a nap, published batch by batch
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.poll_s)
            self._wake.clear()

    async def feed(self) -> bool:
        """Run each feeder once; True when one of them may have more to do."""
        more = False
        for feeder in self.feeders:
            try:
                more = await feeder() or more
            except Exception:
                log.exception("outbox feeder failed")
        return more

    async def publish_due(self) -> int:
        """Publish up to one batch of due jobs; return how many were claimed."""
        async with self.pool.connection() as conn, conn.transaction():
            rows = await (await conn.execute(Q["claim_due_jobs"], {"limit": BATCH})).fetchall()
            if not rows:
                return 0
            sent, retry, rejected = await asyncio.to_thread(self._send, rows)
            if sent:
                await conn.execute(Q["mark_published"], {"run_ids": sent})
                self.published_total += len(sent)
            if retry:
                retry_ids = {run_id for run_id, _ in retry}
                attempts = max(r["attempts"] for r in rows if r["run_id"] in retry_ids)
                await conn.execute(Q["mark_publish_retry"], {
                    "run_ids": list(retry_ids), "error": retry[0][1],
                    "delay_s": self._backoff(attempts)})
                self.publish_failures_total += len(retry)
            for run_id, error in rejected:
                await conn.execute(Q["mark_publish_rejected"], {"run_id": run_id, "error": error})
                log.error("queue rejected job", extra={"run_id": str(run_id), "reason": error})
            return len(rows)

    def _backoff(self, attempts: int) -> float:
        # Exponential with full jitter: gateways that lost SQS together do not return in step.
        return retry.full_jitter_s(attempts + 1, 0.5, self.max_backoff_s)

    def _send(self, rows: list[dict[str, Any]]) -> tuple[list[UUID], list[Failure], list[Failure]]:
        """Send one batch; return (sent run ids, retryable failures, rejected failures)."""
        entries = [{"Id": str(i), "MessageBody": orjson.dumps(r["payload"]).decode()}
                   for i, r in enumerate(rows)]
        try:
            response = self.queue.sqs.send_message_batch(QueueUrl=self.queue.url, Entries=entries)
        except (BotoCoreError, ClientError) as exc:
            log.warning("queue unreachable, jobs stay in the outbox", extra={"jobs": len(rows),
                        "error": str(exc)})
            return [], [(r["run_id"], f"queue publish failed: {exc}") for r in rows], []
        sent = [rows[int(e["Id"])]["run_id"] for e in response.get("Successful", [])]
        retry: list[Failure] = []
        rejected: list[Failure] = []
        for failure in response.get("Failed", []):
            run_id = rows[int(failure["Id"])]["run_id"]
            error = f"Queue publish failed: {failure.get('Code')}: {failure.get('Message', '')}."
            (rejected if failure.get("SenderFault") else retry).append((run_id, error))
        return sent, retry, rejected
