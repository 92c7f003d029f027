"""Search's pure parts: reciprocal-rank fusion, request bounds, snippets, citation parsing,
and the query model's one lazy load under concurrent first requests."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import uuid

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.search import provider, service
from gateway.search.embedding import QueryEmbedder

C = [uuid.UUID(int=i) for i in range(10)]
D = [uuid.UUID(int=100 + i) for i in range(10)]


@pytest.fixture
def plain_rrf(monkeypatch):
    """The textbook fusion (k = 60, equal weights), whatever the tuned constants are."""
    monkeypatch.setattr(service, "RRF_K", 60)
    monkeypatch.setattr(service, "TEXT_WEIGHT", 1.0)
    monkeypatch.setattr(service, "VECTOR_WEIGHT", 1.0)


def test_fusion_adds_reciprocal_ranks_and_reports_both(plain_rrf):
    text = [(C[1], D[1]), (C[2], D[2])]
    vector = [(C[2], D[2]), (C[3], D[3])]
    fused = service.fuse(text, vector, k=10)
    assert [f.chunk_id for f in fused] == [C[2], C[1], C[3]]
    top = fused[0]
    assert (top.text_rank, top.vector_rank) == (2, 1)
    assert top.score == pytest.approx(1 / 62 + 1 / 61)
    assert (fused[2].text_rank, fused[2].vector_rank) == (None, 2)


def test_fusion_group_document_keeps_the_best_chunk_of_each_document():
    text = [(C[1], D[1]), (C[2], D[1]), (C[3], D[2])]
    fused = service.fuse(text, [], k=10, group="document")
    assert [(f.chunk_id, f.doc_id) for f in fused] == [(C[1], D[1]), (C[3], D[2])]
    assert [o.chunk_id for o in fused[0].others] == [C[2]]
    assert fused[1].others == ()
    assert len(service.fuse(text, [], k=2)) == 2


def test_the_keyword_list_weighs_half_the_vector_list():
    text = [(C[1], D[1]), (C[2], D[2])]
    vector = [(C[2], D[2]), (C[3], D[3])]
    fused = service.fuse(text, vector, k=10)
    assert [f.chunk_id for f in fused] == [C[2], C[3], C[1]]
    assert fused[0].score == pytest.approx(0.5 / 22 + 1 / 21)


def test_documents_are_ranked_by_their_rank_among_documents_not_by_chunk_positions(plain_rrf):
    # D1 fills the top of the keyword list with three chunks; D2 is second there and first in
    # the vector list. By chunk ranks D2's text rank would be 4; among documents it is 2.
    text = [(C[1], D[1]), (C[2], D[1]), (C[3], D[1]), (C[4], D[2])]
    vector = [(C[4], D[2]), (C[1], D[1])]
    fused = service.fuse(text, vector, k=10, group="document")
    assert [f.doc_id for f in fused] == [D[1], D[2]]
    weights = service.TEXT_WEIGHT, service.VECTOR_WEIGHT
    assert fused[0].score == pytest.approx(weights[0] / (service.RRF_K + 1)
                                           + weights[1] / (service.RRF_K + 2))
    assert fused[1].score == pytest.approx(weights[0] / (service.RRF_K + 2)
                                           + weights[1] / (service.RRF_K + 1))
    assert [o.chunk_id for o in fused[0].others] == [C[2], C[3]]
    # The best chunk shown keeps its own ranks in each list.
    assert (fused[1].chunk_id, fused[1].text_rank, fused[1].vector_rank) == (C[4], 4, 1)


def test_nested_chunks_are_bounded():
    text = [(C[i], D[1]) for i in range(10)]
    (only,) = service.fuse(text, [], k=10, group="document")
    assert len(only.others) == service.MAX_NESTED


def test_scores_of_each_list_travel_with_the_fused_chunk():
    fused = service.fuse([(C[1], D[1])], [(C[1], D[1]), (C[2], D[2])], k=10,
                         text_score={C[1]: 7.5}, distance={C[1]: 0.25, C[2]: 0.5})
    assert (fused[0].text_score, fused[0].similarity) == (7.5, 0.75)
    assert (fused[1].text_score, fused[1].similarity) == (None, 0.5)


@pytest.mark.parametrize(("q", "typed"), [
    ('"exact phrase"', True), ("dragonfly -wasp", True), ("-wasp dragonfly", True),
    ("dragonflies OR damselflies", True),
    ("is coffee good or bad for you", False), ("COVID-19 vaccine side effects", False),
    ("what is e-mail", False), ("how fast do dragonflies fly?", False), ("ORCHIDS ORegon", False),
])
def test_search_syntax_is_what_people_type_for_it(q, typed):
    assert service.typed_syntax(q) is typed


@pytest.mark.parametrize(("kwargs", "code"), [
    ({"q": "  "}, "query_empty"), ({"q": "x" * 501}, "query_too_long"),
    ({"k": 0}, "invalid_k"), ({"k": 51}, "invalid_k"), ({"mode": "fuzzy"}, "invalid_mode"),
    ({"group": "page"}, "invalid_group"),
    ({"filters": service.Filters(doc_ids=tuple(C) * 3)}, "invalid_filter"),
    ({"filters": service.Filters(file_type="exe")}, "invalid_filter"),
])
def test_bounds_have_codes(kwargs, code):
    args = {"q": "dragonflies", "k": 10, "mode": "hybrid", "group": "chunk",
            "filters": service.Filters(), **kwargs}
    with pytest.raises(service.InvalidSearch) as err:
        service.validate(args.pop("q"), allowed_types=("md", "pdf"), **args)
    assert err.value.code == code


def test_snippet_is_escaped_html_with_marks():
    raw = "a <script>x</script> \ue000glacier\ue001 & co"
    assert service.highlight(raw) == "a &lt;script&gt;x&lt;/script&gt; <mark>glacier</mark> &amp; co"


def test_provider_citations_name_only_passages_sent():
    reply = provider.parse("Yes [2], see [9] and [2] and [1].", passage_count=3)
    assert reply.cited == [2, 1] and not reply.no_evidence
    assert provider.parse(" NO_EVIDENCE ", 3).no_evidence


def test_the_model_loads_once_off_the_loop_under_concurrent_first_queries():
    loads: list[str] = []

    class Encoder:
        model_name, dim = "m", 2

        def encode(self, texts):
            return np.ones((len(texts), 2), dtype=np.float32)

    def load(model: str) -> Encoder:
        loads.append(threading.current_thread().name)
        time.sleep(0.3)  # a slow load: every concurrent first query arrives during it
        return Encoder()

    async def scenario():
        embedder = QueryEmbedder("m", loader=load)
        ticks = 0

        async def ticker():  # the event loop keeps running while the model loads
            nonlocal ticks
            while not embedder.loaded:
                ticks += 1
                await asyncio.sleep(0.01)

        results = await asyncio.gather(ticker(), *(embedder.embed(f"q{i}") for i in range(8)))
        return results[1:], ticks

    vectors, ticks = asyncio.run(scenario())
    assert len(loads) == 1 and loads[0] != threading.main_thread().name
    assert ticks > 5 and all(v == [1.0, 1.0] for v in vectors)


def test_the_loaded_model_is_frozen_out_of_full_garbage_collections():
    # A model loads after start-up froze the gateway's objects (ADR 0163, 0288): its own
    # objects must be frozen too, or every full collection walks them while intake waits.
    class Encoder:
        model_name, dim = "m", 2

        def __init__(self) -> None:
            self.weights = [[i] for i in range(20_000)]  # objects the collector tracks

    async def scenario() -> int:
        embedder = QueryEmbedder("m", loader=lambda model: Encoder())
        before = gc.get_freeze_count()
        await embedder.encoder()
        return gc.get_freeze_count() - before

    try:
        assert asyncio.run(scenario()) >= 20_000
    finally:
        gc.unfreeze()  # the rest of the test process collects as before


def test_concurrent_queries_share_forward_passes_on_one_thread_each_getting_its_own_vector():
    passes: list[tuple[str, list[str]]] = []
    first_pass_started, release = threading.Event(), threading.Event()

    class Encoder:
        model_name, dim = "m", 2

        def encode(self, texts):
            passes.append((threading.current_thread().name, list(texts)))
            if len(passes) == 1:  # the first pass runs while every other query arrives
                first_pass_started.set()
                release.wait(5)
            return np.array([[float(t[1:]), 1.0] for t in texts], dtype=np.float32)

    async def scenario():
        embedder = QueryEmbedder("m", loader=lambda model: Encoder())
        first = asyncio.create_task(embedder.embed("q0"))
        await asyncio.to_thread(first_pass_started.wait, 5)
        rest = [asyncio.create_task(embedder.embed(f"q{i}")) for i in range(1, 9)]
        while len(embedder._pending) < 8:  # all eight queue up behind the running pass
            await asyncio.sleep(0.001)
        release.set()
        return await asyncio.gather(first, *rest)

    vectors = asyncio.run(scenario())
    assert vectors == [[float(i), 1.0] for i in range(9)]  # each query its own vector
    assert [texts for _, texts in passes] == [["q0"], [f"q{i}" for i in range(1, 9)]]
    assert {name for name, _ in passes} != {threading.main_thread().name}
    assert len({name for name, _ in passes}) == 1  # one thread runs every pass


def test_a_failed_pass_fails_each_of_its_queries_and_the_next_pass_still_runs():
    calls = 0

    class Encoder:
        model_name, dim = "m", 2

        def encode(self, texts):
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("the model broke")
            return np.ones((len(texts), 2), dtype=np.float32)

    async def scenario():
        embedder = QueryEmbedder("m", loader=lambda model: Encoder())
        failed = await asyncio.gather(embedder.embed("a"), return_exceptions=True)
        return failed, await embedder.embed("b")

    failed, vector = asyncio.run(scenario())
    assert isinstance(failed[0], RuntimeError) and vector == [1.0, 1.0]


def test_the_gateway_embeds_queries_with_the_workers_variant(monkeypatch, tmp_path):
    from shared.embedding import model as embed
    from shared.settings import GatewaySettings

    asked: list[dict] = []

    class Encoder:
        model_name, dim = "m", 2

        def load(self):
            pass

        def encode(self, texts):
            return np.ones((len(texts), 2), dtype=np.float32)

    def load_embedder(model, **options):
        asked.append({"model": model, **options})
        return Encoder()

    monkeypatch.setattr(embed, "load_embedder", load_embedder)
    settings = GatewaySettings(jwt_secret="j" * 40, metrics_token="m" * 30,
                               embedding_variant="onnx-int8", embedding_cache_dir=str(tmp_path),
                               search_embed_threads=1)
    runtime = service.Runtime(settings)
    assert asyncio.run(runtime.query_vector("q")) == ([1.0, 1.0], "m")
    assert asked == [{"model": settings.embedding_model, "batch_tokens": 32 * 256,
                      "variant": "onnx-int8", "cache_dir": str(tmp_path), "threads": 1}]


def test_a_repeated_query_comes_from_the_cache_and_a_waiting_one_is_not_embedded_twice(
        monkeypatch):
    from gateway.search import embedding

    passes: list[list[str]] = []

    class Encoder:
        model_name, dim = "m", 2

        def encode(self, texts):
            passes.append(list(texts))
            return np.array([[float(len(t)), 1.0] for t in texts], dtype=np.float32)

    monkeypatch.setattr(embedding, "CACHE_SIZE", 3)

    async def scenario():
        embedder = QueryEmbedder("m", loader=lambda model: Encoder())
        # Eight clients asking two questions at once: one pass, each text once.
        first = await asyncio.gather(*(embedder.embed("ab" if i % 2 else "abc")
                                       for i in range(8)))
        again = await embedder.embed("abc")  # from the cache: no pass
        for text in ("w", "x", "y"):  # three newer texts push "abc" and "ab" out (size 3)
            await embedder.embed(text)
        await embedder.embed("abc")
        return first, again, embedder

    first, again, embedder = asyncio.run(scenario())
    assert first == [[3.0, 1.0], [2.0, 1.0]] * 4 and again == [3.0, 1.0]
    assert passes[0] == ["abc", "ab"]  # one pass, each text once
    assert ["abc"] in passes[1:] and sum(p.count("abc") for p in passes) == 2
    assert len(embedder._cache) == 3 and embedder.hits == 7


def _reference_fuse(text, vector, k, group):
    """Fusion as ADR 0222 states it, written plainly: what service.fuse must return."""
    def ranks(ranked, key):
        out = {}
        for item in ranked:
            out.setdefault(key(item), len(out) + 1 if key(item) not in out else None)
        return out

    def rrf(t, v):
        return (service.TEXT_WEIGHT / (service.RRF_K + t) if t else 0.0) + \
            (service.VECTOR_WEIGHT / (service.RRF_K + v) if v else 0.0)

    tr = {c: i for i, (c, _) in reversed(list(enumerate(text, 1)))}
    vr = {c: i for i, (c, _) in reversed(list(enumerate(vector, 1)))}
    doc = dict((*text, *vector))
    chunks = sorted(doc, key=lambda c: (-rrf(tr.get(c), vr.get(c)),
                                        min(r for r in (tr.get(c), vr.get(c)) if r), str(c)))
    if group == "chunk":
        return [(c, None) for c in chunks[:k]]
    dt, dv = ranks([d for _, d in text], lambda d: d), ranks([d for _, d in vector], lambda d: d)
    docs = sorted({doc[c] for c in chunks}, key=lambda d: (
        -rrf(dt.get(d), dv.get(d)), min(r for r in (dt.get(d), dv.get(d)) if r), str(d)))
    return [(next(c for c in chunks if doc[c] == d),
             [c for c in chunks if doc[c] == d][1:1 + service.MAX_NESTED]) for d in docs[:k]]


_pairs = st.lists(st.tuples(st.sampled_from(C), st.sampled_from(D[:4])), max_size=12)


@given(_pairs, _pairs, st.integers(1, 12), st.sampled_from(["chunk", "document"]))
def test_fusion_is_the_plain_rule_whatever_the_lists(text, vector, k, group):
    # One document per chunk, as the database has it.
    owner = {c: d for c, d in (*text, *vector)}
    text = [(c, owner[c]) for c, _ in text]
    vector = [(c, owner[c]) for c, _ in vector]
    fused = service.fuse(text, vector, k=k, group=group)
    expected = _reference_fuse(text, vector, k, group)
    assert [f.chunk_id for f in fused] == [c for c, _ in expected]
    if group == "document":
        assert [[o.chunk_id for o in f.others] for f in fused] == [o for _, o in expected]
