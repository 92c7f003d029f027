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

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec
from psycopg.types.json import Jsonb

from gateway.events import intake
from shared import db, errors
from shared.db import lenient

_SQL = db.load_queries(Path(__file__).with_name("replay.sql"))
# One filter for every listing, replay and purge (replay.sql `matching`).
Q = {name: text.replace("/* matching */", _SQL["matching"]) for name, text in _SQL.items()}
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
    """Which events: by state, source, type, a part of the error, and when they were first
    seen (``since`` inclusive, ``until`` exclusive; a window that ends before it starts
    holds none, as search's does)."""

    state: str | None = None
    source_system: str | None = None
    type: str | None = None
    error: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        if self.state is not None and self.state not in STATES:
            raise errors.InvalidRequest(f"state must be one of {', '.join(STATES)}.")
        for name in ("source_system", "type", "error"):
            value = getattr(self, name)
            if value is not None and len(value) > MAX_FILTER_CHARS:
                raise errors.InvalidRequest(f"{name} is longer than {MAX_FILTER_CHARS} "
                                            "characters; no event has such a value.")
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise errors.InvalidRequest(f"{name} needs an offset (Z or +hh:mm), e.g. "
                                            "2024-05-01T00:00:00Z.")

    @classmethod
    def of(cls, **values: Any) -> Filter:
        """Empty strings (an unfilled form field) filter nothing; times may come as ISO text."""
        clean: dict[str, Any] = {}
        for key, value in values.items():
            if isinstance(value, str):
                value = value.strip() or None
            if key in ("since", "until") and isinstance(value, str):
                value = _time(key, value)
            clean[key] = value
        return cls(**clean)

    @property
    def params(self) -> dict[str, Any]:
        return {"state": self.state, "source_system": self.source_system, "type": self.type,
                "error": self.error, "since": self.since, "until": self.until}

    def stored(self) -> dict[str, Any]:
        """The filter as recorded with a replay or a purge (times as ISO text)."""
        return {k: v.isoformat() if isinstance(v, datetime) else v
                for k, v in self.params.items() if v is not None and k != "state"}


def rfc3339(name: str, text: str | None) -> datetime | None:
    """A time as the API's /schema declares it (format date-time), and nothing looser."""
    if text is None:
        return None
    try:
        return msgspec.convert(text, datetime)
    except msgspec.ValidationError:
        raise errors.InvalidRequest(f"{name} must be an RFC 3339 time with its offset, e.g. "
                                    "2024-05-01T00:00:00Z.") from None


