"""Hybrid search: BM25 and vector candidates of active versions, fused by reciprocal rank.

One request = at most one query embedding (off the event loop) and one read-only transaction:
keyword candidates (BM25, docs/decisions/0220), vector candidates, then the shown hits, which
re-check tenant and activity. Fusion is weighted reciprocal-rank fusion (ADR 0105, tuned in ADR
0222): a result's score is the sum of weight / (RRF_K + rank) over the lists it is in, so
neither list's raw scores (BM25, cosine distance) need calibrating against the other. By
default results are documents (``group=document``): each document is ranked by its rank in
each list, shown by its best chunk, with its other matching chunks nested.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from psycopg import AsyncCursor
from psycopg.rows import DictRow, tuple_row

from gateway.search.embedding import QueryEmbedder, model_loader
from shared import db, errors
from shared.settings import GatewaySettings

Q = db.load_queries(Path(__file__).with_name("queries.sql"))

MODES = ("hybrid", "text", "vector")
GROUPS = ("document", "chunk")
MAX_QUERY_CHARS = 500
MAX_K = 50
MAX_DOC_IDS = 20
# Weighted reciprocal-rank fusion, tuned on one collection and checked on another (ADR 0222).
RRF_K = 20
TEXT_WEIGHT = 0.5
VECTOR_WEIGHT = 1.0
# A document hit nests at most this many of its other matching chunks.
MAX_NESTED = 3
# Each list contributes this many candidates to the fusion, whatever k is: a fixed depth makes
# the fused order independent of k, so the first n hits of a k = 50 page are those of k = n
# (issue 35; ADR 0310). 100 is what the default request (k = 10 documents) read before; a chunk
# ranked below it would add less than 1/(20+100) to any score. A request for more documents
# than the two lists' chunks hold gets fewer (k = 50 documents over documents of many chunks).
CANDIDATE_DEPTH = 100
# pgvector's HNSW candidate list: the pool size, at least 100, at most pgvector's maximum of
# 1000. At 40 (pgvector's default) the halfvec quality test's top 10 fell to 0.987 of the exact
# fp32 neighbours; real embeddings walk 100 in about a millisecond (ADR 0158). Iterative scans (queries.sql: search_settings) make up for the rows the filters
# drop, so no headroom above the pool is needed; each step up costs time (ADR 0158).
MIN_EF_SEARCH, MAX_EF_SEARCH = 100, 1000
# Highlight markers ts_headline puts around matches (queries.sql strips them from the text).
_START, _STOP = "\ue000", "\ue001"


# ── errors: each bound a client can break has its own code (400) ───────────────────────────
class InvalidSearch(errors.InvalidRequest):
    """The search request is malformed; check q, k, mode and the filters."""

    code = "invalid_search"


class EmptyQuery(InvalidSearch):
    """Type something to search for: q is empty."""

    code = "query_empty"


class QueryTooLong(InvalidSearch):
    """The query is longer than 500 characters; shorten it."""

    code = "query_too_long"


class InvalidK(InvalidSearch):
    """k must be a whole number from 1 to 50."""

    code = "invalid_k"


class InvalidMode(InvalidSearch):
    """mode must be hybrid, text or vector."""

    code = "invalid_mode"


class InvalidGroup(InvalidSearch):
    """group must be chunk or document."""

    code = "invalid_group"


class InvalidFilter(InvalidSearch):
    """A filter is out of bounds: at most 20 doc_id, a known type, uploaded_after before
    uploaded_before."""

    code = "invalid_filter"


class SearchDisabled(errors.NotFound):
    """Search is turned off in this deployment (SEARCH_ENABLED=false); ask an operator."""

    code = "search_disabled"


class SearchUnavailable(errors.ServiceUnavailable):
    """The query embedding model could not be loaded; use mode=text, and tell an operator."""

    code = "search_unavailable"


# ── request and result ──────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Filters:
    doc_ids: tuple[UUID, ...] = ()
    source_id: UUID | None = None
    file_type: str | None = None
    uploaded_after: datetime | None = None
    uploaded_before: datetime | None = None

    def params(self) -> dict[str, Any]:
        return {"doc_ids": list(self.doc_ids) or None, "source_id": self.source_id,
                "file_type": self.file_type, "after": self.uploaded_after,
                "before": self.uploaded_before}


@dataclass(frozen=True)
class SearchRequest:
    q: str
    k: int = 10
    mode: str = "hybrid"
    group: str = "document"
    filters: Filters = field(default_factory=Filters)

    @property
    def pool_size(self) -> int:
        """Candidates per list: the same for every k and group, so pages never disagree."""
        return CANDIDATE_DEPTH

    @property
    def syntax(self) -> bool:
        return typed_syntax(self.q)


# What search syntax looks like: a quote, a word with a leading minus, or OR in capitals
# (a lowercase "or" in a question is a word, not an operator).
_SYNTAX = re.compile(r'"|(?:^|\s)-\w|\sOR\s')


def typed_syntax(q: str) -> bool:
    """Whether the user typed search syntax, which keeps websearch's AND, phrase and NOT."""
    return bool(_SYNTAX.search(q))


