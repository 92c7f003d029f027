"""Operators' and tenant admins' view of the event ledger, replay of its dead letters, and the
actions on one pending or dead-letter event: discard it, or edit its payload and replay it.

Sync functions over one connection, shared by the API (gateway/events/replay_routes.py, in a
thread) and the CLI (cli/events.py). ``tenant_id=None`` means every tenant: operators and the
CLI only; the routes pass the caller's tenant for everyone else. A replay resets the chosen
dead letters to pending with a fresh attempt budget and records who did it in event_replays,
one row per tenant touched, and the ids it reset in event_replay_items, in the same
transaction (docs/decisions/0142, 0144). A discard or an edit records who, why and what the
event was before in event_actions, in the action's transaction (docs/decisions/0194).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from gateway.events import intake
from shared import db, errors
from shared.db import lenient

Q = db.load_queries(Path(__file__).with_name("replay.sql"))
STATES = ("pending", "processed", "dead_letter", "discarded")
# The states an operator may discard or edit: not yet applied, not already set aside.
ACTIONABLE = ("pending", "dead_letter")
MAX_REASON_CHARS = 1000
MAX_LIMIT = 1000
MAX_IDS = 1000
MAX_FILTER_CHARS = 200


class EventNotFound(errors.NotFound):
    """No such event in your tenant's ledger; list them at GET /v1/events."""

    code = "event_not_found"


class EventSettled(errors.Conflict):
    """Only a pending or dead-letter event can be discarded or edited."""

    code = "event_settled"


@dataclass(frozen=True)
class Filter:
    state: str | None = None
    source_system: str | None = None
    type: str | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if self.state is not None and self.state not in STATES:
            raise errors.InvalidRequest(f"state must be one of {', '.join(STATES)}.")
        for name in ("source_system", "type", "error"):
            value = getattr(self, name)
            if value is not None and len(value) > MAX_FILTER_CHARS:
                raise errors.InvalidRequest(f"{name} is longer than {MAX_FILTER_CHARS} "
                                            "characters; no event has such a value.")

    @classmethod
    def of(cls, **values: str | None) -> Filter:
        """Empty strings (an unfilled form field) filter nothing."""
        return cls(**{k: (v.strip() or None) if isinstance(v, str) else v
                      for k, v in values.items()})

    @property
    def params(self) -> dict[str, Any]:
        return {"state": self.state, "source_system": self.source_system, "type": self.type,
                "error": self.error}

    def stored(self) -> dict[str, str]:
        return {k: v for k, v in self.params.items() if v is not None and k != "state"}


def list_events(conn: db.Conn, *, tenant_id: UUID | None, wanted: Filter, limit: int = 100,
                offset: int = 0) -> dict[str, Any]:
    if not 1 <= limit <= MAX_LIMIT:
        raise errors.InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}.")
    if offset < 0:
        raise errors.InvalidRequest("offset must be 0 or more.")
    params = {"tenant_id": tenant_id, **wanted.params, "limit": limit, "offset": offset}
    lenient.register(conn)  # one unreadable stored value must not hide the whole list
    rows = conn.execute(Q["list_events"], params).fetchall()
    total = rows[0]["total"] if rows else conn.execute(Q["count_events"], params).fetchone()["total"]  # type: ignore[index]
    return {"events": [view(r) for r in rows], "total": total}


def show(conn: db.Conn, ledger_id: int, *, tenant_id: UUID | None) -> dict[str, Any]:
    lenient.register(conn)
    row = conn.execute(Q["show_event"], {"ledger_id": ledger_id,
                                        "tenant_id": tenant_id}).fetchone()
    if row is None:
        raise EventNotFound(f"No event {ledger_id} in your tenant's ledger; list them at "
                            "GET /v1/events.")
    replays = conn.execute(Q["replays_of"], {"tenant_id": row["tenant_id"],
                                             "ledger_id": ledger_id}).fetchall()
    payload = row["payload"]
    actions = conn.execute(Q["actions_of"], {"tenant_id": row["tenant_id"],
                                             "ledger_id": ledger_id}).fetchall()
    return {**view(row), "payload": str(payload) if _bad(payload) else payload,
            "payload_readable": not _bad(payload), "payload_sha256": row["payload_sha256"],
            "last_conflict_at": _iso(row["last_conflict_at"]),
            "replays": [{"replay_id": r["replay_id"], "actor": r["actor"],
                         "at": _iso(r["created_at"])} for r in replays],
            "actions": [{"action_id": a["action_id"], "action": a["action"],
                         "actor": a["actor"], "reason": a["reason"],
                         "previous_state": a["previous_state"],
                         "previous_error": a["previous_error"], "at": _iso(a["created_at"])}
                        for a in actions]}


def discard(conn: db.Conn, ledger_id: int, *, tenant_id: UUID | None, actor: str,
            actor_user_id: UUID | None, reason: str) -> dict[str, Any]:
    """Set a pending or dead-letter event aside for good: it is never applied."""
    return _act(conn, ledger_id, "discard", tenant_id=tenant_id, actor=actor,
                actor_user_id=actor_user_id, reason=reason, params={})