def _time(name: str, text: str) -> datetime:
    """What Python reads as ISO 8601: the CLI's and the web form's '2024-05-01 00:00+00:00'."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise errors.InvalidRequest(f"{name} must be an ISO 8601 time with its offset, e.g. "
                                    "2024-05-01T00:00:00Z.") from None


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
                         "previous_error": a["previous_error"],
                         "previous_source_sequence": a["previous_source_sequence"],
                         "previous_source_emitted_at": _iso(a["previous_source_emitted_at"]),
                         "from_version": a["from_version"], "purge_id": a["purge_id"],
                         "at": _iso(a["created_at"])}
                        for a in actions]}


class EventChanged(errors.Conflict):
    """The event changed since you loaded it; reload it and decide again."""

    code = "event_changed"


class PreconditionRequired(errors.InvalidRequest):
    """Say which version (or state) of the event you decided on."""

    code = "precondition_required"


@dataclass(frozen=True)
class Seen:
    """What the operator decided on (docs/decisions/0283): the event's version (exact), or its
    state (coarser: an event that left the state and came back to it matches again)."""

    version: int | None = None
    state: str | None = None

    def __post_init__(self) -> None:
        if self.version is None and self.state is None:
            raise PreconditionRequired("Send the version of the event you decided on (as "
                                       "GET /v1/events/{id} shows it), or the state you saw.")
        if self.state is not None and self.state not in STATES:
            raise errors.InvalidRequest(f"state must be one of {', '.join(STATES)}.")

    def holds(self, row: dict[str, Any]) -> bool:
        return (row["version"] == self.version if self.version is not None
                else row["process_state"] == self.state)


UNSET: Any = object()  # an envelope field the edit leaves as it is (None clears it)


def discard(conn: db.Conn, ledger_id: int, *, tenant_id: UUID | None, actor: str,
            actor_user_id: UUID | None, reason: str, seen: Seen) -> dict[str, Any]:
    """Set a pending or dead-letter event aside for good: it is never applied."""
    return _act(conn, ledger_id, "discard", tenant_id=tenant_id, actor=actor,
                actor_user_id=actor_user_id, reason=reason, seen=seen, params={})


def edit(conn: db.Conn, ledger_id: int, *, tenant_id: UUID | None, actor: str,
         actor_user_id: UUID | None, reason: str, seen: Seen, payload: Any = UNSET,
         source_emitted_at: Any = UNSET, source_sequence: Any = UNSET,
         max_payload_bytes: int = 65536,
         max_future_skew_s: float = intake.DEFAULT_FUTURE_SKEW_S) -> dict[str, Any]:
    """Correct a pending or dead-letter event, make it due now with a fresh attempt budget: its
    payload (intake's own checks: an object, storable, not too big), its source_emitted_at or
    its source_sequence (intake's rules; null clears it), any of them (ADR 0194, 0284)."""
    if payload is UNSET and source_emitted_at is UNSET and source_sequence is UNSET:
        raise errors.InvalidRequest("Send what to correct: payload, source_emitted_at or "
                                    "source_sequence.")
    params: dict[str, Any] = {"payload": None, "envelope": False, "set_sequence": False,
                              "source_sequence": None, "set_emitted_at": False,
                              "source_emitted_at": None}
    try:
        if payload is not UNSET:
            if not isinstance(payload, dict):
                raise errors.InvalidRequest("payload must be a JSON object (one row of its "
                                            "type).")
            params["payload"] = intake.canonical(payload, max_payload_bytes)
        if source_sequence is not UNSET:
            params.update(set_sequence=True, envelope=True,
                          source_sequence=intake.sequence(source_sequence))
        if source_emitted_at is not UNSET:
            params.update(set_emitted_at=True, envelope=True,
                          source_emitted_at=intake.emitted_at(source_emitted_at,
                                                              skew_s=max_future_skew_s))
    except intake.Refused as exc:
        raise errors.InvalidRequest(exc.detail) from exc
    return _act(conn, ledger_id, "edit", tenant_id=tenant_id, actor=actor,
                actor_user_id=actor_user_id, reason=reason, seen=seen, params=params)


def _reason(text: str) -> str:
    """The operator's reason, trimmed: required, bounded, no NUL."""
    reason = text.strip()
    if not 1 <= len(reason) <= MAX_REASON_CHARS or "\x00" in reason:
        raise errors.InvalidRequest(f"reason is required: say why, in at most "
                                    f"{MAX_REASON_CHARS} characters.")
    return reason


def _act(conn: db.Conn, ledger_id: int, action: str, *, tenant_id: UUID | None, actor: str,
         actor_user_id: UUID | None, reason: str, seen: Seen,
         params: dict[str, Any]) -> dict[str, Any]:
    """One action, taken once: on the version (or state) the operator saw, else the same
    answer for a retry of the request that was already taken, else 409 (ADR 0283)."""
    reason = _reason(reason)
    digest = _request_digest(action, actor, reason, params)
    with conn.transaction():
        row = conn.execute(Q["lock_event"], {"ledger_id": ledger_id,
                                             "tenant_id": tenant_id}).fetchone()
        if row is None:
            raise EventNotFound(f"No event {ledger_id} in your tenant's ledger; list them at "
                                "GET /v1/events.")
        keys = {"ledger_id": ledger_id, "tenant_id": row["tenant_id"]}
        if not seen.holds(row):
            taken = conn.execute(Q["action_taken"], {**keys, "version": seen.version,
                                                     "state": seen.state}).fetchone()
            if taken is not None and taken["request_sha256"] == digest:
                return _answer(ledger_id, taken["action_id"], action)  # the same request again
            raise EventChanged(f"Event {ledger_id} changed since you loaded it: it is now "
                               f"{row['process_state']}, version {row['version']}. Reload it "
                               "and decide again.")
        if row["process_state"] not in ACTIONABLE:
            raise EventSettled(f"Event {ledger_id} is {row['process_state']}; only a pending "
                               "or dead-letter event can be discarded or edited.")
        recorded = conn.execute(Q["record_action"], {
            **keys, "action": action, "actor": actor, "actor_user_id": actor_user_id,
            "reason": reason, "request_sha256": digest}).fetchone()
        assert recorded is not None
        conn.execute(Q["discard_event" if action == "discard" else "edit_event"],
                     {**keys, **params})
    return _answer(ledger_id, recorded["action_id"], action)


def _answer(ledger_id: int, action_id: int, action: str) -> dict[str, Any]:
    return {"ledger_id": ledger_id, "action_id": action_id, "action": action,
            "state": "discarded" if action == "discard" else "pending"}


def _request_digest(action: str, actor: str, reason: str, params: dict[str, Any]) -> str:
    """What makes two requests the same action: who, what, why and every value it sets."""
    text = json.dumps([action, actor, reason, params], sort_keys=True, default=str,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# ── discard by filter (docs/decisions/0282) ────────────────────────────────────────────────
PURGE_SLICE = 5000


def discard_matching(conn: db.Conn, *, tenant_id: UUID | None, wanted: Filter, actor: str,
                     actor_user_id: UUID | None, reason: str, preview: bool = False,
                     at_most: int | None = None, slice_size: int = PURGE_SLICE) -> dict[str, Any]:
    """Set aside every pending or dead-letter event matching ``wanted``, each on the record as
    a single discard is, in committed slices (no lock held on the whole backlog, and an
    applier's claims go on between them). ``preview`` only counts. ``at_most``: refuse (409)
    when more match than the operator was shown."""
    if wanted.state is not None and wanted.state not in ACTIONABLE:
        raise errors.InvalidRequest("Only pending or dead-letter events can be discarded: "
                                    "state must be pending or dead_letter (or none: both).")
    params = {"tenant_id": tenant_id, **wanted.params}
    matched = conn.execute(Q["count_discardable"], params).fetchone()["n"]  # type: ignore[index]
    if preview:
        return {"matched": matched, "filter": wanted.stored() | _state(wanted)}
    reason = _reason(reason)
    if at_most is not None and matched > at_most:
        raise PurgeGrew(f"{matched} events match now, more than the {at_most} you were shown; "
                        "preview again and confirm the new count.")
    if matched == 0:
        # Nothing to set aside (an operator's tenant_id may name no tenant at all): no purge
        # on the record either.
        return {"purge_id": None, "discarded": 0, "matched": 0}
    purge_id = conn.execute(Q["start_purge"], {
        "tenant_id": tenant_id, "actor": actor, "actor_user_id": actor_user_id,
        "reason": reason, "filter": Jsonb(wanted.stored() | _state(wanted)),
        "previewed": at_most}).fetchone()["purge_id"]  # type: ignore[index]
    after, discarded = 0, 0
    while True:
        with conn.transaction():
            done = conn.execute(Q["purge_slice"], {
                **params, "after": after, "limit": slice_size, "purge_id": purge_id,
                "actor": actor, "actor_user_id": actor_user_id, "reason": reason}).fetchone()
        assert done is not None
        if done["last"] is None:
            break
        after, discarded = done["last"], discarded + done["n"]
    conn.execute(Q["finish_purge"], {"purge_id": purge_id})
    return {"purge_id": purge_id, "discarded": discarded, "matched": matched}


def _state(wanted: Filter) -> dict[str, str]:
    return {"state": wanted.state} if wanted.state else {}


class PurgeGrew(errors.Conflict):
    """More events match than the preview showed; preview again."""

    code = "purge_grew"


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
            "version": row["version"], "source_system": row["source_system"],
            "source_event_id": row["source_event_id"],
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