def validate(q: str | None, *, k: int, mode: str, group: str, filters: Filters,
             allowed_types: Sequence[str]) -> SearchRequest:
    """A SearchRequest within every bound, or the InvalidSearch naming the broken one."""
    text = (q or "").strip()
    if not text:
        raise EmptyQuery()
    if len(text) > MAX_QUERY_CHARS:
        raise QueryTooLong()
    if "\x00" in text:
        raise InvalidSearch("q holds a NUL character; remove it.")
    if not 1 <= k <= MAX_K:
        raise InvalidK()
    if mode not in MODES:
        raise InvalidMode()
    if group not in GROUPS:
        raise InvalidGroup()
    if len(filters.doc_ids) > MAX_DOC_IDS:
        raise InvalidFilter(f"At most {MAX_DOC_IDS} doc_id filters are allowed; narrow them.")
    if filters.file_type is not None and filters.file_type not in allowed_types:
        raise InvalidFilter(f"type must be one of {', '.join(allowed_types)}.")
    # A window that ends before it starts is a window with nothing in it (ADR 0200).
    return SearchRequest(text, k, mode, group, filters)


@dataclass(frozen=True)
class Fused:
    chunk_id: UUID
    doc_id: UUID
    score: float
    text_rank: int | None  # the chunk's rank in the keyword list, from 1
    vector_rank: int | None
    text_score: float | None = None  # its BM25 score, where it is in the keyword list
    similarity: float | None = None  # its cosine similarity, where it is in the vector list
    # group=document: the document's other matching chunks, best first (at most MAX_NESTED).
    others: tuple[Fused, ...] = ()


@dataclass(frozen=True)
class Candidates:
    text: list[tuple[UUID, UUID]]  # (chunk_id, doc_id), best first
    vector: list[tuple[UUID, UUID]]
    distance: dict[UUID, float]  # cosine distance of each vector candidate
    text_score: dict[UUID, float] = field(default_factory=dict)  # BM25 of each text candidate


def fuse(text: Sequence[tuple[UUID, UUID]], vector: Sequence[tuple[UUID, UUID]], *,
         k: int, group: str = "chunk", text_score: dict[UUID, float] | None = None,
         distance: dict[UUID, float] | None = None) -> list[Fused]:
    """Weighted reciprocal-rank fusion of two ranked lists of (chunk_id, doc_id), ranks from 1.

    group="chunk" ranks chunks by their own ranks. group="document" ranks documents by their
    ranks among the documents of each list (a document's rank is that of its best chunk
    there), and shows each by its best chunk, nesting the others. Ties go to the better single
    rank, then to the id, so the order never depends on dict order. Only what is returned is
    built as Fused: ranking runs on plain tuples (a hybrid search fuses 200 candidates per
    request, and building them all took ~3.7 ms of the gateway's CPU, ADR 0313).
    """
    text_rank, vector_rank, docs = _ranks(text), _ranks(vector), {}
    for chunk_id, doc_id in (*text, *vector):
        docs[chunk_id] = doc_id
    order = sorted(docs, key=lambda c: _ranked(c, text_rank.get(c), vector_rank.get(c)))

    def built(chunk_id: UUID, score: float | None = None,
              others: tuple[Fused, ...] = ()) -> Fused:
        t, v = text_rank.get(chunk_id), vector_rank.get(chunk_id)
        d = distance.get(chunk_id) if distance else None
        return Fused(chunk_id, docs[chunk_id], _rrf(t, v) if score is None else score, t, v,
                     text_score.get(chunk_id) if text_score else None,
                     None if d is None else 1.0 - d, others)

    if group != "document":
        return [built(c) for c in order[:k]]
    doc_text, doc_vector = document_ranks(text), document_ranks(vector)
    by_doc: dict[UUID, list[UUID]] = {}
    for chunk_id in order:  # best first: a document's first chunk is its best
        by_doc.setdefault(docs[chunk_id], []).append(chunk_id)
    ranked = sorted(by_doc, key=lambda d: _ranked(d, doc_text.get(d), doc_vector.get(d)))
    return [built(best, _rrf(doc_text.get(d), doc_vector.get(d)),
                  tuple(built(o) for o in rest[:MAX_NESTED]))
            for d in ranked[:k] for best, *rest in (by_doc[d],)]


