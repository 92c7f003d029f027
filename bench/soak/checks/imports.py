"""2. Imports: every acknowledged batch ended with counts that add up and as its file's error
budget says; the store holds batches only of files the clients sent; the target tables hold
exactly the promoted files' rows; a completion event per finished batch, delivered once.

``gather`` reads; ``judge`` decides from what was gathered (tests/unit/test_soak_checks.py).
Rows are read as lists: a key stored twice shows.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import orjson

from bench.soak.checks.world import FINAL_BATCH, Verdict, World, verdict
from bench.soak.work.hooks import Received
from bench.soak.work.records import Import


@dataclass
class Delivered:
    name: str
    healthy: bool
    received: list[Received]


@dataclass
class Facts:
    sent: list[Import]
    batches: dict[str, dict]              # batch id → GET /intake/batches/{id}
    unreadable: list[str] = field(default_factory=list)
    stored: list[dict] = field(default_factory=list)  # every batch of the tenant: batch_id, file_hash
    rows: dict[int, list[tuple[str, str]]] = field(default_factory=dict)  # file no → (key, value)
    events: list[dict] = field(default_factory=list)  # completion events: event_id, batch_id
    endpoints: list[Delivered] = field(default_factory=list)


def gather(world: World) -> Facts:
    facts = Facts(list(world.imports.sent), {})
    for s in facts.sent:
        if s.batch_id is None or s.batch_id in facts.batches:
            continue
        response = world.api.until_answered("GET", f"/intake/batches/{s.batch_id}",
                                            label="GET /intake/batches/{id}")
        if response is None or response.status_code != 200:
            facts.unreadable.append(f"batch {s.batch_id} ({s.file.name}) not readable")
            continue
        facts.batches[s.batch_id] = response.json()
    facts.stored = world.sql("SELECT batch_id::text AS batch_id, file_hash FROM import_batches "
                             "WHERE tenant_id = %s", (world.tenant_id,))
    facts.rows = {s.file.no: _rows_of(world, s.file) for s in facts.sent}
    facts.events = world.sql("SELECT event_id, batch_id::text AS batch_id FROM event_outbox "
                             "WHERE tenant_id = %s AND event_type = 'ingestion.complete'",
                             (world.tenant_id,))
    facts.endpoints = [Delivered(e.name, e.healthy, e.delivered()) for e in world.endpoints]
    return facts


def _rows_of(world: World, f: Any) -> list[tuple[str, str]]:
    t = world.tenant_id
    if f.contract == "judgments":
        found = world.sql("SELECT case_number AS k, amount AS v FROM judgments WHERE tenant_id ="
                          " %s AND case_number ILIKE %s", (t, f"IM-{f.no:04d}-%"))
        return [(r["k"], str(r["v"])) for r in found]
    if f.contract == "plaintiffs":
        found = world.sql("SELECT address_line1 AS k, name AS v FROM plaintiffs WHERE tenant_id"
                          " = %s AND address_line1 LIKE %s", (t, f"% File{f.no:04d} Street"))
        return [(r["k"], r["v"]) for r in found]
    found = world.sql("""
        SELECT s.external_id AS ad_set, COALESCE(a.external_id, '') AS ad, d.metric_date, d.spend
        FROM daily_metrics d JOIN campaigns c ON c.tenant_id = d.tenant_id AND c.id = d.campaign_id
        LEFT JOIN ad_sets s ON s.tenant_id = d.tenant_id AND s.id = d.ad_set_id
        LEFT JOIN ads a ON a.tenant_id = d.tenant_id AND a.id = d.ad_id
        WHERE d.tenant_id = %s AND c.external_id = %s AND c.platform = %s""",
                      (t, f"5{f.no:05d}", f.platform))
    return [(f"{r['ad_set']}|{r['ad']}|{r['metric_date'].isoformat()}", _plain(r["spend"]))
            for r in found]


def _plain(value: Decimal) -> str:
    text = f"{value.normalize():f}"
    return text if "." in text else text + ".00"


# ── the judgement ───────────────────────────────────────────────────────────────────────────
def judge(facts: Facts) -> list[Verdict]:
    return [*_ended(facts), _target_rows(facts), *_completion_events(facts)]


def _ended(facts: Facts) -> list[Verdict]:
    files = {s.batch_id: s.file for s in facts.sent if s.batch_id}
    problems = list(facts.unreadable)
    budget: list[str] = []
    outcome: Counter[str] = Counter()
    for batch_id, b in facts.batches.items():
        f = files[batch_id]
        outcome[b["status"]] += 1
        if b["status"] not in FINAL_BATCH:
            problems.append(f"batch {batch_id} ({f.name}) is {b['status']}")
            continue
        if b["status"] == "failed":
            if not b["rejectionReason"]:
                problems.append(f"batch {batch_id} ({f.name}) failed without a reason")
        elif b["rowCountTotal"] != b["rowCountInserted"] + b["rowCountInvalid"] \
                + b["rowCountDuplicate"]:
            problems.append(f"batch {batch_id} ({f.name}): total {b['rowCountTotal']} ≠ "
                            f"{b['rowCountInserted']} + {b['rowCountInvalid']} invalid + "
                            f"{b['rowCountDuplicate']} duplicate")
        elif (b["rowCountTotal"], b["rowCountInvalid"], b["rowCountDuplicate"]) != \
                (f.rows, f.invalid, f.duplicates):
            problems.append(f"batch {batch_id} ({f.name}): counted {b['rowCountTotal']} rows, "
                            f"{b['rowCountInvalid']} invalid, {b['rowCountDuplicate']} duplicate;"
                            f" the file has {f.rows}, {f.invalid}, {f.duplicates}")
        if (b["status"] == "failed") != f.expect_fail:
            budget.append(f"batch {batch_id} ({f.name}) {b['status']} ({b['rejectionReason']}); "
                          f"the file is {'over' if f.expect_fail else 'within'} its error budget")
    # What the store holds against what was sent and told: a batch of a file nobody sent, a
    # batch a client was told of that is not there. (One batch per file is the table's unique
    # key, not something to check here.)
    sent_hashes = {hashlib.sha256(s.file.body).hexdigest() for s in facts.sent}
    problems += [f"batch {b['batch_id']}: a file nobody sent" for b in facts.stored
                 if str(b["file_hash"]) not in sent_hashes]
    problems += [f"batch {b} was told to a client and is not stored" for b in
                 sorted(set(files) - {str(r["batch_id"]) for r in facts.stored})]
    dups = sum(1 for s in facts.sent if s.duplicate)
    note = ", ".join(f"{n} {s}" for s, n in sorted(outcome.items()))
    return [verdict("2a", "acknowledged imports ended completed/partial/failed, counts adding up; "
                    "the store holds the batches told and only files sent", len(facts.batches), problems,
                    f"{note}; {dups} answered as duplicates; {len(facts.stored)} stored"),
            verdict("2b", "batches ended as their file's error budget says", len(facts.batches),
                    budget)]


def _target_rows(facts: Facts) -> Verdict:
    """The target tables hold exactly the rows of the completed and partial batches (every
    generated file has a key space of its own), and nothing of any other file: never half."""
    problems: list[str] = []
    status_of = {s.file.no: facts.batches[s.batch_id]["status"] for s in facts.sent
                 if s.batch_id in facts.batches}
    files = {s.file.no: s.file for s in facts.sent}
    rows = 0
    for no, f in sorted(files.items()):
        found = facts.rows.get(no, [])
        status = status_of.get(no)
        want = f.expected if status in ("completed", "partial") else {}
        if status is None and found:  # never acknowledged, yet it landed: all of it or nothing
            want = f.expected
        rows += len(found)
        twice = [k for k, n in Counter(k for k, _ in found).items() if n > 1]
        have = dict(found)
        if have != want or twice:
            missing, extra = set(want) - set(have), set(have) - set(want)
            changed = {k for k in set(want) & set(have) if want[k] != have[k]}
            example = next(iter(sorted(missing or extra or changed or set(twice))))
            problems.append(f"{f.name} (batch {status or 'never acknowledged'}): "
                            f"{len(missing)} rows missing, {len(extra)} extra, "
                            f"{len(changed)} with other values, {len(twice)} stored twice; e.g. "
                            f"{example}: file {want.get(example)!r}, table {have.get(example)!r}")
    return verdict("2c", "rows in the target tables, exactly those of completed/partial batches",
                   rows, problems, f"{len(files)} files")


def _completion_events(facts: Facts) -> list[Verdict]:
    per_batch = Counter(e["batch_id"] for e in facts.events)
    finished = {b for b, row in facts.batches.items()
                if row["status"] in ("completed", "partial") and row["rowCountInserted"] > 0}
    # (At most one per batch is the outbox's unique key, not something to check here.)
    problems = [f"finished batch {b} has no completion event" for b in finished - set(per_batch)]
    problems += [f"batch {b} ({facts.batches[b]['status']}) has a completion event"
                 for b in set(per_batch) & set(facts.batches) - finished]
    problems += [f"a completion event of batch {b}, which no client was told of" for b in
                 set(per_batch) - set(facts.batches)]
    out = [verdict("2d", "completion events: every finished batch has one, no other batch has",
                   len(facts.events), problems)]
    out += [_deliveries(e, set(per_batch)) for e in facts.endpoints]
    return out


def _deliveries(endpoint: Delivered, expected: set[str]) -> Verdict:
    problems: list[str] = []
    ids: dict[str, set[str]] = defaultdict(set)
    for r in endpoint.received:
        if r.signature_error:
            problems.append(f"{endpoint.name}: delivery {r.webhook_id} failed verification on "
                            f"receipt: {r.signature_error}")
            continue
        body = orjson.loads(r.body)
        if body.get("type") == "webhook.test":
            continue
        ids[str(_upload_id(body))].add(r.webhook_id)
    problems += [f"{endpoint.name}: batch {b} came with {len(w)} webhook-ids" for b, w in
                 ids.items() if len(w) != 1]
    problems += [f"{endpoint.name}: batch {b} delivered but has no event" for b in
                 set(ids) - expected]
    missing = expected - set(ids)
    if endpoint.healthy:
        problems += [f"{endpoint.name}: batch {b} never delivered" for b in sorted(missing)]
        text = f"deliveries to the {endpoint.name} endpoint, each event once by webhook-id"
    else:
        text = (f"deliveries to the {endpoint.name} endpoint (fails half its requests; "
                "retries back off, so some may still wait)")
    return verdict("2e" if endpoint.healthy else "2f", text, len(ids), problems,
                   f"{len(endpoint.received)} requests answered 2xx, {len(missing)} events "
                   "not yet")


def _upload_id(body: dict) -> Any:
    data = body.get("data", body)
    return data.get("upload_id") if isinstance(data, dict) else None
