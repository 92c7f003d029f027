"""1. Documents: every acknowledged upload ended as promised; one active version each; the
indexes hold exactly the active chunks; a document serves its newest version."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Any

from bench.soak.checks.world import FINAL_RUN, Verdict, World, verdict
from bench.soak.work.documents import Upload


def _acked(world: World) -> list[Upload]:
    sent = [u for pool in world.uploads for u in pool.sent] + world.versions.sent
    return [u for u in sent if u.status in (200, 202)]


def check(world: World) -> list[Verdict]:
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
