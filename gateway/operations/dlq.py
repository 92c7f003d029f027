"""Dead letters: move them out of SQS into Postgres, then list, show, redrive and purge the rows.

One service behind `ingest dlq …` (CLI), /v1/admin/dlq (operators, every tenant) and
/v1/dead-letters (a tenant admin, their own tenant). See docs/decisions/0060 and 0010.

SQS has no peek: every look at a message is a receive, which bumps its receive count and hides
it for a while. So only the *mover* (``archive``, run by the gateway's housekeeping loop and by
``ingest dlq sync``) touches the dead-letter queue: receive → insert into ``dead_letters``
(idempotent on the SQS message id) → delete. Everything a person does reads and writes that
table, and has no effect on SQS at all.

Redrive is a database transaction: the run is reopened if it failed (gateway/operations/reopen.py, a
recorded action), its job goes back into the outbox, and the row is marked redriven. The outbox
relay publishes the job; if SQS refuses, the job waits in the outbox and is published later.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
from botocore.exceptions import BotoCoreError, ClientError
from psycopg.types.json import Jsonb

from gateway.operations import reopen
from shared import db, errors, jobs
from shared.queue import DLQ_REASON, Queue

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("operations.sql"))

MOVE_VISIBILITY_S = 30   # how long the mover hides what it received, if it dies mid-pass
RECEIVE_WAIT_S = 1       # a long poll asks every SQS server; a short one may miss messages
STATUSES = ("open", "redriven", "purged")
MAX_PAGE = 10_000
MAX_AGE_S = 10 * 365 * 86400        # offsets past this are refused, not sent to Postgres


# ── the SQS side: only the mover uses it ────────────────────────────────────────────────────
class DeadLetterQueue:
    def __init__(self, sqs: Any, dlq_url: str) -> None:
        if not dlq_url:
            raise errors.ServiceUnavailable("No dead-letter queue is configured; set SQS_DLQ_URL.")
        self.sqs, self.url = sqs, dlq_url

    @classmethod
    def of(cls, queue: Queue) -> DeadLetterQueue:
        return cls(queue.sqs, queue.dlq_url)

    def receive(self, count: int) -> list[dict[str, Any]]:
        response = self.sqs.receive_message(
            QueueUrl=self.url, MaxNumberOfMessages=max(1, min(10, count)),
            WaitTimeSeconds=RECEIVE_WAIT_S, VisibilityTimeout=MOVE_VISIBILITY_S,
            AttributeNames=["All"], MessageAttributeNames=["All"])
        messages: list[dict[str, Any]] = response.get("Messages", [])
        return messages

    def delete(self, receipt: str) -> None:
        self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=receipt)

    def release(self, receipts: list[str]) -> None:
        """Make received messages visible again at once (the mover could not archive them)."""
        for start in range(0, len(receipts), 10):
            self.sqs.change_message_visibility_batch(QueueUrl=self.url, Entries=[
                {"Id": str(i), "ReceiptHandle": r, "VisibilityTimeout": 0}
                for i, r in enumerate(receipts[start:start + 10])])


@dataclass
class ArchiveReport:
    moved: int = 0       # new rows
    again: int = 0       # already archived (an earlier delete failed); deleted now
    complete: bool = True


def archive(dlq: DeadLetterQueue, conn: db.Conn, *, max_messages: int = 1000,
            body_max_bytes: int = 65536) -> ArchiveReport:
    """Move up to ``max_messages`` dead letters from SQS into the table; safe on every replica.

    Each message is committed to the table before it is deleted from SQS: a crash in between
    leaves it in both places, and the next pass finds its row and only deletes it.
    """
    report = ArchiveReport()
    while True:
        if report.moved + report.again >= max_messages:
            report.complete = False
            return report
        batch = dlq.receive(max_messages - report.moved - report.again)
        if not batch:
            return report
        for index, raw in enumerate(batch):
            try:
                row = archive_row(raw, body_max_bytes)
                inserted = conn.execute(Q["archive_dead_letter"], row).fetchone()
            except Exception:
                # Nothing of this batch is lost: what is not archived is visible again at once.
                _release_quietly(dlq, [m["ReceiptHandle"] for m in batch[index:]])
                raise
            dlq.delete(raw["ReceiptHandle"])
            if inserted and inserted["inserted"]:
                report.moved += 1
                log.info("dead letter archived", extra={
                    "message_id": row["message_id"], "run_id": _str(row["run_id"]),
                    "tenant_id": _str(row["tenant_id"]), "receive_count": row["receive_count"]})
            else:
                report.again += 1


def archive_row(raw: dict[str, Any], body_max_bytes: int) -> dict[str, Any]:
    """The dead_letters row of one received SQS message."""
    body: str = raw["Body"]
    encoded = body.encode()
    truncated = len(encoded) > body_max_bytes
    tenant_id = run_id = None
    parse_error = None
    try:
        job = jobs.decode(body)
        tenant_id, run_id = job.tenant_id, job.run_id
    except jobs.InvalidJob as exc:
        parse_error = exc.detail
        tenant_id, run_id = _named_ids(body)
    attributes = raw.get("MessageAttributes", {})
    system = raw.get("Attributes", {})
    sent_ms = system.get("SentTimestamp")
    return {
        "message_id": raw["MessageId"], "tenant_id": tenant_id, "run_id": run_id,
        "body": encoded[:body_max_bytes].decode(errors="ignore") if truncated else body,
        "body_bytes": len(encoded), "body_truncated": truncated, "parse_error": parse_error,
        "dlq_reason": attributes.get(DLQ_REASON, {}).get("StringValue"),
        "attributes": Jsonb({name: _attribute(value) for name, value in attributes.items()
                             if name != DLQ_REASON}),
        "receive_count": int(system.get("ApproximateReceiveCount", 1)),
        "sent_at": datetime.fromtimestamp(int(sent_ms) / 1000, UTC) if sent_ms else None,
    }


def _named_ids(body: str) -> tuple[UUID | None, UUID | None]:
    """The tenant and run a body that is no valid job still names, if it names them."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(data, dict):
        return None, None
    return _uuid_or_none(data.get("tenant_id")), _uuid_or_none(data.get("run_id"))


