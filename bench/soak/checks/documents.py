"""1. Documents: every acknowledged upload ended as promised; each document a client was told of
serves bytes a client sent, with one active version once a run of it succeeded; the indexes
hold every active chunk; a document versioned by `doc_id` serves its newest succeeded version.

``gather`` reads (the API where a client would, SQL for what no API shows); ``judge`` decides
from what was gathered alone, so tests/unit/test_soak_checks.py can hand it a broken world.
Nothing here checks what a constraint guarantees (one active version per document, one
vector and one text row per chunk: unique keys); what it checks is the store against what the
clients were told and sent.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from bench.soak.checks.world import FINAL_RUN, Verdict, World, verdict
from bench.soak.work.documents import Upload


@dataclass
class Versioned:
    """One document of the versions pool: what it sent, how each run ended, what search finds."""

    no: int
    doc_id: str
    sent: list[Upload]
    final: dict[str, str]              # run id → the run's status
    found: dict[str, bool]             # run id → its version's marker found by text search


@dataclass
class Facts:
    acked: list[Upload]                # uploads answered 200/202 (both pools)
    runs: dict[str, dict]              # run id → GET /v1/ingestion-runs/{id}
    unreadable: list[str] = field(default_factory=list)
    failed_runs: list[dict] = field(default_factory=list)  # every failed run, as listed
    listing_failed: bool = False
    good: set[str] = field(default_factory=set)            # bytes that can be processed
    bad: set[str] = field(default_factory=set)             # bytes that never can
    imports: dict[str, bool] = field(default_factory=dict)  # records file hash → must fail
    sources: set[str] = field(default_factory=set)         # bytes put in the S3 bucket
    stuck: list[dict] = field(default_factory=list)        # runs still queued or running
    # Every version of the tenant: doc_version_id, doc_id, source_id, content_hash, is_active,
    # run_status, chunk_count, chunks, vectors, texts
    versions: list[dict] = field(default_factory=list)
    documents: list[str] = field(default_factory=list)     # every document id of the tenant
    stray: list[dict] = field(default_factory=list)        # index rows naming another version
    versioned: list[Versioned] = field(default_factory=list)


def gather(world: World) -> Facts:
    acked = [u for u in [u for pool in world.uploads for u in pool.sent] + world.versions.sent
             if u.status in (200, 202)]
    facts = Facts(acked=acked, runs={})
    for u in acked:
        if u.run_id is None or u.run_id in facts.runs:
            continue
        response = world.api.until_answered("GET", f"/v1/ingestion-runs/{u.run_id}",
                                            label="GET /v1/ingestion-runs/{id}")
        if response is None or response.status_code != 200:
            facts.unreadable.append(f"run {u.run_id} of {u.doc.name}: not readable ("
                                    f"{response.status_code if response is not None else '-'})")
            continue
        facts.runs[u.run_id] = response.json()
    facts.failed_runs, facts.listing_failed = _failed_runs(world)
    sent = [u for pool in world.uploads for u in pool.sent]
    facts.good = {u.sha256 for u in sent if u.doc.good} | {u.sha256 for u in world.versions.sent}
    facts.bad = {u.sha256 for u in sent if not u.doc.good}
    facts.sources = set(world.sources.hashes)
    facts.imports = {"sha256:" + hashlib.sha256(s.file.body).hexdigest(): s.file.expect_fail
                     for s in world.imports.sent}
    t = world.tenant_id
    facts.stuck = world.sql("SELECT run_id, status, run_type FROM ingestion_runs WHERE "
                            "tenant_id = %s AND status IN ('queued', 'running')", (t,))
    facts.versions = world.sql("""
        SELECT v.doc_version_id, v.doc_id::text AS doc_id, d.source_id, v.content_hash,
               v.is_active, r.status AS run_status, v.chunk_count,
               (SELECT count(*) FROM chunks c WHERE c.doc_version_id = v.doc_version_id) AS chunks,
               (SELECT count(*) FROM chunk_embeddings e
                 WHERE e.doc_version_id = v.doc_version_id) AS vectors,
               (SELECT count(*) FROM chunk_fts f WHERE f.doc_version_id = v.doc_version_id)
                   AS texts
        FROM document_versions v JOIN documents d ON d.doc_id = v.doc_id
        LEFT JOIN ingestion_runs r ON r.run_id = v.run_id
        WHERE v.tenant_id = %s""", (t,))
    facts.documents = [r["doc_id"] for r in world.sql(
        "SELECT doc_id::text AS doc_id FROM documents WHERE tenant_id = %s", (t,))]
    facts.stray = world.sql("""
        SELECT 'vector' AS kind, e.chunk_id FROM chunk_embeddings e JOIN chunks c USING (chunk_id)
        WHERE e.tenant_id = %(t)s AND e.doc_version_id <> c.doc_version_id
        UNION ALL
        SELECT 'text', f.chunk_id FROM chunk_fts f JOIN chunks c USING (chunk_id)
        WHERE f.tenant_id = %(t)s AND f.doc_version_id <> c.doc_version_id""", {"t": t})
    facts.versioned = _versioned(world)
    return facts


def _failed_runs(world: World) -> tuple[list[dict], bool]:
    runs: list[dict] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"status": "failed", "limit": 100}
        if cursor:
            params["cursor"] = cursor
        response = world.api.until_answered("GET", "/v1/ingestion-runs", params=params)
        if response is None or response.status_code != 200:
            return runs, True
        runs += response.json()["items"]
        cursor = response.json().get("next_cursor")
        if not cursor:
            return runs, False


def _versioned(world: World) -> list[Versioned]:
    by_doc: dict[int, list[Upload]] = defaultdict(list)
    for u in world.versions.sent:
        if u.version_of is not None:
            by_doc[u.version_of].append(u)
    out = []
    for no, sent in sorted(by_doc.items()):
        doc_id = world.versions.doc_ids.get(no)
        if no in world.versions.uncertain or doc_id is None:
            continue
        final: dict[str, str] = {}
        for u in sent:
            if u.run_id:
                response = world.api.until_answered("GET", f"/v1/ingestion-runs/{u.run_id}",
                                                    label="GET /v1/ingestion-runs/{id}")
                final[u.run_id] = response.json()["status"] if response is not None else "?"
        found = {u.run_id: _found(world, u.doc.marker, doc_id) for u in sent
                 if u.run_id and final.get(u.run_id) == "succeeded"}
        out.append(Versioned(no, doc_id, sent, final, found))
    return out


def _found(world: World, marker: str, doc_id: str) -> bool:
    response = world.api.until_answered("GET", "/v1/search",
                                        params={"q": marker, "mode": "text", "k": 5},
                                        label="GET /v1/search?mode=text")
    if response is None or response.status_code != 200:
        return False
    return any(str(hit.get("doc_id")) == doc_id for hit in response.json().get("hits", []))


# ── the judgement ───────────────────────────────────────────────────────────────────────────
def judge(facts: Facts) -> list[Verdict]:
    return [_ended(facts), _truthful(facts), _stuck(facts), _told(facts), _indexed(facts),
            _half(facts), _newest(facts)]


def _ended(facts: Facts) -> Verdict:
    problems = list(facts.unreadable)
    outcome: Counter[str] = Counter()
    for u in facts.acked:
        run = facts.runs.get(u.run_id or "")
        if run is None:
            continue
        outcome[run["status"]] += 1
        if run["status"] not in FINAL_RUN:
            problems.append(f"run {u.run_id} ({u.doc.name}) is {run['status']}")
        elif run["status"] == "failed" and not run.get("error"):
            problems.append(f"run {u.run_id} ({u.doc.name}) failed without a reason")
    skipped = sum(1 for u in facts.acked if u.run_id is None)
    note = ", ".join(f"{n} {s}" for s, n in sorted(outcome.items()))
    return verdict("1a", "acknowledged uploads whose run ended succeeded or failed with a reason",
                   len(facts.runs), problems, f"{note}; {skipped} skipped as already there")


def _truthful(facts: Facts) -> Verdict:
    """Every failed run against what the soak knows of its bytes: a file the soak made
    unreadable must say `retryable: false`, any other `true`, except an S3 object deleted
    meanwhile (`source_object_deleted`: nothing to retry, ADR 0241)."""
    problems = ["the failed runs could not be listed"] if facts.listing_failed else []
    for u in facts.acked:
        run = facts.runs.get(u.run_id or "")
        if run is None:
            continue
        if run["status"] == "failed" and run.get("retryable") is not u.doc.good:
            problems.append(f"run {u.run_id} ({u.doc.name}, {'good' if u.doc.good else 'bad'} "
                            f"file) failed {run.get('error_code')}: retryable="
                            f"{run.get('retryable')}")
        elif run["status"] == "succeeded" and not u.doc.good:
            problems.append(f"run {u.run_id} ({u.doc.name}, a file that cannot be read) "
                            "succeeded")
    good = facts.good | facts.sources
    for run in facts.failed_runs:
        digest = (run.get("config") or {}).get("content_hash")
        if digest in facts.imports:
            expect = not facts.imports[digest]
        elif digest in facts.bad:
            expect = False
        elif digest in good:
            expect = run.get("error_code") != "source_object_deleted"
        else:
            problems.append(f"failed run {run['run_id']} of bytes the soak never sent")
            continue
        if run.get("retryable") is not expect:
            problems.append(f"{run['run_type']} run {run['run_id']} failed "
                            f"{run.get('error_code')}: retryable={run.get('retryable')}")
    return verdict("1b", "failed runs (uploads, syncs, imports) whose `retryable` told the truth",
                   len(facts.failed_runs), problems)


def _stuck(facts: Facts) -> Verdict:
    return verdict("1c", "runs still queued or running after settling (must be 0)",
                   len(facts.stuck), [f"{r['run_type']} run {r['run_id']} {r['status']}"
                                      for r in facts.stuck])


def _told(facts: Facts) -> Verdict:
    """What the store holds against what the clients were told and sent: every document a
    client was told of is there; once one of its runs succeeded it has exactly one active
    version; every version holds bytes a client (or the customer's bucket) sent."""
    problems: list[str] = []
    by_doc: dict[str, list[dict]] = defaultdict(list)
    for v in facts.versions:
        by_doc[v["doc_id"]].append(v)
    documents = set(facts.documents)
    told: dict[str, list[Upload]] = defaultdict(list)
    for u in facts.acked:
        if u.doc_id:
            told[str(u.doc_id)].append(u)
    for doc_id, uploads in sorted(told.items()):
        if doc_id not in documents:
            problems.append(f"document {doc_id} ({uploads[0].doc.name}): told, not stored")
            continue
        active = [v for v in by_doc[doc_id] if v["is_active"]]
        succeeded = any(facts.runs.get(u.run_id or "", {}).get("status") == "succeeded"
                        for u in uploads)
        if succeeded and len(active) != 1:
            problems.append(f"document {doc_id} ({uploads[0].doc.name}): a run succeeded, "
                            f"{len(active)} active versions")
    sent = facts.good | facts.bad | facts.sources
    problems += [f"version {v['doc_version_id']} of document {v['doc_id']} holds bytes nobody "
                 f"sent ({str(v['content_hash'])[:19]})" for v in facts.versions
                 if v["content_hash"] not in sent]
    return verdict("1d", "documents: each one told is stored, one active version once a run "
                   "succeeded, only bytes the clients sent", len(told), problems,
                   f"{len(documents)} documents, {len(facts.versions)} versions stored")


def _indexed(facts: Facts) -> Verdict:
    """Each active version has as many chunks as it says, and each of them is in the vector
    and the text index. (Inactive versions keep their chunks by design, §14 "deactivate, never
    delete", ADR 0116; search filters them out, which 1g checks through the API.)"""
    active = [v for v in facts.versions if v["is_active"]]
    problems = [f"active version {r['doc_version_id']}: chunk_count {r['chunk_count']}, "
                f"{r['chunks']} chunks, {r['vectors']} vectors, {r['texts']} text rows"
                for r in active if not r["chunk_count"] == r["chunks"] == r["vectors"]
                == r["texts"]]
    problems += [f"{r['kind']} row of chunk {r['chunk_id']} names another version"
                 for r in facts.stray]
    return verdict("1e", "active chunks, each in the vector and the text index",
                   sum(r["chunks"] for r in active), problems, f"{len(active)} active versions")


def _half(facts: Facts) -> Verdict:
    bad = [v for v in facts.versions if v["run_status"] not in ("succeeded", None)]
    return verdict("1f", "versions, none left by a run that did not succeed", len(facts.versions),
                   [f"version {v['doc_version_id']} of a {v['run_status']} run" for v in bad])


def _newest(facts: Facts) -> Verdict:
    """Each document versioned by `doc_id` serves its last version whose run succeeded, and a
    text search finds that version's marker and none of the older ones'."""
    problems: list[str] = []
    checked = 0
    for doc in facts.versioned:
        served = [u for u in doc.sent if u.run_id and doc.final.get(u.run_id) == "succeeded"]
        if not served:
            continue
        expected = served[-1]
        active = [v["content_hash"] for v in facts.versions
                  if v["doc_id"] == doc.doc_id and v["is_active"]]
        if active != [expected.sha256]:
            problems.append(f"handbook {doc.no}: serves {[a[:19] for a in active]}, its last "
                            f"succeeded version {expected.version} is {expected.sha256[:19]}")
        for u in served:
            checked += 1
            if (u is expected) != doc.found.get(u.run_id or "", False):
                problems.append(f"handbook {doc.no} version {u.version}: search "
                                f"{'misses its marker' if u is expected else 'still finds it'}")
    return verdict("1g", "versions by doc_id searched: only the last succeeded one is found",
                   checked, problems, f"{len(facts.versioned)} documents")
