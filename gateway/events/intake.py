"""Checking one event of a POST /v1/events batch: each bad event is refused on its own, with a
code, and never takes the rest of the batch with it (DESIGN.md "Event ledger")."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

# Bounds the ledger's CHECK constraints also hold (migrations/0018_event_ledger.sql).
MAX_SOURCE_SYSTEM = 100
MAX_SOURCE_EVENT_ID = 200
MAX_TYPE = 100
MAX_SEQUENCE = 2**63 - 1
FIELDS = {"source_system", "source_event_id", "source_sequence", "source_emitted_at", "type",
          "payload"}


@dataclass(frozen=True)
class Event:
    """A checked event, ready for the writer."""

    tenant_id: UUID
    source_system: str
    source_event_id: str
    source_sequence: int | None
    source_emitted_at: datetime | None
    type: str
    payload_json: str       # canonical JSON: sorted keys, no spaces
    payload_sha256: str

    @property
    def key(self) -> tuple[UUID, str, str]:
        return (self.tenant_id, self.source_system, self.source_event_id)


class Refused(Exception):
    def __init__(self, code: str, detail: str) -> None:
        self.code, self.detail = code, detail
        super().__init__(detail)


def check(raw: Any, tenant_id: UUID, max_payload_bytes: int) -> Event:
    """The event, or Refused with the first thing wrong with it."""
    if not isinstance(raw, dict):
        raise Refused("invalid_event", "Each event must be a JSON object.")
    unknown = sorted(set(raw) - FIELDS)
    if unknown:
        raise Refused("unknown_field", f"Unknown field {unknown[0]!r}; an event has "
                      "source_system, source_event_id, source_sequence, source_emitted_at, "
                      "type and payload.")
    payload = raw.get("payload")
    if not isinstance(payload, dict):
        raise Refused("invalid_payload", "payload must be a JSON object (one row of its type).")
    payload_json = _canonical(payload)
    if len(payload_json.encode()) > max_payload_bytes:
        raise Refused("payload_too_large",
                      f"payload is larger than {max_payload_bytes // 1024} KiB; split it.")
    return Event(
        tenant_id=tenant_id,
        source_system=_text(raw, "source_system", MAX_SOURCE_SYSTEM),
        source_event_id=_text(raw, "source_event_id", MAX_SOURCE_EVENT_ID),
        source_sequence=_sequence(raw.get("source_sequence")),
        source_emitted_at=_emitted_at(raw.get("source_emitted_at")),
        type=_text(raw, "type", MAX_TYPE),
        payload_json=payload_json,
        payload_sha256=hashlib.sha256(payload_json.encode()).hexdigest(),
    )


def _canonical(payload: dict) -> str:
    try:
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
        text.encode()  # a lone surrogate ("\ud800") cannot be stored
    except (ValueError, UnicodeError) as exc:
        raise Refused("invalid_payload", "payload holds a value that cannot be stored "
                      "(broken Unicode or a non-finite number).") from exc
    if "\\u0000" in text:  # Postgres jsonb refuses NUL characters in strings
        raise Refused("invalid_payload", "payload holds a NUL character, which cannot be stored.")
    return text


def _text(raw: dict, name: str, limit: int) -> str:
    value = raw.get(name)
    if not isinstance(value, str) or not value.strip():
        raise Refused(f"missing_{name}", f"{name} is required: a non-empty string.")
    if len(value) > limit:
        raise Refused(f"invalid_{name}", f"{name} must be at most {limit} characters.")
    if "\x00" in value or not value.isprintable():
        raise Refused(f"invalid_{name}", f"{name} may hold printable characters only.")
    try:
        value.encode()
    except UnicodeError as exc:
        raise Refused(f"invalid_{name}", f"{name} holds broken Unicode.") from exc
    return value


def _sequence(value: Any) -> int | None:
    if value is None:
        return None
    # bool is an int in Python but not a sequence number; 1.0 from a sloppy encoder is fine.
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQUENCE:
        raise Refused("invalid_source_sequence",
                      "source_sequence must be a whole number from 0 to 2^63-1, or absent.")
    return value


def _emitted_at(value: Any) -> datetime | None:
    if value is None:
        return None
    try:
        if not isinstance(value, str) or len(value) > 40:
            raise ValueError(value)
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise Refused("invalid_source_emitted_at", "source_emitted_at must be an ISO 8601 "
                      "time with its offset, e.g. 2024-05-01T12:00:00Z.") from exc
    if parsed.tzinfo is None:
        raise Refused("invalid_source_emitted_at",
                      "source_emitted_at needs an offset (Z or +hh:mm): a time without one is "
                      "ambiguous.")
    return parsed