def _uuid_or_none(value: Any) -> UUID | None:
    try:
        return UUID(str(value)) if isinstance(value, str) else None
    except ValueError:
        return None


def _attribute(value: dict[str, Any]) -> str:
    if "StringValue" in value:
        return str(value["StringValue"])
    return f"<binary, {len(value.get('BinaryValue', b''))} bytes>"


def _release_quietly(dlq: DeadLetterQueue, receipts: list[str]) -> None:
    try:
        dlq.release(receipts)
    except (BotoCoreError, ClientError) as exc:
        log.warning("could not release dead letters the mover did not archive; they reappear "
                    "after its visibility timeout", extra={
                        "messages": len(receipts), "visibility_s": MOVE_VISIBILITY_S,
                        "error_type": type(exc).__name__})


# ── list and show: reads of the table only ──────────────────────────────────────────────────
def list_letters(conn: db.Conn, *, tenant_id: UUID | None = None, status: str | None = "open",
                 page: int = 1, limit: int = 50) -> dict[str, Any]:
    """One page of the dead letters in scope, oldest first, with run status and reason.

    ``tenant_id`` None is the operators' view (every tenant, and messages that name none)."""
    if status is not None and status not in STATUSES:
        raise errors.InvalidRequest(f"status must be one of {', '.join(STATUSES)} or all.")
    if not 1 <= page <= MAX_PAGE or not 1 <= limit <= 500:
        raise errors.InvalidRequest(f"page must be between 1 and {MAX_PAGE} and limit between "
                                    "1 and 500.")
    rows = conn.execute(Q["list_dead_letters"], {
        "tenant_id": tenant_id, "status": status, "limit": limit,
        "offset": (page - 1) * limit}).fetchall()
    total = int(rows[0]["total"]) if rows else _count(conn, tenant_id, status, page)
    now = time.time()
    return {"items": [_summary(row, now) for row in rows], "page": page, "limit": limit,
            "total": total, "status": status or "all"}


def _count(conn: db.Conn, tenant_id: UUID | None, status: str | None, page: int) -> int:
    # An empty page past the end still says how many there are.
    if page == 1:
        return 0
    rows = conn.execute(Q["list_dead_letters"], {"tenant_id": tenant_id, "status": status,
                                                 "limit": 1, "offset": 0}).fetchall()
    return int(rows[0]["total"]) if rows else 0


