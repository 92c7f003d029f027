"""2. Imports: every acknowledged batch ended with counts that add up; the target tables hold
exactly the promoted files' rows; one completion event per finished batch, delivered once."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

import orjson

from bench.soak.checks.world import FINAL_BATCH, Verdict, World, verdict
from bench.soak.work.hooks import Endpoint


def check(world: World) -> list[Verdict]:
    sent = world.imports.sent
    batches: dict[str, dict] = {}
    problems: list[str] = []
    for s in sent:
        if s.batch_id is None or s.batch_id in batches:
            continue
        response = world.api.until_answered("GET", f"/intake/batches/{s.batch_id}",
                                            label="GET /intake/batches/{id}")
        if response is None or response.status_code != 200:
            problems.append(f"batch {s.batch_id} ({s.file.name}) not readable")
            continue
        batches[s.batch_id] = response.json()
    files = {s.batch_id: s.file for s in sent if s.batch_id}
    outcome: dict[str, int] = defaultdict(int)
    verdicts: list[str] = []
    for batch_id, b in batches.items():
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
            verdicts.append(f"batch {batch_id} ({f.name}) {b['status']} "
                            f"({b['rejectionReason']}); the file is "
                            f"{'over' if f.expect_fail else 'within'} its error budget")
    dups = sum(1 for s in sent if s.duplicate)
    note = ", ".join(f"{n} {s}" for s, n in sorted(outcome.items()))
    out = [verdict("2a", "acknowledged imports ended completed/partial/failed, counts adding up",
                   len(batches), problems, f"{note}; {dups} answered as duplicates"),
           verdict("2b", "batches ended as their file's error budget says", len(batches),
                   verdicts)]
    out.append(_target_rows(world, batches))
    out += _completion_events(world, batches)
    return out


def _target_rows(world: World, batches: dict[str, dict]) -> Verdict:
    """The target tables hold exactly the rows of the completed and partial batches (every
    generated file has a key space of its own), and nothing of any other file: never half."""
    problems: list[str] = []
    status_of: dict[int, str] = {}
    for s in world.imports.sent:
        if s.batch_id in batches:
            status_of[s.file.no] = batches[s.batch_id]["status"]
    files = {s.file.no: s.file for s in world.imports.sent}
    rows = 0
    for no, f in sorted(files.items()):
        found = _rows_of(world, f)
        status = status_of.get(no)
        want = f.expected if status in ("completed", "partial") else {}
        if status is None and found:  # never acknowledged, yet it landed: all of it or nothing
            want = f.expected
        rows += len(found)
        if found != want:
            missing = set(want) - set(found)
            extra = set(found) - set(want)
            changed = {k for k in set(want) & set(found) if want[k] != found[k]}
            example = next(iter(sorted(missing or extra or changed)))
            problems.append(f"{f.name} (batch {status or 'never acknowledged'}): "
                            f"{len(missing)} rows missing, {len(extra)} extra, "
                            f"{len(changed)} with other values; e.g. {example}: file "
                            f"{want.get(example)!r}, table {found.get(example)!r}")
    return verdict("2c", "rows in the target tables, exactly those of completed/partial batches",
                   rows, problems, f"{len(files)} files")


def _rows_of(world: World, f: Any) -> dict[str, str]:
    t = world.tenant_id
    if f.contract == "judgments":
        found = world.sql("SELECT case_number AS k, amount AS v FROM judgments WHERE tenant_id ="
                          " %s AND case_number ILIKE %s", (t, f"IM-{f.no:04d}-%"))
        return {r["k"]: str(r["v"]) for r in found}
    if f.contract == "plaintiffs":
        found = world.sql("SELECT address_line1 AS k, name AS v FROM plaintiffs WHERE tenant_id"
                          " = %s AND address_line1 LIKE %s", (t, f"% File{f.no:04d} Street"))
        return {r["k"]: r["v"] for r in found}
    found = world.sql("""
        SELECT s.external_id AS ad_set, COALESCE(a.external_id, '') AS ad, d.metric_date, d.spend
        FROM daily_metrics d JOIN campaigns c ON c.tenant_id = d.tenant_id AND c.id = d.campaign_id
        LEFT JOIN ad_sets s ON s.tenant_id = d.tenant_id AND s.id = d.ad_set_id
        LEFT JOIN ads a ON a.tenant_id = d.tenant_id AND a.id = d.ad_id
        WHERE d.tenant_id = %s AND c.external_id = %s AND c.platform = %s""",
                      (t, f"5{f.no:05d}", f.platform))
    return {f"{r['ad_set']}|{r['ad']}|{r['metric_date'].isoformat()}":
            _plain(r["spend"]) for r in found}


def _plain(value: Decimal) -> str:
    text = f"{value.normalize():f}"
    return text if "." in text else text + ".00"


def _completion_events(world: World, batches: dict[str, dict]) -> list[Verdict]:
    events = world.sql("SELECT event_id, batch_id, count(*) OVER (PARTITION BY batch_id) AS n "
                       "FROM event_outbox WHERE tenant_id = %s AND event_type = "
                       "'ingestion.complete'", (world.tenant_id,))
    by_batch = {str(e["batch_id"]): e for e in events}
    problems = [f"batch {e['batch_id']} has {e['n']} completion events" for e in events
                if e["n"] != 1]
    finished = {b for b, row in batches.items()
                if row["status"] in ("completed", "partial") and row["rowCountInserted"] > 0}
    problems += [f"finished batch {b} has no completion event" for b in finished - set(by_batch)]
    problems += [f"batch {b} ({batches[b]['status']}) has a completion event"
                 for b in set(by_batch) & set(batches) - finished]
    out = [verdict("2d", "completion events, one per finished batch", len(events), problems)]
    for endpoint in world.endpoints:
        out.append(_deliveries(world, endpoint, set(by_batch)))
    return out


def _deliveries(world: World, endpoint: Endpoint, expected: set[str]) -> Verdict:
    problems: list[str] = []
    ids: dict[str, set[str]] = defaultdict(set)
    received = endpoint.delivered()
    for r in received:
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
                   f"{len(received)} requests answered 2xx, {len(missing)} events not yet")


def _upload_id(body: dict) -> Any:
    data = body.get("data", body)
    return data.get("upload_id") if isinstance(data, dict) else None
