"""One event → one record, through the contract of its type and the file pipeline's upsert.

A payload is one row of its contract, keyed by column names or field names (``"File #"`` or
``"case_number"``), validated by ``contracts.validate_row`` exactly as a file row is. The write
is records.sql's own upsert statement (worker/records/records.sql ``upsert_judgments`` /
``upsert_plaintiffs``) over a one-row source instead of the staging table, so the amended-row
rule (change only what differs) is the same text for a file and an event (docs/decisions/0139).

Ordering (docs/decisions/0140): under a per-entity lock, an event older than the newest event
already applied to its entity is marked processed and superseded, and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from shared import contracts, db
from worker.ledger import Rejected, ad_events
from worker.records import stage

Q = db.load_queries(Path(__file__).with_name("ledger.sql"))
_RECORDS = db.load_queries(Path(stage.__file__).with_name("records.sql"))
# Where records.sql's upserts stop reading the staging table and start writing.
_WRITE_PART = "), written AS ("


def _one_row(name: str, stage: str) -> str:
    """records.sql's set-based upsert with its staging-table source replaced by one JSON row,
    read as a row of that contract's typed stage (migrations/0070). Fails at import if the
    statement stops having that shape, rather than drifting apart."""
    text = _RECORDS[name]
    head, sep, tail = text.partition(_WRITE_PART)
    if not sep or "WITH src AS (" not in head or stage not in head:
        raise RuntimeError(f"records.sql {name} no longer reads `WITH src AS (… {stage} …), "
                           "written AS (`; update worker/ledger/apply.py with it")
    return (f"WITH src AS (SELECT * FROM jsonb_populate_record(NULL::{stage}, %(data)s::jsonb)"
            + sep + tail)


UPSERT_JUDGMENT = _one_row("upsert_judgments", stage.STAGES["judgments"])
UPSERT_PLAINTIFF = _one_row("upsert_plaintiffs", stage.STAGES["plaintiffs"])
# The vendors judgments and plaintiffs may name (their tables' CHECK); another source system's
# events are stored as 'manual', with the event named in source_reference.
RECORD_SOURCES = ("simplicity", "jbi", "manual")


@dataclass(frozen=True)
class Event:
    ledger_id: int
    tenant_id: UUID
    source_system: str
    source_event_id: str
    source_sequence: int | None
    source_emitted_at: datetime | None
    type: str
    payload: Any
    attempt: int    # apply_attempt_count after this claim: the fence of every statement
    base: int = 0   # apply_attempt_base: the count at the last replay or edit (ADR 0194)

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Event:
        return cls(row["ledger_id"], row["tenant_id"], row["source_system"],
                   row["source_event_id"], row["source_sequence"], row["source_emitted_at"],
                   row["type"], row["payload"], row["apply_attempt_count"],
                   row.get("apply_attempt_base") or 0)

    @property
    def used(self) -> int:
        """Attempts counted against the budget: since the last replay or edit."""
        return self.attempt - self.base

    @property
    def keys(self) -> dict[str, Any]:
        return {"ledger_id": self.ledger_id, "tenant_id": self.tenant_id,
                "attempt": self.attempt}


@dataclass(frozen=True)
class Validated:
    contract: contracts.Contract
    values: dict[str, Any]
    entity_key: str
    context: dict[str, Any] | None = None  # an ad metric's platform and client


@dataclass(frozen=True)
class Outcome:
    superseded: bool
    entity_key: str
    note: str  # inserted | updated | unchanged | superseded, for the log


def is_older(event: Mapping[str, Any], head: Mapping[str, Any]) -> bool:
    """Whether ``event`` is older than ``head`` (docs/decisions/0140): by source_sequence when
    both carry one from the same source system (sequences of two sources do not compare), then
    by source_emitted_at when both carry one, then by ledger_id (arrival order)."""
    if (event["source_sequence"] is not None and head["source_sequence"] is not None
            and event["source_system"] == head["source_system"]
            and event["source_sequence"] != head["source_sequence"]):
        return bool(event["source_sequence"] < head["source_sequence"])
    if (event["source_emitted_at"] is not None and head["source_emitted_at"] is not None
            and event["source_emitted_at"] != head["source_emitted_at"]):
        return bool(event["source_emitted_at"] < head["source_emitted_at"])
    return bool(event["ledger_id"] < head["ledger_id"])


def validate(event: Event) -> Validated:
    """The payload as one row of its type's contract; Rejected with the row's critical codes."""
    known = (*CONTRACT_OF, ad_events.TYPE)
    if event.type not in known:
        raise Rejected(f"unknown type {event.type[:100]!r}: no contract applies it (known: "
                       f"{', '.join(sorted(known))})")
    if not isinstance(event.payload, Mapping):
        raise Rejected("payload is not a JSON object of the contract's columns")
    if event.type == ad_events.TYPE:
        return Validated(*ad_events.validate(event.payload))
    contract = CONTRACT_OF[event.type]
    result = contracts.validate_row(contract, event.payload)
    if not result.valid:
        # Codes and sentences only: the values may be personal data (plaintiff names).
        raise Rejected("; ".join(f"{i.code}: {i.message}" for i in result.errors))
    return Validated(contract, result.values, contracts.natural_key(contract, result.values))


def apply(conn: db.Conn, event: Event, *, hold: Callable[[], None] = lambda: None) -> Outcome:
    """Validate and apply one claimed event in one transaction, marking it processed. Raises
    Rejected (nothing written), NotOurs (another applier claimed it since), or whatever the
    database raised (rolled back)."""
    valid = validate(event)
    with conn.transaction():
        if conn.execute(Q["lock_claimed"], event.keys).fetchone() is None:
            raise NotOurs(event.ledger_id)
        entity = {"tenant_id": event.tenant_id, "type": event.type,
                  "entity_key": valid.entity_key, "ledger_id": event.ledger_id}
        conn.execute(Q["lock_entity"], entity)
        head = conn.execute(Q["entity_head"], entity).fetchone()
        mine = {"ledger_id": event.ledger_id, "source_system": event.source_system,
                "source_sequence": event.source_sequence,
                "source_emitted_at": event.source_emitted_at}
        superseded = head is not None and is_older(mine, head)
        note = "superseded" if superseded else _write(conn, event, valid)
        hold()  # test-only pause point, inside the transaction (WORKER_PAUSE_AT_STAGE=ledger_apply)
        done = conn.execute(Q["mark_processed"], {**event.keys, "superseded": superseded,
                                                  "entity_key": valid.entity_key}).fetchone()
        if done is None:
            raise NotOurs(event.ledger_id)
    return Outcome(superseded, valid.entity_key, note)


def _write(conn: db.Conn, event: Event, valid: Validated) -> str:
    if valid.context is not None:
        return ad_events.write(conn, event.tenant_id, valid.values, valid.context)
    params = {"tenant_id": event.tenant_id, "data": stage.to_json(valid.values),
              "source": event.source_system if event.source_system in RECORD_SOURCES
              else "manual",
              "source_reference": f"event {event.source_system}/{event.source_event_id}"[:200],
              "batch_id": None}
    upsert = UPSERT_JUDGMENT if valid.contract is contracts.JUDGMENTS else UPSERT_PLAINTIFF
    written = conn.execute(upsert, params).fetchone()
    assert written is not None, "the upsert's aggregate returns one row"
    if valid.contract is contracts.PLAINTIFFS:
        conn.execute(Q["link_plaintiff"], params)
    return "inserted" if written["inserted"] else "updated" if written["updated"] else "unchanged"


class NotOurs(Exception):
    """Another applier claimed the row after us (our lease ran out): leave it to them."""


# Event type → the contract its payload is a row of. `ad_metric.daily` (ad_events.TYPE) is a
# row of its platform's variant of `ad_metrics`, which the payload names (worker/ledger/
# ad_events.py).
CONTRACT_OF: dict[str, contracts.Contract] = {
    "judgment.upserted": contracts.JUDGMENTS,
    "plaintiff.upserted": contracts.PLAINTIFFS,
}
