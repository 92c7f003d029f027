"""3. Events: every acknowledged event in the ledger once, settled with a reason; applied
records equal what newest-wins gives from the events sent."""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal
from typing import Any

from bench.soak.checks.world import Verdict, World, verdict


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def check(world: World) -> list[Verdict]:
    pool = world.events
    rows = world.sql("SELECT source_event_id, source_sequence, payload, process_state, "
                     "process_error, superseded FROM event_ledger WHERE tenant_id = %s AND "
                     "source_system = %s", (world.tenant_id, pool.events.SOURCE))
    ledger = {r["source_event_id"]: r for r in rows}
    problems: list[str] = []
    stored = 0
    for event_id, sent in pool.by_id.items():
        row = ledger.get(event_id)
        told = [o for o in sent.outcomes if o != "rejected"]
        if told:
            stored += 1
            if row is None:
                problems.append(f"event {event_id}: acknowledged ({told[0]}) but not in the "
                                "ledger")
                continue
        if row is not None and _canonical(row["payload"]) != _canonical(sent.first_body["payload"]):
            problems.append(f"event {event_id}: the ledger keeps another payload than the first")
    unknown = set(ledger) - set(pool.by_id)
    problems += [f"ledger row {e} was never sent" for e in sorted(unknown)]
    out = [verdict("3a", "acknowledged events in the ledger exactly once, first payload kept",
                   stored, problems, f"{len(ledger)} ledger rows")]
    states: dict[str, int] = defaultdict(int)
    settled: list[str] = []
    for event_id, row in ledger.items():
        state = "superseded" if row["superseded"] else row["process_state"]
        states[state] += 1
        poison = pool.by_id[event_id].event.poison if event_id in pool.by_id else False
        if row["process_state"] == "pending":
            settled.append(f"event {event_id} still pending")
        elif row["process_state"] == "dead_letter" and not row["process_error"]:
            settled.append(f"event {event_id} dead-lettered without a reason")
        elif poison != (row["process_state"] == "dead_letter"):
            settled.append(f"event {event_id} ({'poison' if poison else 'valid'}) is "
                           f"{row['process_state']}: {row['process_error']}")
    note = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    out.append(verdict("3b", "ledger events processed, superseded or dead-lettered with a reason",
                       len(ledger), settled, note))
    out.append(_newest_wins(world, ledger))
    return out


def _newest_wins(world: World, ledger: dict[str, dict]) -> Verdict:
    newest: dict[str, int] = {}
    for row in ledger.values():
        if row["process_state"] == "processed":
            entity = row["payload"]["File #"]
            newest[entity] = max(newest.get(entity, -1), row["source_sequence"])
    found = world.sql("SELECT case_number, amount FROM judgments WHERE tenant_id = %s AND "
                      "case_number LIKE 'EV-%%'", (world.tenant_id,))
    applied = {r["case_number"]: r["amount"] for r in found}
    problems = [f"judgment {entity}: amount {applied.get(entity)}, the newest event says "
                f"{seq}.00" for entity, seq in sorted(newest.items())
                if applied.get(entity) != Decimal(seq)]
    problems += [f"judgment {e} exists without a processed event" for e in
                 sorted(set(applied) - set(newest))]
    return verdict("3c", "applied judgments equal what newest-wins gives from the events sent",
                   len(newest), problems)
