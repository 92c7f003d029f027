"""HTTP layer of search and answers: parse, bound, call the service (gateway/search/service.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Literal
from uuid import UUID

from litestar import Request, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide
from litestar.params import JSONBody, Parameter, QueryParameter
from msgspec import Meta

from gateway import auth, openapi
from gateway.context import Ctx
from gateway.search import answer, service
from shared.settings import GatewaySettings


def provide(state: State) -> service.Runtime:
    runtime: service.Runtime = state.search
    return runtime


DEPENDENCIES = {"search": Provide(provide, sync_to_thread=False)}


def request_from(runtime: service.Runtime, *, q: str | None, k: int, mode: str, group: str,
                 doc_id: list[UUID] | None, source: UUID | None, file_type: str | None,
                 uploaded_after: datetime | None,
                 uploaded_before: datetime | None) -> service.SearchRequest:
    runtime.check_enabled()
    filters = service.Filters(tuple(doc_id or ()), source, file_type, uploaded_after,
                              uploaded_before)
    return service.validate(q, k=k, mode=mode, group=group, filters=filters,
                            allowed_types=runtime.settings.allowed_types)


# The codes these refusals had before /schema declared them (ADR 0200).
ERROR_CODES = {"q": {"required": "query_empty", "pattern": "query_empty",
                     "maxLength": "query_too_long"},
               "question": {"pattern": "query_empty", "maxLength": "query_too_long"},
               "k": "invalid_k", "mode": "invalid_mode", "group": "invalid_group",
               "type": "invalid_filter", "doc_id": {"maxLength": "invalid_filter"}}
K = Annotated[int, Parameter(ge=1, le=service.MAX_K, description="How many hits, 1 to 50.")]
# A document type as /schema names it: ALLOWED_TYPES' default (a narrower setting refuses more).
if TYPE_CHECKING:
    DocumentType = str
else:
    DocumentType = Literal[GatewaySettings.model_fields["allowed_types"].default]


@get("/v1/search", tags=["search"], dependencies=DEPENDENCIES,
     responses=openapi.errors(400, 404, 503), opt={"error_codes": ERROR_CODES})
async def search_chunks(
    request: Request, ctx: Ctx, search: NamedDependency[service.Runtime],
    q: Annotated[str, Parameter(pattern=openapi.NON_BLANK, max_length=service.MAX_QUERY_CHARS,
                                description="What to look for, at most 500 characters. Words "
                                            "are ranked by BM25, any of them matching; typed "
                                            "syntax (\"a phrase\", -word, OR) requires what it "
                                            "says.")],
    k: K = 10,
    mode: Annotated[Literal["hybrid", "text", "vector"],
                    Parameter(description="hybrid (default), text or vector.")] = "hybrid",
    group: Annotated[Literal["chunk", "document"],
                     Parameter(description="document (default): one hit per document, its best "
                                           "chunk, with its other matching chunks in "
                                           "`other_chunks`; chunk: one hit per chunk.")] = "document",
    doc_id: Annotated[list[UUID] | None, Parameter(
        max_items=service.MAX_DOC_IDS, description="Only these documents (up to 20).")] = None,
    source: Annotated[UUID | None, Parameter(description="Only documents of this S3 source.")] = None,
    file_type: Annotated[DocumentType | None, QueryParameter(
        name="type", description="Only this file type.")] = None,
    uploaded_after: Annotated[datetime | None, Parameter(description="Documents added at or after.")] = None,
    uploaded_before: Annotated[datetime | None, Parameter(
        description="Documents added before (a window that ends before it starts holds "
                    "none).")] = None,
) -> dict:
    """The caller's active documents (or chunks, `group=chunk`) that match `q`: by keywords
    (BM25), by vectors, or both fused by weighted reciprocal rank. Each hit names its document,
    version, chunk, page and `heading_path` (the headings above the chunk), with `snippet` as
    HTML (the text escaped, matches in `<mark>`), the fused `score` and the chunk's `text_rank`
    and `vector_rank` (null where it was not in that list); a document hit nests its other
    matching chunks in `other_chunks`, in the same shape. 400 codes:
    query_empty, query_too_long, invalid_k, invalid_mode, invalid_group, invalid_filter;
    404 search_disabled; 503 search_unavailable (the model could not be loaded)."""
    wanted = request_from(search, q=q, k=k, mode=mode, group=group, doc_id=doc_id,
                          source=source, file_type=file_type, uploaded_after=uploaded_after,
                          uploaded_before=uploaded_before)
    hits = await service.search(ctx.pool, search, tenant_id=auth.current(request).tenant_id,
                                request=wanted)
    return {"query": wanted.q, "mode": wanted.mode, "group": wanted.group, "hits": hits}


@dataclass
class AskBody:
    question: Annotated[str, Meta(pattern=openapi.NON_BLANK,
                                  max_length=service.MAX_QUERY_CHARS)]
    k: Annotated[int, Meta(ge=1, le=service.MAX_K)] = 8


@post("/v1/ask", tags=["search"], status_code=200, dependencies=DEPENDENCIES,
      responses=openapi.errors(400, 404, 503), opt={"error_codes": ERROR_CODES})
async def ask(data: JSONBody[AskBody], request: Request, ctx: Ctx,
              search: NamedDependency[service.Runtime]) -> dict:
    """An answer to `question` from the caller's active documents, citing the chunks it rests
    on (`citations`: chunk, document, version, page, heading path, quote), or `abstained: true`
    with "No evidence for this in your documents.", a `reason` (no_candidates, weak_evidence,
    unknown_words, names_not_found, question_not_covered, keywords_disagree,
    provider_no_evidence, cited_content_deactivated, nothing_quotable) and the `evidence`
    figures it was judged on (`missing_names`: the question's names and numbers the nearest
    evidence does not name), when no chunk stands out from the question's nearest neighbours or
    the documents share the question's words but not its subject. Quotes are verbatim spans
    of the cited chunks.
    Written by the configured LLM provider (`source: anthropic`) or quoted, sentence by
    sentence, from the best passages (`source: extractive`, also when the provider fails:
    `fallback` says why)."""
    search.check_enabled()
    wanted = service.validate(data.question, k=data.k, mode="hybrid", group="chunk",
                              filters=service.Filters(), allowed_types=search.settings.allowed_types)
    return await answer.ask(ctx.pool, search, tenant_id=auth.current(request).tenant_id,
                            request=wanted)


ROUTES = [search_chunks, ask]