def _ranks(ranked: Sequence[tuple[UUID, UUID]]) -> dict[UUID, int]:
    ranks: dict[UUID, int] = {}
    for position, (chunk_id, _) in enumerate(ranked, start=1):
        ranks.setdefault(chunk_id, position)
    return ranks


def document_ranks(ranked: Sequence[tuple[UUID, UUID]]) -> dict[UUID, int]:
    """Each document's rank among the documents of a list: that of its best chunk there."""
    ranks: dict[UUID, int] = {}
    for _, doc_id in ranked:
        ranks.setdefault(doc_id, len(ranks) + 1)
    return ranks


def _ranked(ident: UUID, text_rank: int | None,
            vector_rank: int | None) -> tuple[float, int, UUID]:
    """The sort key of a candidate, from its ranks looked up once each."""
    return _key(_rrf(text_rank, vector_rank), text_rank, vector_rank, ident)


def _key(score: float, text_rank: int | None, vector_rank: int | None,
         ident: UUID) -> tuple[float, int, UUID]:
    """Best score first, then the better single rank, then the id: a total order. UUIDs
    compare as their 128-bit integers, the order of their fixed-width hex text: the order the
    ids' strings gave, without formatting 200 of them a request (~0.3 ms of gateway CPU)."""
    if text_rank is not None and (vector_rank is None or text_rank <= vector_rank):
        return -score, text_rank, ident
    assert vector_rank is not None  # every candidate is in one list at least
    return -score, vector_rank, ident


def _rrf(text_rank: int | None, vector_rank: int | None) -> float:
    score = 0.0
    if text_rank is not None:
        score += TEXT_WEIGHT / (RRF_K + text_rank)
    if vector_rank is not None:
        score += VECTOR_WEIGHT / (RRF_K + vector_rank)
    return score


def highlight(snippet: str) -> str:
    """ts_headline's text as safe HTML: the chunk's text escaped, its matches in <mark>."""
    return (html.escape(snippet, quote=False)
            .replace(_START, "<mark>").replace(_STOP, "</mark>"))


# ── the runtime of one gateway process ──────────────────────────────────────────────────────
class Runtime:
    """What search needs that lives as long as the process: the settings and the embedder."""

    def __init__(self, settings: GatewaySettings, embedder: QueryEmbedder | None = None) -> None:
        self.settings = settings
        # The workers' variant (ADR 0110: both share the model's space, so versions of either
        # are searched together), on the CPU threads SEARCH_EMBED_THREADS (ADR 0158).
        self.embedder = embedder or QueryEmbedder(settings.embedding_model, model_loader(
            variant=settings.embedding_variant, cache_dir=settings.embedding_cache_dir,
            threads=settings.search_embed_threads))

    def check_enabled(self) -> None:
        if not self.settings.search_enabled:
            raise SearchDisabled()

    async def query_vector(self, q: str) -> tuple[list[float], str]:
        """The query's vector and the name of the model that made it, as versions record it."""
        try:
            encoder = await self.embedder.encoder()
            return await self.embedder.embed(q), encoder.model_name
        except (OSError, ValueError, ImportError, RuntimeError) as exc:
            raise SearchUnavailable() from exc

    async def retrieve(self, conn: db.AsyncConn, *, tenant_id: UUID, request: SearchRequest,
                       query: tuple[list[float], str] | None,
                       exact: bool = False) -> tuple[Candidates, list[Fused]]:
        vector, model = query if query else (None, "")
        found = await candidates(conn, tenant_id=tenant_id, request=request, vector=vector,
                                 model=model, exact=exact)
        return found, fuse(found.text, found.vector, k=request.k, group=request.group,
                           text_score=found.text_score, distance=found.distance)


