"""Hybrid search: full-text and vector candidates of active versions, fused by reciprocal rank.

One request = at most one query embedding (off the event loop) and one read-only transaction:
text candidates, vector candidates, then the shown hits, which re-check tenant and activity.
Fusion is reciprocal-rank fusion with k = 60 (docs/decisions/0105): a chunk's score is the sum
of 1 / (60 + rank) over the lists it is in, so neither list's raw scores (ts_rank_cd,
cosine distance) need calibrating against the other.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from psycopg import AsyncCursor
from psycopg.rows import DictRow

from gateway.search.embedding import QueryEmbedder, worker_model_loader
from shared import db, errors
from shared.settings import GatewaySettings

Q = db.load_queries(Path(__file__).with_name("queries.sql"))

MODES = ("hybrid", "text", "vector")
GROUPS = ("chunk", "document")
RRF_K = 60
MAX_QUERY_CHARS = 500
MAX_K = 50
MAX_DOC_IDS = 20
# Each list contributes this many candidates to the fusion: a chunk ranked below them would
# add less than 1/(60+200) to any score, below what separates the top k.
MIN_POOL, MAX_POOL = 40, 200
# pgvector's HNSW candidate list: the pool size, at least 100, at most pgvector's maximum of
# 1000. At 40 (pgvector's default) the halfvec quality test's top 10 fell to 0.987 of the exact
# fp32 neighbours; real embeddings walk 100 in about a millisecond (ADR 0158). Iterative scans (queries.sql: hnsw_scan) make up for the rows the filters
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
    group: str = "chunk"
    filters: Filters = field(default_factory=Filters)

    @property
    def pool_size(self) -> int:
        # Grouping keeps one chunk per document, so it needs more candidates to fill k.
        want = self.k * (10 if self.group == "document" else 4)
        return min(MAX_POOL, max(MIN_POOL, want))


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
    after, before = filters.uploaded_after, filters.uploaded_before
    if after and before and after >= before:
        raise InvalidFilter("uploaded_after must be earlier than uploaded_before.")
    return SearchRequest(text, k, mode, group, filters)


@dataclass(frozen=True)
class Fused:
    chunk_id: UUID
    doc_id: UUID
    score: float
    text_rank: int | None
    vector_rank: int | None


@dataclass(frozen=True)
class Candidates:
    text: list[tuple[UUID, UUID]]  # (chunk_id, doc_id), best first
    vector: list[tuple[UUID, UUID]]
    distance: dict[UUID, float]  # cosine distance of each vector candidate


def fuse(text: Sequence[tuple[UUID, UUID]], vector: Sequence[tuple[UUID, UUID]], *,
         k: int, group: str = "chunk") -> list[Fused]:
    """Reciprocal-rank fusion of two ranked lists of (chunk_id, doc_id), ranks from 1.

    group="document" keeps each document's best chunk only. Ties go to the chunk with the
    better single rank, then to the chunk id, so the order never depends on dict order.
    """
    docs: dict[UUID, UUID] = {}
    text_rank: dict[UUID, int] = {}
    vector_rank: dict[UUID, int] = {}
    for ranks, ranked in ((text_rank, text), (vector_rank, vector)):
        for position, (chunk_id, doc_id) in enumerate(ranked, start=1):
            ranks.setdefault(chunk_id, position)
            docs[chunk_id] = doc_id
    fused = [Fused(chunk_id, doc_id, _rrf(text_rank.get(chunk_id), vector_rank.get(chunk_id)),
                   text_rank.get(chunk_id), vector_rank.get(chunk_id))
             for chunk_id, doc_id in docs.items()]
    fused.sort(key=lambda f: (-f.score, min(r for r in (f.text_rank, f.vector_rank) if r),
                              str(f.chunk_id)))
    if group == "document":
        best: dict[UUID, Fused] = {}
        for f in fused:  # already best first: the first chunk seen of a document is its best
            best.setdefault(f.doc_id, f)
        fused = list(best.values())
    return fused[:k]


def _rrf(*ranks: int | None) -> float:
    return sum(1.0 / (RRF_K + r) for r in ranks if r is not None)


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
        self.embedder = embedder or QueryEmbedder(settings.embedding_model, worker_model_loader(
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
                       query: tuple[list[float], str] | None) -> tuple[Candidates, list[Fused]]:
        vector, model = query if query else (None, "")
        found = await candidates(conn, tenant_id=tenant_id, request=request, vector=vector,
                                 model=model)
        return found, fuse(found.text, found.vector, k=request.k, group=request.group)


async def candidates(conn: db.AsyncConn, *, tenant_id: UUID, request: SearchRequest,
                     vector: list[float] | None, model: str) -> Candidates:
    """Both ranked candidate lists, read in the caller's transaction, in one round trip."""
    base = {"tenant_id": tenant_id, "n": request.pool_size, **request.filters.params()}
    # prepare=False: each execution is planned for its own parameters. A prepared statement goes
    # generic after a few runs on a connection, and the generic plan of these "NULL = no
    # filter" shapes scans every chunk of the tenant instead of the GIN or HNSW index (ADR 0158).
    async with conn.pipeline():  # the statements go together; the first fetch waits for all
        text_cursor = near_cursor = None
        if request.mode in ("hybrid", "text"):
            text_cursor = await conn.execute(Q["text_candidates"], {**base, "q": request.q},
                                             prepare=False)
        if request.mode in ("hybrid", "vector") and vector is not None:
            ef_search = min(MAX_EF_SEARCH, max(MIN_EF_SEARCH, request.pool_size))
            await conn.execute(Q["hnsw_scan"], {"ef_search": str(ef_search)})
            near_cursor = await conn.execute(Q["vector_candidates"], {
                **base, "vector": _literal(vector), "model": model}, prepare=False)
        text_rows = await text_cursor.fetchall() if text_cursor else []
        near_rows = await near_cursor.fetchall() if near_cursor else []
    return Candidates(text=[(r["chunk_id"], r["doc_id"]) for r in text_rows],
                      vector=[(r["chunk_id"], r["doc_id"]) for r in near_rows],
                      distance={r["chunk_id"]: float(r["distance"]) for r in near_rows})


