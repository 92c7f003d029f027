"""Inspect, redrive and purge the dead-letter queue: the one service behind `ingest dlq …` (CLI,
every tenant) and /v1/admin/dlq (API, the caller's tenant only). See docs/decisions/0010.

SQS has neither paging nor a peek. A scan therefore receives batches of ten with a short
visibility timeout, so that each receive returns messages not seen yet, until a receive comes
back empty or ``max_messages`` are seen; then it releases (visibility 0) every message it looked
at and did not delete. While a scan runs, the messages it holds are invisible to other scans,
and each look adds one to a message's ApproximateReceiveCount (the run's ``delivery_count``
says how often workers received it). Pages are cut from the whole scan, oldest first.

Redrive is receive → send to the ingest queue (body and attributes kept) → delete from the DLQ
only after the send succeeded: a crash in between leaves a copy in both queues, which the
worker absorbs (it deduplicates on run_id), never a lost message. A run that failed is reopened
to `queued` first, as a recorded operator action (gateway/reopen.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from botocore.exceptions import BotoCoreError, ClientError

from gateway import reopen
from shared import db, errors, jobs
from shared.queue import DLQ_REASON, Queue

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("operations.sql"))

SCAN_VISIBILITY_S = 30   # how long a scan hides what it looked at, if it dies before releasing
RECEIVE_WAIT_S = 1       # a long poll asks every SQS server; a short one may miss messages
REDRIVE_COUNT = "redrive_count"
_SQS_MAX_ATTRIBUTES = 10


# ── one dead letter ─────────────────────────────────────────────────────────────────────────
@dataclass
class DeadLetter:
    message_id: str
    receipt_handle: str
    body: str
    attributes: dict[str, dict[str, Any]]   # MessageAttributes as SQS returns them
    system: dict[str, str]                  # Attributes: SentTimestamp, ApproximateReceiveCount…
    job: jobs.IngestJob | None
    problem: str | None = None              # why the body is not a job

    @classmethod
    def from_raw(cls, raw: dict[str, Any]) -> DeadLetter:
        job, problem = None, None
        try:
            job = jobs.decode(raw["Body"])
        except jobs.InvalidJob as exc:
            problem = exc.detail
        return cls(raw["MessageId"], raw["ReceiptHandle"], raw["Body"],
                   raw.get("MessageAttributes", {}), raw.get("Attributes", {}), job, problem)

    @property
    def run_id(self) -> UUID | None:
        return self.job.run_id if self.job else None

    @property
    def tenant_id(self) -> UUID | None:
        return self.job.tenant_id if self.job else None

    @property
    def receive_count(self) -> int:
        return int(self.system.get("ApproximateReceiveCount", 0))

    @property
    def sent_at(self) -> datetime:
        return datetime.fromtimestamp(int(self.system.get("SentTimestamp", 0)) / 1000, UTC)

    def age_s(self, now: float | None = None) -> float:
        return max(0.0, (now or time.time()) - self.sent_at.timestamp())

    @property
    def dead_letter_reason(self) -> str | None:
        """The reason our worker gave when it dead-lettered the message itself."""
        return self.attributes.get(DLQ_REASON, {}).get("StringValue")


# ── the queue pair ──────────────────────────────────────────────────────────────────────────
class DeadLetterQueue:
    def __init__(self, sqs: Any, dlq_url: str, main_url: str) -> None:
        if not dlq_url:
            raise errors.ServiceUnavailable("No dead-letter queue is configured; set SQS_DLQ_URL.")
        self.sqs, self.url, self.main_url = sqs, dlq_url, main_url

    @classmethod
    def of(cls, queue: Queue) -> DeadLetterQueue:
        return cls(queue.sqs, queue.dlq_url, queue.url)

    def scan(self, max_messages: int, visibility_s: int = SCAN_VISIBILITY_S) -> Scan:
        return Scan(self, max_messages, visibility_s)

    def receive(self, count: int, visibility_s: int) -> list[DeadLetter]:
        response = self.sqs.receive_message(
            QueueUrl=self.url, MaxNumberOfMessages=max(1, min(10, count)),
            WaitTimeSeconds=RECEIVE_WAIT_S, VisibilityTimeout=visibility_s,
            AttributeNames=["All"], MessageAttributeNames=["All"])
        return [DeadLetter.from_raw(m) for m in response.get("Messages", [])]

    def send_back(self, letter: DeadLetter) -> str:
        """Send a copy to the ingest queue with its body and attributes; return its new id."""
        response = self.sqs.send_message(QueueUrl=self.main_url, MessageBody=letter.body,
                                         MessageAttributes=_redrive_attributes(letter))
        return str(response["MessageId"])

    def delete(self, letter: DeadLetter) -> None:
        self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=letter.receipt_handle)

    def release(self, receipts: list[str]) -> None:
        for start in range(0, len(receipts), 10):
            batch = receipts[start:start + 10]
            self.sqs.change_message_visibility_batch(QueueUrl=self.url, Entries=[
                {"Id": str(i), "ReceiptHandle": r, "VisibilityTimeout": 0}
                for i, r in enumerate(batch)])

    def depth(self) -> dict[str, int]:
        attrs = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return {"visible": int(attrs.get("ApproximateNumberOfMessages", 0)),
                "in_flight": int(attrs.get("ApproximateNumberOfMessagesNotVisible", 0))}


def _redrive_attributes(letter: DeadLetter) -> dict[str, dict[str, Any]]:
    """The message's attributes, minus the reason it was dead-lettered, plus a redrive count."""
    fields = ("DataType", "StringValue", "BinaryValue")
    kept = {name: {k: v for k, v in value.items() if k in fields}
            for name, value in letter.attributes.items() if name != DLQ_REASON}
    previous = kept.pop(REDRIVE_COUNT, {}).get("StringValue", "0")
    if len(kept) < _SQS_MAX_ATTRIBUTES:
        count = int(previous) + 1 if str(previous).isdigit() else 1
        kept[REDRIVE_COUNT] = {"DataType": "Number", "StringValue": str(count)}
    return kept


