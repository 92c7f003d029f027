"""3. Events: every acknowledged event in the ledger with the first payload sent, counted each
time it was acknowledged, settled with a reason; the applied judgments equal what newest-wins
gives from the events the clients sent (not from the ledger's own rows).

``gather`` reads; ``judge`` decides from what was gathered (tests/unit/test_soak_checks.py).
One row per event id and one judgment per case number are the tables' unique keys: nothing
here checks what a constraint already guarantees.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from bench.soak.checks.world import Verdict, World, verdict
from bench.soak.work.events import Sent


@dataclass
class Facts:
    sent: dict[str, Sent]        # event id → what the producer sent and was told
    ledger: list[dict]           # the ledger's rows of the producer's source
    judgments: list[dict]        # case_number, amount of the events' entities (EV-…)


def gather(world: World) -> Facts:
    pool = world.events
    ledger = world.sql("SELECT source_event_id, source_sequence, payload, process_state, "
                       "process_error, superseded, ingest_attempt_count FROM event_ledger "
                       "WHERE tenant_id = %s AND source_system = %s",
                       (world.tenant_id, pool.events.SOURCE))
    judgments = world.sql("SELECT case_number, amount FROM judgments WHERE tenant_id = %s AND "
                          "case_number LIKE 'EV-%%'", (world.tenant_id,))
    return Facts(dict(pool.by_id), ledger, judgments)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def judge(facts: Facts) -> list[Verdict]:
    return [_stored(facts), _settled(facts), _newest_wins(facts)]


def _stored(facts: Facts) -> Verdict:
    problems: list[str] = []
    rows: dict[str, list[dict]] = defaultdict(list)
    for row in facts.ledger:
        rows[row["source_event_id"]].append(row)
    stored = 0
    for event_id, sent in facts.sent.items():
        told = [o for o in sent.outcomes if o != "rejected"]
        found = rows.get(event_id, [])  # one at most: the ledger's unique key
        if told:
            stored += 1
            if not found:
                problems.append(f"event {event_id}: acknowledged ({told[0]}) but not in the "
                                "ledger")
                continue
        for row in found:
            if _canonical(row["payload"]) != _canonical(sent.first_body["payload"]):
                problems.append(f"event {event_id}: the ledger keeps another payload than the "
                                "first sent")
            # Each acknowledged send reached the ledger (a repeat counts an attempt); sends
            # that got no answer may have too.
            if row["ingest_attempt_count"] < len(told):
                problems.append(f"event {event_id}: acknowledged {len(told)} times, the ledger "
                                f"counted {row['ingest_attempt_count']}")
    problems += [f"ledger row {e} was never sent" for e in sorted(set(rows) - set(facts.sent))]
    return verdict("3a", "acknowledged events in the ledger with the first payload sent and "
                   "every acknowledged send counted", stored, problems,
                   f"{len(facts.ledger)} ledger rows")


def _settled(facts: Facts) -> Verdict:
    states: Counter[str] = Counter()
    problems: list[str] = []
    for row in facts.ledger:
        event_id = row["source_event_id"]
        states["superseded" if row["superseded"] else row["process_state"]] += 1
        sent = facts.sent.get(event_id)
        poison = sent.event.poison if sent is not None else False
        if row["process_state"] == "pending":
            problems.append(f"event {event_id} still pending")
        elif row["process_state"] == "dead_letter" and not row["process_error"]:
            problems.append(f"event {event_id} dead-lettered without a reason")
        elif poison != (row["process_state"] == "dead_letter"):
            problems.append(f"event {event_id} ({'poison' if poison else 'valid'}) is "
                            f"{row['process_state']}: {row['process_error']}")
    note = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    return verdict("3b", "ledger events processed, superseded or dead-lettered with a reason",
                   len(facts.ledger), problems, note)


def _newest_wins(facts: Facts) -> Verdict:
    """Per entity, from the events the clients sent: the applied amount is that of the highest
    sequence among its valid acknowledged events, or of a higher one whose send got no answer
    (it may have landed; then it must be in the ledger). No event acknowledged or landed: no
    judgment. A conflicting resend never changes what applies (the first payload is kept)."""
    acked: dict[str, int] = {}
    maybe: dict[str, set[int]] = defaultdict(set)
    for sent in facts.sent.values():
        event = sent.event
        if event.poison:
            continue
        if any(o != "rejected" for o in sent.outcomes):
            acked[event.entity] = max(acked.get(event.entity, -1), event.sequence)
        elif sent.unanswered:
            maybe[event.entity].add(event.sequence)
    landed = {row["source_event_id"] for row in facts.ledger}
    by_id = {s.event.source_event_id: s.event for s in facts.sent.values()}
    in_ledger: dict[str, set[int]] = defaultdict(set)
    for event_id in landed & set(by_id):
        in_ledger[by_id[event_id].entity].add(by_id[event_id].sequence)
    applied: dict[str, list[Decimal]] = defaultdict(list)
    for row in facts.judgments:
        applied[row["case_number"]].append(row["amount"])
    problems: list[str] = []
    entities = set(acked) | {e for e, seqs in maybe.items() if seqs & in_ledger[e]}
    for entity in sorted(entities):
        floor = acked.get(entity, -1)
        allowed = {floor} | {s for s in maybe[entity] & in_ledger[entity] if s > floor}
        allowed.discard(-1)
        got = applied.get(entity, [])
        if len(got) != 1 or int(got[0]) not in allowed or got[0] != int(got[0]):
            problems.append(f"judgment {entity}: amount {got or 'none'}, the newest event sent "
                            f"says {max(allowed)}.00" + (f" (or {sorted(allowed)})"
                                                         if len(allowed) > 1 else ""))
    problems += [f"judgment {e} exists though no event of it was sent" for e in
                 sorted(set(applied) - entities)]
    return verdict("3c", "applied judgments equal what newest-wins gives from the events sent",
                   len(entities), problems)