def edit(conn: db.Conn, ledger_id: int, *, tenant_id: UUID | None, actor: str,
         actor_user_id: UUID | None, reason: str, payload: Any,
         max_payload_bytes: int = 65536) -> dict[str, Any]:
    """Replace a pending or dead-letter event's payload and make it due now, with a fresh
    attempt budget. The payload passes intake's own checks (an object, storable, not too big)."""
    if not isinstance(payload, dict):
        raise errors.InvalidRequest("payload must be a JSON object (one row of its type).")
    try:
        text = intake.canonical(payload, max_payload_bytes)
    except intake.Refused as exc:
        raise errors.InvalidRequest(exc.detail) from exc
    return _act(conn, ledger_id, "edit", tenant_id=tenant_id, actor=actor,
                actor_user_id=actor_user_id, reason=reason, params={"payload": text})


def _act(conn: db.Conn, ledger_id: int, action: str, *, tenant_id: UUID | None, actor: str,
         actor_user_id: UUID | None, reason: str, params: dict[str, Any]) -> dict[str, Any]:
    reason = reason.strip()
    if not 1 <= len(reason) <= MAX_REASON_CHARS or "\x00" in reason:
        raise errors.InvalidRequest(f"reason is required: say why, in at most "
                                    f"{MAX_REASON_CHARS} characters.")
    with conn.transaction():
        row = conn.execute(Q["lock_event"], {"ledger_id": ledger_id,
                                             "tenant_id": tenant_id}).fetchone()
        if row is None:
            raise EventNotFound(f"No event {ledger_id} in your tenant's ledger; list them at "
                                "GET /v1/events.")
        if row["process_state"] not in ACTIONABLE:
            raise EventSettled(f"Event {ledger_id} is {row['process_state']}; only a pending "
                               "or dead-letter event can be discarded or edited.")
        keys = {"ledger_id": ledger_id, "tenant_id": row["tenant_id"]}
        recorded = conn.execute(Q["record_action"], {
            **keys, "action": action, "actor": actor, "actor_user_id": actor_user_id,
            "reason": reason}).fetchone()
        assert recorded is not None
        conn.execute(Q["discard_event" if action == "discard" else "edit_event"],
                     {**keys, **params})
    return {"ledger_id": ledger_id, "action_id": recorded["action_id"], "action": action,
            "state": "discarded" if action == "discard" else "pending"}


def replay(conn: db.Conn, *, tenant_id: UUID | None, actor: str, actor_user_id: UUID | None,
           ledger_ids: list[int] | None = None, wanted: Filter | None = None) -> dict[str, Any]:
    """Reset the chosen dead letters (ids, or every one matching ``wanted``) to pending."""
    if bool(ledger_ids) == (wanted is not None):
        raise errors.InvalidRequest("Send either ledger_ids or a filter (source_system, type, "
                                    "error; all: true for every dead letter), not both.")
    if ledger_ids and len(ledger_ids) > MAX_IDS:
        raise errors.InvalidRequest(f"Replay at most {MAX_IDS} ids at once, or use a filter.")
    with conn.transaction():
        if ledger_ids:
            moved = conn.execute(Q["replay_ids"], {"ledger_ids": ledger_ids,
                                                   "tenant_id": tenant_id}).fetchall()
        else:
            assert wanted is not None
            moved = conn.execute(Q["replay_filter"], {**wanted.params,
                                                      "tenant_id": tenant_id}).fetchall()
        by_tenant: dict[UUID, list[int]] = defaultdict(list)
        for row in moved:
            by_tenant[row["tenant_id"]].append(row["ledger_id"])
        for tenant, ids in by_tenant.items():
            recorded = conn.execute(Q["record_replay"], {
                "tenant_id": tenant, "actor": actor, "actor_user_id": actor_user_id,
                "ledger_ids": sorted(ids) if ledger_ids else None,
                "filter": None if ledger_ids else Jsonb(wanted.stored() if wanted else {}),
                "count": len(ids)}).fetchone()
            assert recorded is not None
            # What a filter matched is known only now: record it, so an event's history
            # lists the replays that touched it and no other.
            conn.execute(Q["record_replay_items"], {"replay_id": recorded["replay_id"],
                                                    "ledger_ids": sorted(ids)})
    replayed = sorted(r["ledger_id"] for r in moved)
    return {"replayed": len(replayed), "ledger_ids": replayed}


def view(row: dict[str, Any]) -> dict[str, Any]:
    return {"ledger_id": row["ledger_id"], "tenant_id": str(row["tenant_id"]),
            "source_system": row["source_system"], "source_event_id": row["source_event_id"],
            "source_sequence": row["source_sequence"],
            "source_emitted_at": _iso(row["source_emitted_at"]), "type": row["type"],
            "state": row["process_state"], "error": row["process_error"],
            "superseded": row["superseded"], "processed_at": _iso(row["processed_at"]),
            # Attempts since the last replay or edit: what the budget counts (ADR 0194).
            "apply_attempt_count": row["apply_attempt_count"] - row["apply_attempt_base"],
            "next_apply_at": _iso(row["next_apply_at"]),
            "first_seen_at": _iso(row["ingest_first_seen_at"]),
            "last_seen_at": _iso(row["ingest_last_seen_at"]),
            "ingest_attempt_count": row["ingest_attempt_count"],
            "conflict_count": row["conflict_count"], "entity_key": row["entity_key"]}


def _iso(value: datetime | lenient.Unreadable | None) -> str | None:
    # A stored time Python cannot hold is shown as Postgres wrote it (e.g. "… BC").
    if isinstance(value, lenient.Unreadable):
        return str(value)
    return value.isoformat() if value is not None else None


def _bad(value: Any) -> bool:
    return isinstance(value, lenient.Unreadable)