@dataclass
class Scan:
    """Each visible message once, held until settled (deleted) or released at the end."""

    dlq: DeadLetterQueue
    max_messages: int
    visibility_s: int
    complete: bool = True
    held: dict[str, str] = field(default_factory=dict)    # message id → latest receipt
    _yielded: set[str] = field(default_factory=set)

    def __enter__(self) -> Scan:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()

    def __iter__(self) -> Iterator[DeadLetter]:
        while True:
            if len(self._yielded) >= self.max_messages:
                self.complete = False
                return
            letters = self.dlq.receive(self.max_messages - len(self._yielded), self.visibility_s)
            if not letters:
                return
            for letter in letters:
                # Seen before (its visibility ran out mid-scan): keep the newest receipt only.
                self.held[letter.message_id] = letter.receipt_handle
                if letter.message_id not in self._yielded:
                    self._yielded.add(letter.message_id)
                    yield letter

    def settled(self, letter: DeadLetter) -> None:
        self.held.pop(letter.message_id, None)

    def release(self) -> None:
        receipts, self.held = list(self.held.values()), {}
        try:
            self.dlq.release(receipts)
        except (BotoCoreError, ClientError) as exc:
            log.warning("could not release scanned dead letters; they reappear after the scan's "
                        "visibility timeout", extra={"messages": len(receipts),
                                                     "visibility_s": self.visibility_s,
                                                     "error_type": type(exc).__name__})


# ── list and show ───────────────────────────────────────────────────────────────────────────
def list_letters(dlq: DeadLetterQueue, conn: db.Conn, *, tenant_id: UUID | None = None,
                 page: int = 1, limit: int = 50, max_scan: int = 1000) -> dict[str, Any]:
    """One page of the dead letters in scope, oldest first, with run status and reason."""
    with dlq.scan(max_scan) as scan:
        letters = [letter for letter in scan if _in_scope(letter, tenant_id)]
    letters.sort(key=lambda letter: (letter.sent_at, letter.message_id))
    window = letters[(page - 1) * limit: page * limit]
    runs = _runs(conn, window)
    now = time.time()
    return {"items": [_summary(letter, runs.get(letter.run_id), now) for letter in window],
            "page": page, "limit": limit, "total": len(letters), "complete": scan.complete}