async def hits(conn: db.AsyncConn, *, tenant_id: UUID, q: str,
               fused: Sequence[Fused]) -> list[dict[str, Any]]:
    """The shown hits, in fused order; a chunk no longer active is dropped here."""
    return await _shown(await _read_hits(conn, tenant_id=tenant_id, q=q, fused=fused), fused)


async def _read_hits(conn: db.AsyncConn, *, tenant_id: UUID, q: str,
                     fused: Sequence[Fused]) -> AsyncCursor[DictRow] | None:
    """The hits statement, sent (or, in a pipeline, queued); None when nothing was fused."""
    if not fused:
        return None
    return await conn.execute(Q["hits"], {
        "tenant_id": tenant_id, "q": q, "chunk_ids": [f.chunk_id for f in fused]})


async def _shown(cursor: AsyncCursor[DictRow] | None, fused: Sequence[Fused]) -> list[dict[str, Any]]:
    if cursor is None:
        return []
    by_id = {r["chunk_id"]: r for r in await cursor.fetchall()}
    shown = []
    for f in fused:
        row = by_id.get(f.chunk_id)
        if row is None:
            continue
        shown.append({
            "chunk_id": str(f.chunk_id), "doc_id": str(row["doc_id"]),
            "version": row["version_number"], "chunk_index": row["ordinal"],
            "page": row["page"], "title": row["title"], "parent": _parent(row),
            "snippet": highlight(row["snippet"]),
            "score": round(f.score, 6), "text_rank": f.text_rank, "vector_rank": f.vector_rank,
            "text": row["text"]})
    return shown


def _parent(row: dict[str, Any]) -> dict[str, str | None] | None:
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
        shown = await _shown(cursor, fused)
    for hit in shown:
        del hit["text"]
    return shown


def _literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
