"""POST /v1/ask: retrieve, judge the evidence, answer citing only the chunks it rests on.

specs/gateway-worker-ingestion.md §2.2–2.4, as this gateway keeps them:
- retrieval and the passages read for the answer share one REPEATABLE READ snapshot, and every
  query in it joins active versions of the caller's tenant: only served content is retrieved;
- the evidence is judged relative to the question's nearest neighbours (gateway/search/
  evidence.py, docs/decisions/0223); too weak → abstain, with no citation and the reason;
- citations are the retrieved passages only: a provider's [n] outside them is dropped, and
  just before answering the cited chunks are checked again for activity, so a document
  deactivated while the provider was writing is not cited (the answer falls back to the
  passages still active, or abstains);
- an extractive answer quotes sentences, never a heading, caption or boilerplate line: the
  sentence of each passage nearest the question in meaning, one that states before one that
  asks (a FAQ's question is no answer).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any
from uuid import UUID

import numpy as np

from gateway.search import evidence, provider, service, terms
from gateway.search.service import Runtime
from shared import db

log = logging.getLogger(__name__)

NO_EVIDENCE = "No evidence for this in your documents."
EXTRACTIVE_PASSAGES = 3
# The nearest chunks judged as evidence (their words, names and keyword ranks), at least: as
# many as the request may cite.
EVIDENCE_CHUNKS = 8


async def ask(pool: db.AsyncPool, runtime: Runtime, *, tenant_id: UUID,
              request: service.SearchRequest) -> dict[str, Any]:
    settings = runtime.settings
    query = await runtime.query_vector(request.q)
    # Chunks, not documents: each passage is cited on its own. The vector list (the fixed
    # candidate depth, service.CANDIDATE_DEPTH) is the neighbourhood the evidence is judged on,
    # read exactly, not by the HNSW walk: the same corpus and question must always get the same
    # lift, whatever graph an index build drew (docs/decisions/0420).
    wide = replace(request, group="chunk")
    rule = evidence.Rule.of(settings)
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(service.Q["snapshot"])
        found, _ = await runtime.retrieve(conn, tenant_id=tenant_id, request=wide,
                                          query=query, exact=True)
        verdict = await _judge(conn, tenant_id, request.q, found, rule,
                               nearest=max(EVIDENCE_CHUNKS, request.k))
        # The evidence the verdict cites, most similar first: it was judged by meaning, so it
        # is cited that way (a provider reads up to request.k of them).
        every = {f.chunk_id: f for f in service.fuse(
            found.text, found.vector, k=len(found.vector) + len(found.text),
            text_score=found.text_score, distance=found.distance)}
        chosen = [every[c] for c in verdict.cited if c in every][:request.k]
        passages = await service.hits(conn, tenant_id=tenant_id, q=request.q, fused=chosen)
    if not passages:
        return _abstain(request.q, verdict.reason or "cited_content_deactivated",
                        facts=verdict.facts())
    reply, fallback = None, None
    if settings.anthropic_api_key:  # no connection is held while the provider writes
        try:
            reply = await provider.answer(settings, request.q, [p["text"] for p in passages])
        except provider.ProviderFailed as exc:
            log.warning("answer provider failed; answering extractively",
                        extra={"tenant_id": str(tenant_id), "error": str(exc)[:200]})
            fallback = "provider_failed"
        if reply is not None and reply.no_evidence:
            return _abstain(request.q, "provider_no_evidence", source="anthropic",
                            facts=verdict.facts())
        if reply is not None and not reply.cited:
            reply, fallback = None, "provider_cited_nothing"
    async with pool.connection() as conn:
        rows = await (await conn.execute(service.Q["active_chunks"], {
            "tenant_id": tenant_id, "chunk_ids": [UUID(p["chunk_id"]) for p in passages]})
                      ).fetchall()
    live = {r["chunk_id"] for r in rows}
    if reply is not None:
        cited = [passages[n - 1] for n in reply.cited]
        if all(UUID(p["chunk_id"]) in live for p in cited):
            return _answer(request.q, reply.text, "anthropic", cited, numbers=reply.cited)
        fallback = "cited_content_deactivated"
    still = [p for p in passages if UUID(p["chunk_id"]) in live]
    if not still:
        return _abstain(request.q, "cited_content_deactivated", facts=verdict.facts())
    quoted = await _stating(runtime, query[0], still)
    if not quoted:
        return _abstain(request.q, "nothing_quotable", facts=verdict.facts())
    return _extractive(request.q, quoted, fallback, facts=verdict.facts())


async def _judge(conn: db.AsyncConn, tenant_id: UUID, q: str, found: service.Candidates,
                 rule: evidence.Rule, *, nearest: int) -> evidence.Verdict:
    """The evidence tests (evidence.decide) over the question's candidates: the lift of its
    nearest chunk over its neighbourhood, then, over its ``nearest`` chunks, which of the
    question's words and names each holds and where the keyword list ranks its document."""
    lift = evidence.judge([1.0 - d for d in found.distance.values()], min_lift=rule.min_lift,
                          floor=rule.floor, small_tenant=rule.small_tenant)
    if lift.reason == "no_candidates":
        return lift
    # The nearest chunks whatever the lift test said: the figures then do not depend on the
    # thresholds, so they can be fitted on recorded answers (bench/ask_quality.py).
    near = found.vector[:nearest]
    async with conn.pipeline():
        words_cursor = await conn.execute(service.Q["question_terms"],
                                          {"tenant_id": tenant_id, "q": q})
        lexeme_cursor = await conn.execute(service.Q["chunk_lexemes"], {
            "tenant_id": tenant_id, "chunk_ids": [c for c, _ in near]})
        rows = await words_cursor.fetchall()
        lexemes = {r["chunk_id"]: set(r["lexemes"]) for r in await lexeme_cursor.fetchall()}
    question = terms.question_terms(terms.words_of(rows), int(rows[0]["total"]) if rows else 1)
    keyword = service.document_ranks(found.text)
    passages = [evidence.Passage(chunk_id, 1.0 - found.distance[chunk_id],
                                 question.coverage(lexemes.get(chunk_id, set())),
                                 keyword.get(doc_id),
                                 question.missing(lexemes.get(chunk_id, set())),
                                 question.content(lexemes.get(chunk_id, set())))
                for chunk_id, doc_id in near]
    # Do the two lists agree on the subject: where the keyword list's first document ranks
    # among the vector list's documents.
    keyword_top = (service.document_ranks(found.vector).get(found.text[0][1])
                   if found.text else None)
    return evidence.decide(lift, passages, unknown=question.unknown, rule=rule,
                           z=evidence.best_z([1.0 - d for d in found.distance.values()]),
                           keyword_top=keyword_top)