def show(dlq: DeadLetterQueue, conn: db.Conn, message_id: str, *,
         tenant_id: UUID | None = None, max_scan: int = 1000) -> dict[str, Any]:
    """One dead letter in full: body, attributes, and its run as the database has it."""
    found = None
    with dlq.scan(max_scan) as scan:
        for letter in scan:
            if letter.message_id == message_id:
                found = letter
                break
    if found is None or not _in_scope(found, tenant_id):
        raise errors.NotFound("No message with that id is in the dead-letter queue"
                              f"{' for your tenant' if tenant_id else ''}.")
    run = _runs(conn, [found]).get(found.run_id)
    body: Any = found.job.model_dump(mode="json") if found.job else found.body
    return {**_summary(found, run, time.time()), "body": body,
            "problem": found.problem, "attributes": {
                k: v.get("StringValue", v.get("BinaryValue")) for k, v in found.attributes.items()},
            "system_attributes": found.system, "run": run}


def _in_scope(letter: DeadLetter, tenant_id: UUID | None) -> bool:
    # An admin sees their own tenant's jobs only; bodies that are no job have no tenant, so
    # only the operator CLI (tenant_id None) sees them.
    return tenant_id is None or letter.tenant_id == tenant_id


def _runs(conn: db.Conn, letters: list[DeadLetter]) -> dict[UUID | None, dict[str, Any]]:
    pairs = [(letter.run_id, letter.tenant_id) for letter in letters if letter.job]
    if not pairs:
        return {}
    rows = conn.execute(Q["runs_of_messages"], {"run_ids": [p[0] for p in pairs],
                                                 "tenant_ids": [p[1] for p in pairs]}).fetchall()
    return {row["run_id"]: row for row in rows}


def _summary(letter: DeadLetter, run: dict[str, Any] | None, now: float) -> dict[str, Any]:
    return {"message_id": letter.message_id, "run_id": letter.run_id,
            "tenant_id": letter.tenant_id, "receive_count": letter.receive_count,
            "deliveries": run["delivery_count"] if run else None,
            "run_status": run["status"] if run else None, "reason": reason(letter, run),
            "sent_at": letter.sent_at, "age_s": round(letter.age_s(now), 1)}


def reason(letter: DeadLetter, run: dict[str, Any] | None) -> str:
    """Why the message is here, in one sentence an operator can act on."""
    if letter.dead_letter_reason:
        return letter.dead_letter_reason
    if letter.job is None:
        return f"Not a valid ingest job: {letter.problem}"
    if run is None:
        return "Receive limit reached, and its run does not exist; purge it."
    text = f"Receive limit reached after {run['delivery_count']} deliveries"
    if run["last_retry_error"]:
        text += f"; last worker error: {run['last_retry_error']}"
    if run["status"] == "failed" and run["error"]:
        text += f"; the run failed since: {run['error']}"
    return f"{text.rstrip('.')}; run is {run['status']}."


# ── redrive ─────────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Selection:
    all: bool = False
    run_ids: frozenset[UUID] = frozenset()
    message_ids: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not (self.all or self.run_ids or self.message_ids):
            raise errors.InvalidRequest("Say which messages to redrive: all, run ids or "
                                        "message ids.")

    def matches(self, letter: DeadLetter) -> bool:
        return (self.all or letter.message_id in self.message_ids
                or (letter.run_id is not None and letter.run_id in self.run_ids))


def redrive(dlq: DeadLetterQueue, conn: db.Conn, *, selection: Selection,
            actor: reopen.Actor, reason: str, tenant_id: UUID | None = None,
            dry_run: bool = False, limit: int | None = None,
            max_scan: int = 1000) -> dict[str, Any]:
    """Move the selected dead letters back to the ingest queue; report what happened to each."""
    items: list[dict[str, Any]] = []
    moved = 0
    with dlq.scan(max_scan) as scan:
        for letter in scan:
            if not (_in_scope(letter, tenant_id) and selection.matches(letter)):
                continue
            if limit is not None and moved >= limit:
                break
            item = _redrive_one(dlq, conn, scan, letter, actor, reason, dry_run)
            items.append(item)
            moved += item["outcome"] in ("redriven", "would_redrive")
            if item["outcome"] == "error":
                break  # SQS refuses sends: the rest would fail the same way
    return {"dry_run": dry_run, "redriven": moved, "items": items, "complete": scan.complete}


