"""POST /v1/ask: retrieve, keep what is relevant enough, answer citing only those chunks.

specs/gateway-worker-ingestion.md §2.2–2.4, as this gateway keeps them:
- retrieval and the passages read for the answer share one REPEATABLE READ snapshot, and every
  query in it joins active versions of the caller's tenant: only served content is retrieved;
- nothing passes the relevance threshold → abstain, with no citation (docs/decisions/0106);
- citations are the retrieved passages only: a provider's [n] outside them is dropped, and
  just before answering the cited chunks are checked again for activity, so a document
  deactivated while the provider was writing is not cited (the answer falls back to the
  passages still active, or abstains).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from gateway.search import provider, service
from gateway.search.service import Candidates, Fused, Runtime
from shared import db

log = logging.getLogger(__name__)

NO_EVIDENCE = "No evidence for this in your documents."
EXTRACTIVE_PASSAGES = 3
QUOTE_CHARS = 320


def relevant(fused: Sequence[Fused], found: Candidates, min_similarity: float) -> list[Fused]:
    """The fused hits that are evidence: near enough in meaning, or matching every word."""
    keep = []
    for f in fused:
        distance = found.distance.get(f.chunk_id)
        near = distance is not None and 1.0 - distance >= min_similarity
        if near or f.text_rank is not None:
            keep.append(f)
    return keep


async def ask(pool: db.AsyncPool, runtime: Runtime, *, tenant_id: UUID,
              request: service.SearchRequest) -> dict[str, Any]:
    settings = runtime.settings
    query = await runtime.query_vector(request.q)
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(service.Q["snapshot"])
        found, fused = await runtime.retrieve(conn, tenant_id=tenant_id, request=request,
                                              query=query)
        passages = await service.hits(conn, tenant_id=tenant_id, q=request.q, fused=relevant(
            fused, found, settings.ask_min_similarity))
    if not passages:
        return _abstain(request.q)
    reply, fallback = None, None
    if settings.anthropic_api_key:  # no connection is held while the provider writes
        try:
            reply = await provider.answer(settings, request.q, [p["text"] for p in passages])
        except provider.ProviderFailed as exc:
            log.warning("answer provider failed; answering extractively",
                        extra={"tenant_id": str(tenant_id), "error": str(exc)[:200]})
            fallback = "provider_failed"
        if reply is not None and reply.no_evidence:
            return _abstain(request.q, source="anthropic")
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
        return _abstain(request.q)
    return _extractive(request.q, still[:EXTRACTIVE_PASSAGES], fallback)


def _extractive(question: str, passages: list[dict[str, Any]],
                fallback: str | None) -> dict[str, Any]:
    lines = [f"“{quote(p['text'])}” [{n}]" for n, p in enumerate(passages, start=1)]
    text = "From your documents:\n" + "\n".join(lines)
    result = _answer(question, text, "extractive", passages,
                     numbers=list(range(1, len(passages) + 1)))
    if fallback:
        result["fallback"] = fallback
    return result


def _answer(question: str, text: str, source: str, cited: list[dict[str, Any]], *,
            numbers: list[int]) -> dict[str, Any]:
    return {"question": question, "answer": text, "abstained": False, "source": source,
            "citations": [_citation(n, p) for n, p in zip(numbers, cited, strict=True)]}


def _abstain(question: str, source: str = "none") -> dict[str, Any]:
    return {"question": question, "answer": NO_EVIDENCE, "abstained": True, "source": source,
            "citations": []}


def _citation(n: int, hit: dict[str, Any]) -> dict[str, Any]:
    return {"n": n, "chunk_id": hit["chunk_id"], "doc_id": hit["doc_id"],
            "version": hit["version"], "chunk_index": hit["chunk_index"], "page": hit["page"],
            "title": hit["title"], "parent": hit["parent"], "quote": quote(hit["text"])}


def quote(text: str) -> str:
    """The passage on one line, cut at a word boundary near QUOTE_CHARS."""
    flat = re.sub(r"\s+", " ", text).strip()
    if len(flat) <= QUOTE_CHARS:
        return flat
    return flat[:QUOTE_CHARS].rsplit(" ", 1)[0] + " …"