def show(conn: db.Conn, message_id: str, *, tenant_id: UUID | None = None) -> dict[str, Any]:
    """One dead letter in full: body, attributes, and its run as the database has it."""
    row = conn.execute(Q["show_dead_letter"], {"message_id": message_id,
                                               "tenant_id": tenant_id}).fetchone()
    if row is None:
        raise errors.NotFound("No dead letter with that message id exists"
                              f"{' in your tenant' if tenant_id else ''}.")
    body: Any = row["body"]
    if row["parse_error"] is None and not row["body_truncated"]:
        body = orjson.loads(body)
    run = None if row["run_status"] is None else {
        "status": row["run_status"], "error": row["run_error"], "stage": row["stage"],
        "delivery_count": row["delivery_count"], "finished_at": row["run_finished_at"]}
    return {**_summary(row, time.time()), "body": body, "body_bytes": row["body_bytes"],
            "body_truncated": row["body_truncated"], "problem": row["parse_error"],
            "attributes": row["attributes"], "run": run,
            "resolution_reason": row["resolution_reason"]}


def _summary(row: dict[str, Any], now: float) -> dict[str, Any]:
    sent = row["sent_at"] or row["first_seen_at"]
    return {"message_id": row["message_id"], "run_id": row["run_id"],
            "tenant_id": row["tenant_id"], "receive_count": row["receive_count"],
            "deliveries": row["delivery_count"], "run_status": row["run_status"],
            "reason": reason(row), "sent_at": row["sent_at"],
            "age_s": round(max(0.0, now - sent.timestamp()), 1),
            "first_seen_at": row["first_seen_at"], "last_seen_at": row["last_seen_at"],
            "status": row["status"], "resolved_at": row["resolved_at"],
            "resolved_by": row["resolved_by"]}


def reason(row: dict[str, Any]) -> str:
    """Why the message is here, in one sentence an operator can act on."""
    if row["dlq_reason"]:
        return str(row["dlq_reason"])
    if row["parse_error"]:
        return f"Not a valid ingest job: {row['parse_error']}"
    if row["run_status"] is None:
        return "Receive limit reached, and its run does not exist; purge it."
    text = f"Receive limit reached after {row['delivery_count']} deliveries"
    if row["last_retry_error"]:
        text += f"; last worker error: {row['last_retry_error']}"
    if row["run_status"] == "failed" and row["run_error"]:
        text += f"; the run failed since: {row['run_error']}"
    return f"{text.rstrip('.')}; run is {row['run_status']}."


# ── redrive ─────────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Selection:
    all: bool = False
    run_ids: frozenset[UUID] = frozenset()
    message_ids: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not (self.all or self.run_ids or self.message_ids):
            raise errors.InvalidRequest("Say which dead letters: all, run ids or message ids.")

    def params(self) -> dict[str, Any]:
        return {"all": self.all, "run_ids": list(self.run_ids),
                "message_ids": list(self.message_ids)}


def redrive(conn: db.Conn, *, selection: Selection, actor: reopen.Actor, reason: str,
            tenant_id: UUID | None = None, dry_run: bool = False,
            limit: int | None = None) -> dict[str, Any]:
    """Put the selected open dead letters' jobs back through the outbox; report each one.

    One transaction: every run reopened, every action recorded, every job in the outbox and
    every row marked redriven, or none of it. The caller wakes the relay after the commit."""
    items: list[dict[str, Any]] = []
    with conn.transaction():
        rows = conn.execute(Q["select_open_dead_letters"], {
            **selection.params(), "tenant_id": tenant_id, "older_than_s": None,
            "limit": limit if limit is not None else 1000}).fetchall()
        for row in rows:
            items.append(_redrive_one(conn, row, actor, reason, dry_run))
    moved = sum(i["outcome"] in ("redriven", "would_redrive") for i in items)
    for item in items:
        if item["outcome"] == "redriven":
            log.info("dead letter redriven", extra={
                "message_id": item["message_id"], "run_id": _str(item["run_id"]),
                "tenant_id": _str(item["tenant_id"]), "reopened": item["reopened"],
                "actor": actor.name})
    return {"dry_run": dry_run, "redriven": moved, "items": items}