async def candidates(conn: db.AsyncConn, *, tenant_id: UUID, request: SearchRequest,
                     vector: list[float] | None, model: str, exact: bool = False) -> Candidates:
    """Both ranked candidate lists, read in the caller's transaction, in one round trip.
    ``exact``: the vector list is the true nearest chunks (vector_candidates_exact, every
    chunk of the tenant compared), not the HNSW walk's: what ask judges evidence on."""
    base = {"tenant_id": tenant_id, "n": request.pool_size, **request.filters.params()}
    ef_search = min(MAX_EF_SEARCH, max(MIN_EF_SEARCH, request.pool_size))
    async with conn.pipeline():  # the statements go together; the first fetch waits for all
        # First, as it sets what the next two are planned and run with (queries.sql).
        await conn.execute(Q["search_settings"], {"ef_search": str(ef_search)})
        text_cursor = near_cursor = None
        if request.mode in ("hybrid", "text"):
            text_cursor = conn.cursor(row_factory=tuple_row)
            await text_cursor.execute(Q["text_candidates"], {
                **base, "q": request.q, "syntax": request.syntax}, prepare=True)
        if request.mode in ("hybrid", "vector") and vector is not None:
            near_cursor = conn.cursor(row_factory=tuple_row)
            await near_cursor.execute(Q["vector_candidates_exact" if exact else
                                        "vector_candidates"], {
                **base, "vector": _literal(vector), "model": model}, prepare=True)
        await conn.execute(Q["search_settings_reset"])
        # Rows as tuples (chunk_id, doc_id, score or distance): 200 of them a hybrid request,
        # and a dict each cost more than the fusion that reads them.
        text_rows = await text_cursor.fetchall() if text_cursor else []
        near_rows = await near_cursor.fetchall() if near_cursor else []
    return Candidates(text=[(chunk_id, doc_id) for chunk_id, doc_id, _ in text_rows],
                      vector=[(chunk_id, doc_id) for chunk_id, doc_id, _ in near_rows],
                      distance={chunk_id: float(d) for chunk_id, _, d in near_rows},
                      text_score={chunk_id: float(score) for chunk_id, _, score in text_rows})


async def hits(conn: db.AsyncConn, *, tenant_id: UUID, q: str,
               fused: Sequence[Fused]) -> list[dict[str, Any]]:
    """The shown hits, in fused order; a chunk no longer active is dropped here."""
    return await _shown(await _read_hits(conn, tenant_id=tenant_id, q=q, fused=fused), fused)


async def _read_hits(conn: db.AsyncConn, *, tenant_id: UUID, q: str,
                     fused: Sequence[Fused]) -> AsyncCursor[DictRow] | None:
    """The hits statement, sent (or, in a pipeline, queued); None when nothing was fused."""
    if not fused:
        return None
    chunk_ids = [c.chunk_id for f in fused for c in (f, *f.others)]
    return await conn.execute(Q["hits"], {"tenant_id": tenant_id, "q": q,
                                          "syntax": typed_syntax(q), "chunk_ids": chunk_ids})


async def _shown(cursor: AsyncCursor[DictRow] | None, fused: Sequence[Fused], *,
                 nested: bool = False) -> list[dict[str, Any]]:
    if cursor is None:
        return []
    by_id = {r["chunk_id"]: r for r in await cursor.fetchall()}
    shown = []
    for f in fused:
        row = by_id.get(f.chunk_id)
        if row is None:
            continue
        hit = {"chunk_id": str(f.chunk_id), "doc_id": str(row["doc_id"]),
               "version": row["version_number"], "title": row["title"],
               "parent": _parent(row), **_chunk(row, f)}
        if nested:
            hit["other_chunks"] = [{"chunk_id": str(o.chunk_id), **_chunk(by_id[o.chunk_id], o)}
                                   for o in f.others if o.chunk_id in by_id]
        shown.append(hit)
    return shown


def _chunk(row: DictRow, f: Fused) -> dict[str, Any]:
    return {"chunk_index": row["ordinal"], "page": row["page"],
            "heading_path": list(row["heading_path"]), "snippet": highlight(row["snippet"]),
            "score": round(f.score, 6), "text_rank": f.text_rank, "vector_rank": f.vector_rank,
            "text_score": _rounded(f.text_score), "similarity": _rounded(f.similarity),
            "text": row["text"]}


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _parent(row: DictRow) -> dict[str, str | None] | None:
    """The e-mail an attachment's chunk came from, so a hit says where it was found."""
    if row["parent_doc_id"] is None:
        return None
    return {"doc_id": str(row["parent_doc_id"]), "title": row["parent_title"],
            "subject": row["message_subject"]}


async def search(pool: db.AsyncPool, runtime: Runtime, *, tenant_id: UUID,
                 request: SearchRequest) -> list[dict[str, Any]]:
    """The hits of ``request`` for the tenant, best first (without the chunks' full text)."""
    query = await runtime.query_vector(request.q) if request.mode != "text" else None
    # In a pipeline, BEGIN goes with the candidate queries, and COMMIT with the hits query: two
    # round trips in all, each one a wait for a core on a busy machine (ADR 0158).
    async with pool.connection() as conn, conn.pipeline():
        async with conn.transaction():
            _, fused = await runtime.retrieve(conn, tenant_id=tenant_id, request=request,
                                              query=query)
            cursor = await _read_hits(conn, tenant_id=tenant_id, q=request.q, fused=fused)
        shown = await _shown(cursor, fused, nested=request.group == "document")
    for hit in shown:
        del hit["text"]
        for other in hit.get("other_chunks", ()):
            del other["text"]
    return shown


def _literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
