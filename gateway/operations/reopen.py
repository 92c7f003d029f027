"""Run a failed run again, as a recorded operator action: explicit retry and DLQ redrive.

A `failed` run is final for the queue (the worker deletes its messages as duplicates), so the
only way back is failed → queued inside a transaction that names the run
(``SET LOCAL ingest.reopen_run``, see the trigger in migrations/0001), together with a
``run_actions`` row that says who did it, when and why. See docs/decisions/0010.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from shared import db, errors

Q = db.load_queries(Path(__file__).with_name("operations.sql"))


@dataclass(frozen=True)
class Actor:
    """Who acts: ``user:<id>`` through the API, ``cli:<name>`` through the operator CLI."""

    name: str
    user_id: UUID | None = None
    is_admin: bool = True

    @classmethod
    def user(cls, user_id: UUID, is_admin: bool) -> Actor:
        return cls(f"user:{user_id}", user_id, is_admin)


@dataclass(frozen=True)
class RedriveClaim:
    run_id: UUID
    tenant_id: UUID
    previous_status: str
    reopened: bool


# ── redrive (sync: the DLQ tools run in the CLI and in a thread of the gateway) ─────────────
def for_redrive(conn: db.Conn, *, run_id: UUID, tenant_id: UUID, actor: Actor,
                reason: str, message_id: str, dry_run: bool = False) -> RedriveClaim | None:
    """Reopen the run of a dead letter if it failed, and record the redrive; None = no such run.

    Runs in any other state are left as they are: queued and running runs are still the
    worker's to finish, and a succeeded one makes the redriven message a no-op.
    """
    keys = {"tenant_id": tenant_id, "run_id": run_id}
    with conn.transaction():
        run = conn.execute(Q["lock_run"], keys).fetchone()
        if run is None:
            return None
        reopen = run["status"] == "failed"
        if dry_run:
            return RedriveClaim(run_id, tenant_id, run["status"], reopen)
        if reopen:
            _reopen(conn, keys, run["batch_id"])
            conn.execute(Q["queue_attempt"], {**keys, "kind": "redrive", "actor": actor.name})
        conn.execute(Q["record_action"], _action(
            keys, "redrive", actor, reason, run,
            {"message_id": message_id, "reopened": reopen}))
    return RedriveClaim(run_id, tenant_id, run["status"], reopen)


def record_purge(conn: db.Conn, *, run_id: UUID, tenant_id: UUID, actor: Actor,
                 reason: str, message_id: str) -> bool:
    """Record that a run's dead letter was purged; False if the run does not exist."""
    keys = {"tenant_id": tenant_id, "run_id": run_id}
    with conn.transaction():
        run = conn.execute(Q["lock_run"], keys).fetchone()
        if run is None:
            return False
        conn.execute(Q["record_action"], _action(keys, "dlq_purge", actor, reason, run,
                                                 {"message_id": message_id}))
    return True


def _reopen(conn: db.Conn, keys: dict[str, Any], batch_id: UUID | None) -> None:
    conn.execute(Q["allow_reopen"], {"run_id": str(keys["run_id"])})
    conn.execute(Q["reopen_run"], keys)
    if batch_id is not None:
        # A records run's batch goes back to pending with it (docs/decisions/0128).
        conn.execute(Q["allow_reopen_batch"], {"batch_id": str(batch_id)})
        conn.execute(Q["reopen_batch"], {**keys, "batch_id": batch_id})


def _action(keys: dict[str, Any], action: str, actor: Actor, reason: str, run: dict[str, Any],
            details: dict[str, Any]) -> dict[str, Any]:
    return {**keys, "action": action, "actor": actor.name, "actor_user_id": actor.user_id,
            "reason": reason, "details": Jsonb({
                "previous_status": run["status"], "previous_error": run["error"], **details})}


# ── explicit retry (async: a request handler of the gateway) ────────────────────────────────
UploadCheck = Callable[[str], Awaitable[bool]]


async def retry(pool: db.AsyncPool, *, run_id: UUID, tenant_id: UUID, actor: Actor,
                reason: str, upload_exists: UploadCheck) -> dict[str, Any]:
    """Requeue a failed run with its stored upload; raise the error the caller should see."""
    keys = {"tenant_id": tenant_id, "run_id": run_id}
    with db.translate():
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(Q["lock_document_of_run"], keys)
            run = await (await conn.execute(Q["lock_run"], keys)).fetchone()
            if run is None:
                raise errors.NotFound("No ingestion run with that id exists in your tenant.")
            _check_retryable(run, actor)
            upload_uri = (run["config"] or {}).get("upload_uri")
            if not upload_uri or not await upload_exists(upload_uri):
                raise errors.UploadExpired()
            await _check_content(conn, run)
            payload = await (await conn.execute(Q["outbox_payload"], keys)).fetchone()
            if payload is None:
                raise errors.UploadExpired("This run has no job to send again; upload the "
                                           "document again.")
            await conn.execute(Q["allow_reopen"], {"run_id": str(run_id)})
            await conn.execute(Q["reopen_run"], keys)
            if run["batch_id"] is not None:
                # The batch reopens in the same transaction (docs/decisions/0128).
                await conn.execute(Q["allow_reopen_batch"], {"batch_id": str(run["batch_id"])})
                await conn.execute(Q["reopen_batch"], {**keys, "batch_id": run["batch_id"]})
            await conn.execute(Q["queue_attempt"], {**keys, "kind": "retry",
                                                    "actor": actor.name})
            await conn.execute(Q["requeue_job"], {**keys, "payload": Jsonb(payload["payload"])})
            action = await (await conn.execute(Q["record_action"], _action(
                keys, "retry", actor, reason, run, {}))).fetchone()
    assert action is not None
    return {"run_id": run_id, "status": "queued", "action_id": action["action_id"],
            "retried_at": action["created_at"]}


def _check_retryable(run: dict[str, Any], actor: Actor) -> None:
    if not actor.is_admin and run["initiated_by"] != actor.user_id:
        raise errors.Forbidden("Only an admin or the user who started this run may retry it.")
    if run["status"] != "failed":
        raise errors.RunNotFailed(f"Only a failed run can be retried; this one is "
                                  f"{run['status']}.")
    if run.get("error_code") == errors.SourceObjectDeleted.code:
        # Running it again would serve an object the bucket no longer has (ADR 0241).
        raise errors.SourceObjectDeleted("This run's object was deleted from its bucket; put it "
                                         "back and sync the source instead of retrying.")


async def _check_content(conn: db.AsyncConn, run: dict[str, Any]) -> None:
    content_hash = (run["config"] or {}).get("content_hash")
    if run["doc_id"] is None or not content_hash:
        return
    state = await (await conn.execute(Q["content_state"], {
        "tenant_id": run["tenant_id"], "doc_id": run["doc_id"], "run_id": run["run_id"],
        "content_hash": content_hash})).fetchone()
    assert state is not None
    if state["active_same"]:
        raise errors.AlreadyIngested("This content is already the document's active version; "
                                     "nothing to retry.")
    if state["inflight_run_id"]:
        raise errors.AlreadyIngested(f"Run {state['inflight_run_id']} is already ingesting "
                                     "this content; follow that run instead.")