def _redrive_one(conn: db.Conn, row: dict[str, Any], actor: reopen.Actor, why: str,
                 dry_run: bool) -> dict[str, Any]:
    item: dict[str, Any] = {"message_id": row["message_id"], "run_id": row["run_id"],
                            "tenant_id": row["tenant_id"]}
    if row["parse_error"] is not None:
        return {**item, "outcome": "skipped",
                "detail": "Not a valid ingest job, so it would dead-letter again; purge it."}
    claim = reopen.for_redrive(conn, run_id=row["run_id"], tenant_id=row["tenant_id"],
                               actor=actor, reason=why, message_id=row["message_id"],
                               dry_run=dry_run)
    if claim is None:
        return {**item, "outcome": "skipped",
                "detail": "Its run does not exist in its tenant, so it can never succeed; "
                          "purge it."}
    item |= {"run_status": claim.previous_status, "reopened": claim.reopened}
    if dry_run:
        return {**item, "outcome": "would_redrive"}
    keys = {"tenant_id": row["tenant_id"], "run_id": row["run_id"]}
    # The job we committed at intake, if the outbox still has it; else the body we got back.
    stored = conn.execute(Q["outbox_payload"], keys).fetchone()
    if stored is None and row["body_truncated"]:
        return {**item, "outcome": "skipped",
                "detail": "Its body was cut when archived and its run has no stored job; "
                          "upload the document again, then purge this."}
    payload = stored["payload"] if stored else orjson.loads(row["body"])
    conn.execute(Q["requeue_job"], {**keys, "payload": Jsonb(payload)})
    _resolve(conn, row["message_id"], "redriven", actor, why)
    return {**item, "outcome": "redriven"}


def _resolve(conn: db.Conn, message_id: str, status: str, actor: reopen.Actor,
             why: str) -> None:
    conn.execute(Q["resolve_dead_letter"], {
        "message_id": message_id, "status": status, "actor": actor.name,
        "actor_user_id": actor.user_id, "reason": why})


def publish_now(conn: db.Conn, queue: Queue, run_ids: list[UUID]) -> int:
    """Publish redriven jobs from the outbox at once (the CLI has no relay); return how many.

    What cannot be sent stays in the outbox, where any gateway's relay publishes it later."""
    sent = 0
    with conn.transaction():
        rows = conn.execute(Q["claim_unpublished_jobs"], {"run_ids": run_ids}).fetchall()
        for row in rows:
            try:
                queue.send(orjson.dumps(row["payload"]).decode())
            except (BotoCoreError, ClientError) as exc:
                log.warning("redriven jobs stay in the outbox for a gateway to publish",
                            extra={"jobs": len(rows) - sent, "error_type": type(exc).__name__})
                break
            conn.execute(Q["mark_job_published"], {"run_id": row["run_id"]})
            sent += 1
    return sent


# ── purge ───────────────────────────────────────────────────────────────────────────────────
def purge(conn: db.Conn, *, older_than_s: float, actor: reopen.Actor, reason: str,
          tenant_id: UUID | None = None, dry_run: bool = False) -> dict[str, Any]:
    """Mark the open dead letters first enqueued more than ``older_than_s`` ago as purged.

    Rows stay, resolved, with who purged them and why; a run they name gets a dlq_purge action."""
    if not 0 <= older_than_s <= MAX_AGE_S:
        raise errors.InvalidRequest("older_than must be between 0 and ten years.")
    items: list[dict[str, Any]] = []
    with conn.transaction():
        rows = conn.execute(Q["select_open_dead_letters"], {
            **Selection(all=True).params(), "tenant_id": tenant_id,
            "older_than_s": older_than_s, "limit": 100_000}).fetchall()
        for row in rows:
            items.append({"message_id": row["message_id"], "run_id": row["run_id"],
                          "tenant_id": row["tenant_id"], "age_s": round(float(row["age_s"]), 1)})
            if dry_run:
                continue
            if row["run_id"] is not None and row["tenant_id"] is not None:
                reopen.record_purge(conn, run_id=row["run_id"], tenant_id=row["tenant_id"],
                                    actor=actor, reason=reason, message_id=row["message_id"])
            _resolve(conn, row["message_id"], "purged", actor, reason)
    if not dry_run:
        log.info("dead letters purged", extra={"purged": len(items), "actor": actor.name,
                                               "tenant_id": _str(tenant_id)})
    return {"dry_run": dry_run, "purged": len(items), "items": items}


# ── helpers for every front end ─────────────────────────────────────────────────────────────
def open_count(conn: db.Conn, tenant_id: UUID | None = None) -> int:
    row = conn.execute(Q["open_dead_letters"], {"tenant_id": tenant_id}).fetchone()
    return int(row["open"]) if row else 0


def _str(value: object) -> str | None:
    return None if value is None else str(value)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# What parse_age reads, as the API declares it: a number of seconds, or one with a unit.
AGE_PATTERN = r"^\s*[0-9]{1,9}(\.[0-9]{1,3})?[smhdwSMHDW]?\s*$"


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