async def _stating(runtime: Runtime, question: list[float],
                   passages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Up to EXTRACTIVE_PASSAGES passages with their quotes, most similar first; a passage that
    can only quote a question is left out while another states something. A question is no
    answer: "What is Debian?" over the Debian FAQ quoted its heading "What is the latest
    version of Debian?". Passages are quoted EXTRACTIVE_PASSAGES at a time, and the next ones
    only while none so far states anything."""
    quoted: list[dict[str, Any]] = []
    for at in range(0, len(passages), EXTRACTIVE_PASSAGES):
        quoted += await _quotes(runtime, question, passages[at:at + EXTRACTIVE_PASSAGES])
        if any(p["kind"] < evidence.ASKS for p in quoted):
            break
    stating = [p for p in quoted if p["kind"] != evidence.ASKS]
    chosen = stating if any(p["kind"] < evidence.ASKS for p in quoted) else quoted
    return [{k: v for k, v in p.items() if k != "kind"} for p in chosen[:EXTRACTIVE_PASSAGES]]


async def _quotes(runtime: Runtime, question: list[float],
                  passages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each passage with its ``quote``, a verbatim span of its text (evidence.quote), and the
    ``kind`` of sentence it starts at: from the quotable sentence nearest the question in
    meaning (embedded in one micro-batch); a passage with none is left out."""
    candidates = [[s for s in evidence.sentences(p["text"]) if evidence.quotable(s.text)]
                  for p in passages]
    flat = [s.text for group in candidates for s in group]
    try:
        vectors = await asyncio.gather(*(runtime.embedder.embed(s) for s in flat))
    except (OSError, ValueError, RuntimeError) as exc:  # quote the first sentences instead
        log.warning("sentences could not be embedded; quoting from the start",
                    extra={"error": type(exc).__name__})
        vectors = [[0.0] * len(question)] * len(flat)
    q = np.asarray(question)
    out, at = [], 0
    for passage, group in zip(passages, candidates, strict=True):
        if group:
            sims = [float(np.dot(q, vectors[at + i])) for i in range(len(group))]
            out.append({**passage, "quote": evidence.nearest_quote(passage["text"], group, sims),
                        "kind": evidence.quote_kind(passage["text"], group, sims)})
        at += len(group)
    return out


def _extractive(question: str, passages: list[dict[str, Any]], fallback: str | None, *,
                facts: dict[str, Any]) -> dict[str, Any]:
    lines = [f"“{p['quote']}” [{n}]" for n, p in enumerate(passages, start=1)]
    text = "From your documents:\n" + "\n".join(lines)
    result = _answer(question, text, "extractive", passages,
                     numbers=list(range(1, len(passages) + 1)))
    if fallback:
        result["fallback"] = fallback
    result["evidence"] = facts  # what it was judged on, as an abstention reports it
    return result


def _answer(question: str, text: str, source: str, cited: list[dict[str, Any]], *,
            numbers: list[int]) -> dict[str, Any]:
    return {"question": question, "answer": text, "abstained": False, "source": source,
            "citations": [_citation(n, p) for n, p in zip(numbers, cited, strict=True)]}


def _abstain(question: str, reason: str, *, source: str = "none",
             facts: dict[str, Any] | None = None) -> dict[str, Any]:
    """No answer: ``reason`` says why (no_candidates, weak_evidence, unknown_words,
    names_not_found, question_not_covered, keywords_disagree, content_not_covered,
    best_not_unusual, keyword_top_elsewhere, provider_no_evidence,
    cited_content_deactivated, nothing_quotable), ``evidence`` the figures it was judged on."""
    return {"question": question, "answer": NO_EVIDENCE, "abstained": True, "source": source,
            "reason": reason, "evidence": facts or {}, "citations": []}


def _citation(n: int, hit: dict[str, Any]) -> dict[str, Any]:
    return {"n": n, "chunk_id": hit["chunk_id"], "doc_id": hit["doc_id"],
            "version": hit["version"], "chunk_index": hit["chunk_index"], "page": hit["page"],
            "heading_path": hit["heading_path"], "title": hit["title"],
            # an e-mail attachment's message (docs/decisions/0250); None otherwise
            "parent": hit.get("parent"),
            "quote": hit.get("quote") or evidence.first_quote(hit["text"])}