def _redrive_one(dlq: DeadLetterQueue, conn: db.Conn, scan: Scan, letter: DeadLetter,
                 actor: reopen.Actor, why: str, dry_run: bool) -> dict[str, Any]:
    item: dict[str, Any] = {"message_id": letter.message_id, "run_id": letter.run_id,
                            "tenant_id": letter.tenant_id}
    if letter.job is None:
        return {**item, "outcome": "skipped",
                "detail": "Not a valid ingest job, so it would dead-letter again; purge it."}
    assert letter.run_id is not None and letter.tenant_id is not None
    claim = reopen.for_redrive(conn, run_id=letter.run_id, tenant_id=letter.tenant_id,
                               actor=actor, reason=why, message_id=letter.message_id,
                               dry_run=dry_run)
    if claim is None:
        return {**item, "outcome": "skipped",
                "detail": "Its run does not exist in its tenant, so it can never succeed; "
                          "purge it."}
    item |= {"run_status": claim.previous_status, "reopened": claim.reopened}
    if dry_run:
        return {**item, "outcome": "would_redrive"}
    try:
        item["new_message_id"] = dlq.send_back(letter)
    except (BotoCoreError, ClientError) as exc:
        log.error("redrive could not send a dead letter; it stays in the DLQ", extra={
            **_ids(letter), "error_type": type(exc).__name__})
        return {**item, "outcome": "error", "detail": "The ingest queue refused the message; it "
                "stays in the dead-letter queue. Check SQS, then run the redrive again."}
    try:
        dlq.delete(letter)
        scan.settled(letter)
    except (BotoCoreError, ClientError) as exc:
        # Sent but not deleted: a copy stays in the DLQ. The worker ignores the duplicate.
        log.warning("redriven dead letter could not be deleted; a copy stays in the DLQ",
                    extra={**_ids(letter), "error_type": type(exc).__name__})
        item["detail"] = "A copy stays in the dead-letter queue; redriving it again is harmless."
    log.info("dead letter redriven", extra={**_ids(letter), "reopened": claim.reopened,
                                            "previous_status": claim.previous_status,
                                            "new_message_id": item["new_message_id"],
                                            "actor": actor.name})
    return {**item, "outcome": "redriven"}


def _ids(letter: DeadLetter) -> dict[str, str | None]:
    return {"message_id": letter.message_id,
            "run_id": str(letter.run_id) if letter.run_id else None,
            "tenant_id": str(letter.tenant_id) if letter.tenant_id else None}


# ── purge ───────────────────────────────────────────────────────────────────────────────────
def purge(dlq: DeadLetterQueue, conn: db.Conn, *, older_than_s: float,
          actor: reopen.Actor, reason: str, tenant_id: UUID | None = None,
          dry_run: bool = False, max_scan: int = 1000) -> dict[str, Any]:
    """Delete the dead letters in scope that were first enqueued more than ``older_than_s`` ago."""
    if older_than_s < 0:
        raise errors.InvalidRequest("older_than must not be negative.")
    items: list[dict[str, Any]] = []
    now = time.time()
    with dlq.scan(max_scan) as scan:
        for letter in scan:
            if not _in_scope(letter, tenant_id) or letter.age_s(now) < older_than_s:
                continue
            item = {"message_id": letter.message_id, "run_id": letter.run_id,
                    "tenant_id": letter.tenant_id, "age_s": round(letter.age_s(now), 1)}
            if not dry_run:
                # Recorded before it is deleted: nothing disappears without a trace.
                if letter.job is not None:
                    reopen.record_purge(conn, run_id=letter.job.run_id,
                                        tenant_id=letter.job.tenant_id, actor=actor,
                                        reason=reason, message_id=letter.message_id)
                dlq.delete(letter)
                scan.settled(letter)
                log.info("dead letter purged", extra={**_ids(letter), "actor": actor.name})
            items.append(item)
    return {"dry_run": dry_run, "purged": len(items), "items": items, "complete": scan.complete}


# ── helpers for both front ends ─────────────────────────────────────────────────────────────
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str | float) -> float:
    """'90s', '15m', '2h', '7d', '1w' or a number of seconds → seconds."""
    if isinstance(text, int | float):
        return float(text)
    raw = text.strip().lower()
    try:
        if raw and raw[-1] in _UNITS:
            return float(raw[:-1]) * _UNITS[raw[-1]]
        return float(raw)
    except ValueError:
        raise errors.InvalidRequest(
            f"Cannot read the age {text!r}; write it like 90s, 15m, 2h or 7d.") from None
