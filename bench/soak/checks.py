"""The invariants of issue 24, checked after the system settled, each printed with its count.

The expectation side is always what the clients were told (an acknowledged upload, batch or
event must be durable and finished) and what the soak itself generated (the files' rows, the
bucket's objects, the events' sequences); the product's own records are only the thing
checked. Reads go through the API where a client would read, and through SQL (reads only)
for what no API shows (chunks, index rows, the outbox of completion events).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import orjson
import psycopg
from psycopg.rows import dict_row

from bench.soak.faults import Fault
from bench.soak.journal import Api, Call
from bench.soak.work.documents import Upload, Uploads, Versions
from bench.soak.work.events import EventsPool
from bench.soak.work.hooks import Endpoint
from bench.soak.work.reads import Admin
from bench.soak.work.records import Imports
from bench.soak.work.sources import BUCKET, Sources
from tests.support import logscan

FINAL_RUN = ("succeeded", "failed")
FINAL_BATCH = ("completed", "partial", "failed")
SHOWN = 5  # examples printed under a failed invariant


@dataclass
class Verdict:
    key: str
    text: str
    ok: bool
    count: int
    problems: list[str] = field(default_factory=list)
    note: str = ""

    def line(self) -> str:
        mark = "PASS" if self.ok else "FAIL"
        tail = f" ({self.note})" if self.note else ""
        return f"{mark} {self.key:<3} {self.text}: {self.count}{tail}"


def verdict(key: str, text: str, count: int, problems: list[str], note: str = "") -> Verdict:
    return Verdict(key, text, not problems, count, problems, note)


@dataclass
class World:
    """Everything the checks read: the pools' records and the stack's handles."""

    api: Api
    dsn: str
    tenant_id: Any
    uploads: list[Uploads]
    versions: Versions
    imports: Imports
    events: EventsPool
    sources: Sources
    admin: Admin
    endpoints: list[Endpoint]
    faults: list[Fault]
    load_end_s: float
    settle_actions: int
    children: dict[str, int | None]
    workers: int
    logs: list[Any]
    ready: bool
    calls: list[Call]

    def sql(self, query: str, params: Any = None) -> list[dict[str, Any]]:
        with psycopg.connect(self.dsn, row_factory=dict_row, autocommit=True) as conn:
            return conn.execute(query, params).fetchall()


def run_all(world: World) -> list[Verdict]:
    out: list[Verdict] = []
    for check in (documents, imports, events, sources, operators, logs):
        out += check(world)
    return out


# ── 1. documents ────────────────────────────────────────────────────────────────────────────
def _acked(world: World) -> list[Upload]:
    sent = [u for pool in world.uploads for u in pool.sent] + world.versions.sent
    return [u for u in sent if u.status in (200, 202)]


def documents(world: World) -> list[Verdict]:
    acked = _acked(world)
    runs: dict[str, dict] = {}
    problems: list[str] = []
    for u in acked:
        if u.run_id is None or u.run_id in runs:
            continue
        response = world.api.until_answered("GET", f"/v1/ingestion-runs/{u.run_id}",
                                            label="GET /v1/ingestion-runs/{id}")
        if response is None or response.status_code != 200:
            problems.append(f"run {u.run_id} of {u.doc.name}: not readable "
                            f"({response.status_code if response is not None else 'no answer'})")
            continue
        runs[u.run_id] = response.json()
    truthful: list[str] = []
    outcome: dict[str, int] = defaultdict(int)
    for u in acked:
        run = runs.get(u.run_id or "")
        if run is None:
            continue
        outcome[run["status"]] += 1
        if run["status"] not in FINAL_RUN:
            problems.append(f"run {u.run_id} ({u.doc.name}) is {run['status']}")
        elif run["status"] == "failed":
            if not run.get("error"):
                problems.append(f"run {u.run_id} ({u.doc.name}) failed without a reason")
            if run.get("retryable") is not (u.doc.good):
                truthful.append(f"run {u.run_id} ({u.doc.name}, {'good' if u.doc.good else 'bad'}"
                                f" file) failed {run.get('error_code')}: retryable="
                                f"{run.get('retryable')}")
        elif not u.doc.good:
            truthful.append(f"run {u.run_id} ({u.doc.name}, a file that cannot be read) "
                            "succeeded")
    skipped = sum(1 for u in acked if u.run_id is None)
    note = ", ".join(f"{n} {s}" for s, n in sorted(outcome.items()))
    failed, more = _all_failed_truthful(world)
    out = [verdict("1a", "acknowledged uploads whose run ended succeeded or failed with a reason",
                   len(runs), problems, f"{note}; {skipped} skipped as already there"),
           verdict("1b", "failed runs (uploads, syncs, imports) whose `retryable` told the truth",
                   failed, truthful + more)]
    stuck = world.sql("SELECT run_id, status, run_type FROM ingestion_runs WHERE tenant_id = %s "
                      "AND status IN ('queued', 'running')", (world.tenant_id,))
    out.append(verdict("1c", "runs still queued or running after settling (must be 0)",
                       len(stuck), [f"{r['run_type']} run {r['run_id']} {r['status']}"
                                    for r in stuck]))
    two = world.sql("SELECT doc_id, count(*) AS n FROM document_versions WHERE tenant_id = %s "
                    "AND is_active GROUP BY doc_id HAVING count(*) > 1", (world.tenant_id,))
    docs = world.sql("SELECT count(*) AS n FROM documents WHERE tenant_id = %s",
                     (world.tenant_id,))[0]["n"]
    out.append(verdict("1d", "documents, none with two active versions", docs,
                       [f"document {r['doc_id']}: {r['n']} active versions" for r in two]))
    out.append(_index_rows(world))
    out.append(_half_versions(world))
    out.append(_versions(world))
    return out


def _all_failed_truthful(world: World) -> tuple[int, list[str]]:
    """Every failed run of the tenant, as the API lists it, against what the soak knows of its
    bytes: a file the soak made unreadable must say `retryable: false`, any other `true`, except
    an S3 object deleted meanwhile (`source_object_deleted`: nothing to retry, ADR 0241)."""
    good = {u.sha256 for pool in world.uploads for u in pool.sent if u.doc.good}
    good |= {u.sha256 for u in world.versions.sent} | world.sources.hashes
    bad = {u.sha256 for pool in world.uploads for u in pool.sent if not u.doc.good}
    files = {"sha256:" + hashlib.sha256(s.file.body).hexdigest(): s.file
             for s in world.imports.sent}
    problems: list[str] = []
    failed = 0
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"status": "failed", "limit": 100}
        if cursor:
            params["cursor"] = cursor
        response = world.api.until_answered("GET", "/v1/ingestion-runs", params=params)
        if response is None or response.status_code != 200:
            problems.append("the failed runs could not be listed")
            break
        for run in response.json()["items"]:
            failed += 1
            digest = (run.get("config") or {}).get("content_hash")
            if digest in files:
                expect = not files[digest].expect_fail
            elif digest in bad:
                expect = False
            elif digest in good:
                expect = run.get("error_code") != "source_object_deleted"
            else:
                problems.append(f"failed run {run['run_id']} of bytes the soak never sent")
                continue
            if run.get("retryable") is not expect:
                problems.append(f"{run['run_type']} run {run['run_id']} failed "
                                f"{run.get('error_code')}: retryable={run.get('retryable')}")
        cursor = response.json().get("next_cursor")
        if not cursor:
            break
    return failed, problems


def _index_rows(world: World) -> Verdict:
    """The vector and text indexes hold exactly the active versions' chunks: each chunk of an
    active version has one embedding and one full-text row, and the version has as many chunks
    as it says. (Inactive versions keep their chunks by design, gateway-worker-ingestion.md §14
    "deactivate, never delete", ADR 0116; search filters them out, which 1g checks through the
    API.)"""
    rows = world.sql("""
        SELECT v.doc_version_id, v.chunk_count,
               (SELECT count(*) FROM chunks c WHERE c.doc_version_id = v.doc_version_id) AS chunks,
               (SELECT count(*) FROM chunk_embeddings e WHERE e.doc_version_id = v.doc_version_id)
                   AS vectors,
               (SELECT count(*) FROM chunk_fts f WHERE f.doc_version_id = v.doc_version_id) AS texts
        FROM document_versions v WHERE v.tenant_id = %s AND v.is_active""", (world.tenant_id,))
    problems = [f"active version {r['doc_version_id']}: chunk_count {r['chunk_count']}, "
                f"{r['chunks']} chunks, {r['vectors']} vectors, {r['texts']} text rows"
                for r in rows if not r["chunk_count"] == r["chunks"] == r["vectors"] == r["texts"]]
    stray = world.sql("""
        SELECT 'vector' AS kind, e.chunk_id FROM chunk_embeddings e JOIN chunks c USING (chunk_id)
        WHERE e.tenant_id = %(t)s AND e.doc_version_id <> c.doc_version_id
        UNION ALL
        SELECT 'text', f.chunk_id FROM chunk_fts f JOIN chunks c USING (chunk_id)
        WHERE f.tenant_id = %(t)s AND f.doc_version_id <> c.doc_version_id""",
                      {"t": world.tenant_id})
    problems += [f"{r['kind']} row of chunk {r['chunk_id']} names another version" for r in stray]
    total = sum(r["chunks"] for r in rows)
    return verdict("1e", "active chunks, each in the vector and the text index exactly once",
                   total, problems, f"{len(rows)} active versions")


def _half_versions(world: World) -> Verdict:
    rows = world.sql("""
        SELECT v.doc_version_id, r.run_id, r.status FROM document_versions v
        JOIN ingestion_runs r ON r.run_id = v.run_id
        WHERE v.tenant_id = %s AND r.status <> 'succeeded'""", (world.tenant_id,))
    versions = world.sql("SELECT count(*) AS n FROM document_versions WHERE tenant_id = %s",
                         (world.tenant_id,))[0]["n"]
    return verdict("1f", "versions, none left by a run that did not succeed", versions,
                   [f"version {r['doc_version_id']} of {r['status']} run {r['run_id']}"
                    for r in rows])


def _versions(world: World) -> Verdict:
    """Each document versioned by `doc_id` serves its last version whose run succeeded, and a
    text search finds that version's marker and none of the older ones'."""
    problems: list[str] = []
    checked = 0
    by_doc: dict[int, list[Upload]] = defaultdict(list)
    for u in world.versions.sent:
        if u.version_of is not None:
            by_doc[u.version_of].append(u)
    for no, sent in sorted(by_doc.items()):
        if no in world.versions.uncertain:
            continue
        doc_id = world.versions.doc_ids.get(no)
        final: dict[str, str] = {}
        for u in sent:
            if u.run_id:
                response = world.api.until_answered("GET", f"/v1/ingestion-runs/{u.run_id}",
                                                    label="GET /v1/ingestion-runs/{id}")
                final[u.run_id] = response.json()["status"] if response is not None else "?"
        served = [u for u in sent if u.run_id and final.get(u.run_id) == "succeeded"]
        if not served or doc_id is None:
            continue
        expected = served[-1]
        active = world.sql("SELECT content_hash FROM document_versions WHERE tenant_id = %s AND "
                           "doc_id = %s AND is_active", (world.tenant_id, doc_id))
        if [a["content_hash"] for a in active] != [expected.sha256]:
            problems.append(f"handbook {no}: serves {[a['content_hash'][:19] for a in active]}, "
                            f"its last succeeded version {expected.version} is "
                            f"{expected.sha256[:19]}")
        for u in served:
            hits = _found(world, u.doc.marker, doc_id)
            checked += 1
            if (u is expected) != hits:
                problems.append(f"handbook {no} version {u.version}: search "
                                f"{'misses its marker' if u is expected else 'still finds it'}")
    return verdict("1g", "versions by doc_id searched: only the last succeeded one is found",
                   checked, problems, f"{len(by_doc)} documents")


def _found(world: World, marker: str, doc_id: str) -> bool:
    response = world.api.until_answered("GET", "/v1/search",
                                        params={"q": marker, "mode": "text", "k": 5},
                                        label="GET /v1/search?mode=text")
    if response is None or response.status_code != 200:
        return False
    return any(str(hit.get("doc_id")) == doc_id for hit in response.json().get("hits", []))


# ── 2. imports ──────────────────────────────────────────────────────────────────────────────
def imports(world: World) -> list[Verdict]:
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


# ── 3. events ───────────────────────────────────────────────────────────────────────────────
def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def events(world: World) -> list[Verdict]:
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


# ── 4. S3 source ────────────────────────────────────────────────────────────────────────────
def sources(world: World) -> list[Verdict]:
    listing = world.sources.listing()
    want = {f"s3://{BUCKET}/{k}": "sha256:" + hashlib.sha256(v).hexdigest()
            for k, v in listing.items()}
    rows = world.sql("""
        SELECT d.source_uri, v.content_hash FROM documents d
        JOIN document_versions v ON v.doc_id = d.doc_id AND v.is_active
        WHERE d.tenant_id = %s AND d.source_id = %s""",
                     (world.tenant_id, world.sources.source_id or None))
    served = {r["source_uri"]: r["content_hash"] for r in rows}
    problems = [f"{k}: in the bucket, not served" for k in sorted(set(want) - set(served))]
    problems += [f"{k}: served, not in the bucket" for k in sorted(set(served) - set(want))]
    problems += [f"{k}: serves other bytes than the bucket's" for k in sorted(set(want) & set(
        served)) if want[k] != served[k]]
    if world.sources.final is None:
        problems.append("no sync after the last change finished")
    syncs = world.sources.syncs
    note = (f"{len(syncs)} syncs, {sum(1 for s in syncs if s['status'] == 'failed')} failed; "
            f"{world.sources.changes} changes to the bucket")
    return [verdict("4", "S3 source: active documents equal the bucket's final listing",
                    len(want), problems, note)]


# ── 5. operators and processes ──────────────────────────────────────────────────────────────
def operators(world: World) -> list[Verdict]:
    late = [a for a in world.admin.actions if a.at_s > world.load_end_s]
    problems = [f"{a.what} {a.target} at {a.at_s:.0f}s, after the load" for a in late]
    if world.settle_actions:
        problems.append(f"the settling took {world.settle_actions} actions")
    actions = world.sql("SELECT actor, reason, count(*) AS n FROM run_actions WHERE tenant_id = "
                        "%s GROUP BY actor, reason", (world.tenant_id,))
    problems += [f"{r['n']} run action(s) by {r['actor']}: {r['reason']}" for r in actions
                 if not r["reason"].startswith("soak: the admin's")]
    during = len(world.admin.actions)
    out = [verdict("5a", "operator actions needed to settle (must be 0)", len(late), problems,
                   f"the admin's routine redrove/retried {during} times during the load")]
    down = [f"{name} is not running" for name, pid in world.children.items() if not pid]
    expected = {"moto", "postgres", "gateway", *(f"worker-{i + 1}" for i in range(world.workers))}
    down += [f"{name} is not supervised" for name in sorted(expected - set(world.children))]
    if not world.ready:
        down.append("/health/ready is not 200")
    out.append(verdict("5b", "processes up at the end", sum(1 for p in world.children.values()
                                                            if p), down))
    return out


# ── 6. logs ─────────────────────────────────────────────────────────────────────────────────
# What a fault may make a process log with its traceback: the error types of its family.
FAMILIES = {
    "kill_postgres": r"Operational|AdminShutdown|Interface|Connection|DatabaseUnavailable|"
                     r"PoolTimeout|CrashShutdown|ServiceUnavailable|Unavailable|Closed",
    "kill_moto": r"Endpoint|Connect|ReadTimeout|ClientError|QueueUnavailable|Unavailable|"
                 r"ProtocolError|RemoteDisconnected|Closed",
    "queue_outage": r"Endpoint|Connect|ReadTimeout|ClientError|QueueUnavailable|Unavailable|"
                    r"ProtocolError|RemoteDisconnected|Closed",
    # Only the store's own translation of ENOSPC: a bare OSError is a path that missed it.
    "disk_full": r"StorageUnavailable",
}
GRACE_S = 90.0


def logs(world: World) -> list[Verdict]:
    personal = _personal(world)
    found_personal: list[str] = []
    tracebacks: list[str] = []
    attributed = 0
    for path in world.logs:
        text = path.read_text(errors="replace")
        for kind, line in logscan.scan_text(text):
            found_personal.append(f"{path.name}: {kind}: {line[:200]}")
        for value in personal:
            if value in text:
                found_personal.append(f"{path.name}: a value the soak sent as personal data "
                                      f"({_mask(value)})")
        if path.name == "ingest-dev.log":
            for when, error_type, head in _tracebacks(text):
                if _caused(world.faults, when, error_type):
                    attributed += 1
                else:
                    tracebacks.append(f"{when} {error_type}: {head[:200]}")
    errors = [c for c in world.calls if c.status == 500]
    answered = [f"{c.endpoint} at {c.at_s:.0f}s" for c in errors]
    return [verdict("6a", "log lines with personal data or secrets (must be 0)",
                    len(found_personal), found_personal,
                    f"{len(personal)} personal values sent, {len(world.logs)} logs"),
            verdict("6b", "tracebacks not caused by an injected fault (must be 0)",
                    len(tracebacks), tracebacks, f"{attributed} caused by injected faults"),
            # A fault may make the product answer 503 (retry later), never 500: an unhandled
            # error says nothing a client can act on.
            verdict("6c", "answers 500 (an unhandled error) to the clients (must be 0)",
                    len(errors), answered, f"{len(world.calls)} calls")]


def _personal(world: World) -> set[str]:
    values: set[str] = set()
    for s in world.imports.sent:
        values |= s.file.personal
    for sent in world.events.by_id.values():
        values.add(sent.event.body["payload"]["Defendant"])
    return {v for v in values if len(v) >= 8}


def _mask(value: str) -> str:
    return value[:2] + "…" + value[-2:]


# The exception lines of a traceback ("    | psycopg.OperationalError: server closed …"):
# what an ExceptionGroup holds, e.g. a sync's task group that met a database outage.
_RAISED = re.compile(r"^[ |+\-]*((?:\w+\.)*\w+)(?::|$)", re.MULTILINE)


def _tracebacks(text: str) -> Iterable[tuple[float | None, str, str]]:
    for line in text.splitlines():
        if "Traceback (most recent call last)" not in line:
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            yield None, "raw", line
            continue
        when = datetime.fromisoformat(record["ts"]).timestamp() if "ts" in record else None
        error_type = str(record.get("error_type", "?"))
        if error_type.endswith("ExceptionGroup"):
            inner = {m.rsplit(".", 1)[-1] for m in _RAISED.findall(record.get("traceback", ""))
                     if m.rsplit(".", 1)[-1][:1].isupper()}
            error_type = " ".join(sorted(inner - {"Traceback", error_type})) or error_type
        yield when, error_type, f"{record.get('event')}: {record.get('error', '')}"


def _caused(faults: list[Fault], when: float | None, error_type: str) -> bool:
    if when is None:
        return False
    for fault in faults:
        family = FAMILIES.get(fault.kind)
        if family and fault.started_at - 2 <= when <= fault.ended_at + GRACE_S \
                and re.search(family, error_type):
            return True
    return False
