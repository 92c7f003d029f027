"""Claimed events → records, a batch of one tenant's events per transaction (docs/decisions/0139,
0140, 0281).

A payload is one row of its type's contract, keyed by column names or field names (``"File #"``
or ``"case_number"``), validated by ``contracts.validate_row`` exactly as a file row is. The
writes are records.sql's own set-based upserts (worker/records/records.sql ``upsert_judgments`` /
``upsert_plaintiffs``) over the batch's rows instead of the staging table, so the amended-row
rule (change only what differs) is the same text for a file and an event.

Ordering (docs/decisions/0140): under the batch's entity locks, the batch's events of one
entity are taken in arrival order against the newest event already applied to it; an older
one, or one a later event of the same batch overwrites, is marked processed and superseded
and writes nothing, so each entity gets at most one row in each statement (ON CONFLICT DO
UPDATE cannot touch a key twice).
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
# Per row of a batch, beside the contract's values: the record's source and reference, which
# a file gives once per statement and an event gives per event.
SOURCE, REFERENCE = "$source", "$reference"


def _statement(name: str, source: str, table: str) -> str:
    """records.sql's set-based upsert with its typed-stage source (migrations/0070) replaced
    by ``source``. Fails at import if the statement stops having that shape, rather than
    drifting apart."""
    text = _RECORDS[name]
    head, sep, tail = text.partition(_WRITE_PART)
    if not sep or "WITH src AS (" not in head or table not in head:
        raise RuntimeError(f"records.sql {name} no longer reads `WITH src AS (… {table} …), "
                           "written AS (`; update worker/ledger/apply.py with it")
    return "WITH src AS (" + source + sep + tail


def _batch(name: str, table: str) -> str:
    """The upsert over a JSON array of rows, each read as a row of the contract's typed stage
    and naming its own source and reference."""
    text = _statement(name, (
        f"SELECT r.*, e.value->>'{SOURCE}' AS event_source, e.value->>'{REFERENCE}' "
        "AS event_reference FROM jsonb_array_elements(%(data)s::jsonb) AS e(value), "
        f"jsonb_populate_record(NULL::{table}, e.value) AS r"), table)
    for param, column in (("%(source)s", "event_source"),
                          ("%(source_reference)s", "event_reference")):
        if text.count(param) != 1:
            raise RuntimeError(f"records.sql {name} no longer writes {param} once; update "
                               "worker/ledger/apply.py with it")
        text = text.replace(param, column)
    return text


UPSERT = {"judgment.upserted": _batch("upsert_judgments", stage.STAGES["judgments"]),
          "plaintiff.upserted": _batch("upsert_plaintiffs", stage.STAGES["plaintiffs"])}
# The one-event form (one JSON row, source and reference as parameters), as a file's rows are
# written; tests/integration/test_records_promotion.py writes "an event's" judgment with it.
UPSERT_JUDGMENT = _statement(
    "upsert_judgments", "SELECT * FROM jsonb_populate_record(NULL::"
    f"{stage.STAGES['judgments']}, %(data)s::jsonb)", stage.STAGES["judgments"])
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

    @property
    def order(self) -> dict[str, Any]:
        """What "newest wins" compares (is_older)."""
        return {"ledger_id": self.ledger_id, "source_system": self.source_system,
                "source_sequence": self.source_sequence,
                "source_emitted_at": self.source_emitted_at}


@dataclass(frozen=True)
class Validated:
    contract: contracts.Contract
    values: dict[str, Any]
    entity_key: str
    context: dict[str, Any] | None = None  # an ad metric's platform and client


@dataclass(frozen=True)
class Item:
    """A claimed event whose payload passed its contract: what a batch applies."""

    event: Event
    valid: Validated


@dataclass(frozen=True)
class Outcome:
    ledger_id: int
    superseded: bool
    entity_key: str
    note: str  # written | superseded, and an ad metric's missing parents, for the log


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


def apply_batch(conn: db.Conn, tenant_id: UUID, items: list[Item], *,
                hold: Callable[[], None] = lambda: None) -> list[Outcome]:
    """Apply one tenant's claimed, validated events in one transaction, marking each processed.
    Events another applier claimed since (their fence no longer matches) are left out of the
    result. Raises whatever the database raised (all rolled back): the caller bisects."""
    batch = sorted(items, key=lambda i: i.event.ledger_id)
    with conn.transaction():
        ids = [i.event.ledger_id for i in batch]
        locked = {row["ledger_id"] for row in conn.execute(Q["lock_claimed"], {
            "tenant_id": tenant_id, "ledger_ids": ids,
            "attempts": [i.event.attempt for i in batch]})}
        batch = [i for i in batch if i.event.ledger_id in locked]
        if not batch:
            return []
        entities = sorted({(i.event.type, i.valid.entity_key) for i in batch})
        by_entity = {"tenant_id": tenant_id, "types": [t for t, _ in entities],
                     "entity_keys": [k for _, k in entities],
                     "ledger_ids": [i.event.ledger_id for i in batch]}
        conn.execute(Q["lock_entities"], by_entity)
        heads = {(row["type"], row["entity_key"]): row
                 for row in conn.execute(Q["entity_heads"], by_entity)}
        winners = _winners(batch, heads)
        notes = _write(conn, tenant_id, [i for i in batch if i.event.ledger_id in winners])
        hold()  # test-only pause point, inside the transaction (WORKER_PAUSE_AT_STAGE=ledger_apply)
        done = conn.execute(Q["mark_processed"], {
            "tenant_id": tenant_id, "ledger_ids": [i.event.ledger_id for i in batch],
            "attempts": [i.event.attempt for i in batch],
            "superseded": [i.event.ledger_id not in winners for i in batch],
            "entity_keys": [i.valid.entity_key for i in batch]}).fetchall()
        if len(done) != len(batch):  # the rows are locked: nothing else can have settled them
            raise RuntimeError(f"marked {len(done)} of {len(batch)} locked events processed")
    return [Outcome(i.event.ledger_id, i.event.ledger_id not in winners, i.valid.entity_key,
                    notes.get(i.event.ledger_id, "written" if i.event.ledger_id in winners
                              else "superseded"))
            for i in batch]


def _winners(batch: list[Item], heads: Mapping[tuple[str, str], Mapping[str, Any]]) -> set[int]:
    """The events that write: per entity, the batch's events in arrival order each against the
    entity's head as one-at-a-time apply would see it (the newest applied so far); the last to
    win is the only one written, those it overwrites in the same batch are superseded too."""
    head: dict[tuple[str, str], Mapping[str, Any]] = dict(heads)
    winner: dict[tuple[str, str], int] = {}
    for item in batch:  # in ledger_id order
        entity = (item.event.type, item.valid.entity_key)
        mine = item.event.order
        if entity in head and is_older(mine, head[entity]):
            continue
        head[entity] = mine
        winner[entity] = item.event.ledger_id
    return set(winner.values())


def _write(conn: db.Conn, tenant_id: UUID, winners: list[Item]) -> dict[int, str]:
    """The winners' records, one statement per contract; an ad metric's notes by ledger id."""
    notes: dict[int, str] = {}
    for type_, upsert in UPSERT.items():
        rows = [i for i in winners if i.event.type == type_]
        if not rows:
            continue
        params = {"tenant_id": tenant_id, "batch_id": None, "data": "[" + ",".join(
            stage.to_json({**i.valid.values, SOURCE: _source(i.event), REFERENCE: (
                f"event {i.event.source_system}/{i.event.source_event_id}"[:200])})
            for i in rows) + "]"}
        conn.execute(upsert, params)
        if type_ == "plaintiff.upserted":
            conn.execute(Q["link_plaintiffs"], params)
    # Ad metrics go one by one inside the batch's transaction: the promotion's statements
    # read a group whose repeated facts a file's preparation removed first (ADR 0281).
    for item in (i for i in winners if i.event.type == ad_events.TYPE):
        assert item.valid.context is not None
        note = ad_events.write(conn, tenant_id, item.valid.values, item.valid.context)
        notes[item.event.ledger_id] = note
    return notes


def _source(event: Event) -> str:
    return event.source_system if event.source_system in RECORD_SOURCES else "manual"


# Event type → the contract its payload is a row of. `ad_metric.daily` (ad_events.TYPE) is a
# row of its platform's variant of `ad_metrics`, which the payload names (worker/ledger/
# ad_events.py).
CONTRACT_OF: dict[str, contracts.Contract] = {
    "judgment.upserted": contracts.JUDGMENTS,
    "plaintiff.upserted": contracts.PLAINTIFFS,
}
