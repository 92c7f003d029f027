"""Search and cited answers over documents a real worker ingested (issue 15 §1–2).

One module-wide world (built once: the worker and the gateway each load the embedding model,
which is the expensive part): two tenants, documents uploaded through the gateway and
processed by a real worker, one of them superseded by a second version. The gateway without a
provider key answers extractively; a second gateway talks to a local server that speaks the
Anthropic Messages API (tests/support/messages_api.py). The last test deactivates a document.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest

from gateway.search import evidence
from shared import aws, db, queue
from tests.conftest import OUTPUT, TEST_PASSWORD, Tenants, User
from tests.integration.test_upload import upload
from tests.integration.test_upload_versions import new_version
from tests.support import browser, documents, stack
from tests.support.messages_api import MessagesApi
from tests.support.stack import wait_until

pytestmark = pytest.mark.slow

PARAPHRASED = "These insects reach 50 km/h when they chase prey above the pond."
DOCS = {
    "odonata.md": f"# Odonata notes\n\n{PARAPHRASED}\n",
    "glacier.md": "# Station\n\nThe glacier monitoring station reports ice thickness each morning.\n",
    "turbine.md": "# Inspection\n\nThe quarterly turbine inspection found a cracked blade on unit seven.\n",
    # A heading, a caption and an author line that match the question better than the answer.
    "lichen.md": ("# Lichen cover and altitude\n\nFigure 2: Lichen cover by altitude.\n\n"
                  "Corresponding author: lichen cover and altitude lab, Ana Lopez.\n\n"
                  "Our survey found that lichen cover doubles with every 300 metres climbed.\n"),
    # Several chunks that all say "glacier": group=document must keep only the best one.
    "glacier-log.md": "".join(
        f"# Log {i}\n\nGlacier melt log entry {i}. {documents.prose(230, seed=10 + i)}\n\n"
        for i in range(3)),
}
SOURDOUGH_V1 = b"# Bread\n\nOur sourdough starter is fed with rye flour and warm water.\n"
SOURDOUGH_V2 = b"# Bread\n\nOur sourdough starter is now fed with spelt flour only.\n"
GLOBEX = b"# Contract\n\nThe glacier survey contract with Globex pays nine thousand euros.\n"
HIT_FIELDS = {"doc_id", "version", "chunk_index", "page", "title", "snippet", "score",
              "text_rank", "vector_rank", "text_score", "similarity", "heading_path"}


@dataclass
class World:
    url: str
    env: dict[str, str]
    acme: User
    globex: User
    docs: dict[str, str]  # name -> doc_id (acme)
    gateway: stack.Process
    provider_gateway: stack.Process
    messages: MessagesApi

    def conn(self) -> psycopg.Connection:
        return db.connect(self.url, autocommit=True)


def _process_queued(conn, env, out_dir, name):
    wait_until(lambda: conn.execute("SELECT count(*) AS n FROM job_outbox WHERE published_at "
                                    "IS NULL").fetchone()["n"] == 0,
               timeout=30, message="every job published")
    worker = stack.start_worker(env, out_dir, name=name, once=True)
    assert worker.proc.wait(600) == 0, worker.logs()[-3000:]


@pytest.fixture(scope="module")
def world(pg, moto, tmp_path_factory) -> Iterator[World]:
    out_dir = OUTPUT / "tests_e2e_test_search_world"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg.url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "ingest_template"')
    url = pg.url(name)
    sqs = aws.client("sqs", endpoint_url=moto.url, region="us-east-1")
    queue_url, dlq_url = queue.ensure_queues(sqs, f"q-{uuid.uuid4().hex[:10]}",
                                             visibility_timeout_s=30)
    tmp = tmp_path_factory.mktemp("search")
    env = {
        "DATABASE_URL": url, "AWS_ENDPOINT_URL": moto.url, "SQS_QUEUE_URL": queue_url,
        "SQS_DLQ_URL": dlq_url, "UPLOAD_STORE_URI": (tmp / "uploads").as_uri(),
        "ARTIFACT_STORE_URI": (tmp / "artifacts").as_uri(), "JWT_SECRET": stack.TEST_JWT_SECRET,
        "METRICS_TOKEN": "test-metrics-token-" + "m" * 20, "DEV_MODE": "false",
        "OUTBOX_POLL_S": "0.5", "OUTBOX_MAX_BACKOFF_S": "1", "LOG_LEVEL": "INFO",
        **stack.MOTO_ENV, **stack.OFFLINE_ENV,
    }
    with db.connect(url, autocommit=True) as conn, MessagesApi() as messages:
        tenants = Tenants(conn)
        acme, globex = tenants.user("acme", role="admin"), tenants.user("globex", role="user")
        gateway = stack.start_gateway(env, out_dir)
        provider_gateway = stack.start_gateway({
            **env, "ANTHROPIC_API_KEY": "test-provider-key", "ANTHROPIC_MODEL": "claude-test",
            "ANTHROPIC_BASE_URL": messages.url, "ANTHROPIC_MAX_ATTEMPTS": "2",
            "ANTHROPIC_TIMEOUT_S": "10"}, out_dir, name="gateway-provider")
        try:
            docs = {}
            with gateway.client(acme.token) as client:
                docs["sourdough.md"] = upload(client, "sourdough.md", SOURDOUGH_V1).json()["doc_id"]
                _process_queued(conn, env, out_dir, "worker-1")
                assert new_version(client, docs["sourdough.md"], SOURDOUGH_V2,
                                   name="sourdough.md").status_code == 202
                for doc, text in DOCS.items():
                    docs[doc] = upload(client, doc, text.encode()).json()["doc_id"]
            with gateway.client(globex.token) as client:
                assert upload(client, "globex.md", GLOBEX).status_code == 202
            _process_queued(conn, env, out_dir, "worker-2")
            failed = conn.execute("SELECT count(*) AS n FROM ingestion_runs WHERE status <> "
                                  "'succeeded'").fetchone()["n"]
            assert failed == 0
            # Both gateways load the query model as they start; the tests search by meaning.
            stack.wait_ready(gateway)
            stack.wait_ready(provider_gateway)
            yield World(url, env, acme, globex, docs, gateway, provider_gateway, messages)
        finally:
            gateway.stop()
            provider_gateway.stop()
    with psycopg.connect(pg.url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _search(world: World, user: User, **params):
    with world.gateway.client(user.token) as client:
        return client.get("/v1/search", params=params)


def _hits(world: World, user: User, **params) -> list[dict]:
    response = _search(world, user, **params)
    assert response.status_code == 200, response.text
    return response.json()["hits"]


def _titles(hits) -> list[str]:
    return [h["title"] for h in hits]


def _active_chunk_ids(world: World, tenant_id) -> set[str]:
    with world.conn() as conn:
        rows = conn.execute(
            "SELECT c.chunk_id FROM chunks c JOIN document_versions v USING (doc_version_id) "
            "WHERE v.is_active AND c.tenant_id = %s AND v.tenant_id = %s",
            (tenant_id, tenant_id)).fetchall()
    return {str(r["chunk_id"]) for r in rows}


# ── search ──────────────────────────────────────────────────────────────────────────────────
def test_text_finds_a_word_and_vector_finds_a_paraphrase_sharing_none(world):
    # Text: a word the document contains, highlighted in the snippet.
    hits = _hits(world, world.acme, q="monitoring", mode="text")
    assert _titles(hits) == ["glacier.md"]
    assert "<mark>monitoring</mark>" in hits[0]["snippet"]
    assert hits[0]["text_rank"] == 1 and hits[0]["vector_rank"] is None

    # Vector: the question shares no word with the chunk, so text finds nothing…
    question = "how fast do dragonflies fly"
    assert not set(re.findall(r"\w+", question.lower())) & set(
        re.findall(r"\w+", PARAPHRASED.lower()))
    assert "odonata.md" not in _titles(_hits(world, world.acme, q=question, mode="text"))
    # …and the meaning finds it first.
    hits = _hits(world, world.acme, q=question, mode="vector", k=3)
    assert hits[0]["title"] == "odonata.md" and hits[0]["vector_rank"] == 1
    assert hits[0]["doc_id"] == world.docs["odonata.md"]


def test_hybrid_hits_carry_both_ranks_and_the_fused_score(world):
    from gateway.search import service

    hits = _hits(world, world.acme, q="glacier monitoring station", k=5, group="chunk")
    assert hits and all(set(h) >= HIT_FIELDS for h in hits)
    top = hits[0]
    assert top["title"] == "glacier.md" and top["text_rank"] == 1 and top["vector_rank"]
    assert top["score"] == pytest.approx(
        service.TEXT_WEIGHT / (service.RRF_K + 1)
        + service.VECTOR_WEIGHT / (service.RRF_K + top["vector_rank"]), abs=1e-6)
    assert top["text_score"] > 0 and 0 < top["similarity"] <= 1
    assert top["heading_path"] == ["Station"]
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    assert top["version"] == 1 and top["chunk_index"] == 0


def test_results_are_documents_by_default_with_their_other_chunks_nested(world):
    chunks = _hits(world, world.acme, q="glacier", mode="text", k=20, group="chunk")
    assert _titles(chunks).count("glacier-log.md") >= 2
    assert all("other_chunks" not in h for h in chunks)
    grouped = _hits(world, world.acme, q="glacier", mode="text", k=20)
    assert sorted(_titles(grouped)) == ["glacier-log.md", "glacier.md"]
    log_chunks = [h for h in chunks if h["title"] == "glacier-log.md"]
    log = next(h for h in grouped if h["title"] == "glacier-log.md")
    assert log["chunk_index"] == log_chunks[0]["chunk_index"]
    assert [o["chunk_index"] for o in log["other_chunks"]] == \
        [h["chunk_index"] for h in log_chunks[1:]]
    assert all(set(o) >= HIT_FIELDS - {"doc_id", "version", "title"} for o in log["other_chunks"])
    # Each chunk of the log knows the heading it sits under.
    assert {tuple(h["heading_path"]) for h in log_chunks} <= {(f"Log {i}",) for i in range(3)}


def test_filters_narrow_to_documents_and_types(world):
    only = _hits(world, world.acme, q="glacier", mode="text",
                 doc_id=[world.docs["glacier-log.md"]], group="document")
    assert _titles(only) == ["glacier-log.md"]
    assert _hits(world, world.acme, q="glacier", mode="text", type="pdf") == []
    assert _hits(world, world.acme, q="glacier", mode="text",
                 uploaded_before="2000-01-01T00:00:00Z") == []


def test_tenants_never_see_each_other(world):
    for mode in ("text", "vector", "hybrid"):
        acme = _hits(world, world.acme, q="glacier survey contract euros", mode=mode, k=50)
        assert "globex.md" not in _titles(acme), mode
        globex = _hits(world, world.globex, q="glacier survey contract euros", mode=mode, k=50)
        assert set(_titles(globex)) == {"globex.md"}, mode
    # Naming another tenant's document as a filter finds nothing either.
    with world.conn() as conn:
        theirs = conn.execute("SELECT doc_id FROM documents WHERE tenant_id = %s",
                              (world.globex.tenant_id,)).fetchone()["doc_id"]
    assert _hits(world, world.acme, q="glacier", doc_id=[str(theirs)]) == []


def test_a_superseded_version_is_never_found(world):
    # "rye" is only in version 1: no word match, and in hybrid only version 2 by meaning.
    assert "sourdough.md" not in _titles(_hits(world, world.acme, q="rye", mode="text"))
    hybrid = [h for h in _hits(world, world.acme, q="rye", k=50) if h["title"] == "sourdough.md"]
    assert all(h["version"] == 2 and h["text_rank"] is None for h in hybrid)
    hits = _hits(world, world.acme, q="spelt", mode="text")
    assert _titles(hits) == ["sourdough.md"] and hits[0]["version"] == 2
    vector = _hits(world, world.acme, q="sourdough starter rye flour warm water",
                   mode="vector", k=50)
    assert {h["version"] for h in vector if h["title"] == "sourdough.md"} == {2}


@pytest.mark.parametrize(("params", "code"), [
    ({"q": ""}, "query_empty"), ({"q": "x" * 501}, "query_too_long"),
    ({"q": "a", "k": 0}, "invalid_k"), ({"q": "a", "k": 51}, "invalid_k"),
    ({"q": "a", "mode": "fuzzy"}, "invalid_mode"), ({"q": "a", "group": "page"}, "invalid_group"),
    ({"q": "a", "type": "exe"}, "invalid_filter"),
    ({"q": "a", "doc_id": [str(uuid.uuid4()) for _ in range(21)]}, "invalid_filter"),
    ({"q": "a", "doc_id": "not-a-uuid"}, "invalid_request"),
])
def test_bad_inputs_are_400_with_a_code(world, params, code):
    response = _search(world, world.acme, **params)
    assert response.status_code == 400, response.text
    assert response.json()["code"] == code and response.json()["detail"]


def test_an_upload_window_that_ends_before_it_starts_holds_nothing(world):
    # /schema cannot say "after before before": such a window is taken, and empty (ADR 0200)
    assert _hits(world, world.acme, q="glacier", uploaded_after="2025-02-01T00:00:00Z",
                 uploaded_before="2025-01-01T00:00:00Z") == []


def test_the_vector_query_walks_the_hnsw_index(world):
    # The query exactly as the gateway sends it, over a tenant of 6,000 chunks in 30 documents
    # (written in a transaction that is rolled back): the planner must walk the HNSW index in
    # distance order, not sort every row (a shape the index cannot serve would always sort).
    # A tenant with few chunks gets the exact plan (its btree index, then a sort), rightly; with
    # halfvec rows (half the pages to read) that is up to ~3,500 chunks (docs/decisions/0156).
    from gateway.search import service

    with world.conn() as conn:
        conn.execute("BEGIN")
        try:
            tenant = conn.execute("INSERT INTO tenants (name) VALUES ('plan') "
                                  "RETURNING tenant_id").fetchone()["tenant_id"]
            # Loaded without the index, then the migration's index built again from its own
            # definition: one build, not 6,000 graph inserts (ADR 0234); rolled back with the rest
            definition = conn.execute("SELECT pg_get_indexdef('idx_chunk_embeddings_hnsw'"
                                      "::regclass) AS d").fetchone()["d"]
            conn.execute("DROP INDEX idx_chunk_embeddings_hnsw")
            conn.execute(SYNTHETIC_CHUNKS, {"t": tenant, "n": 6000})
            conn.execute(definition)
            conn.execute("ANALYZE")
            plan = "\n".join(r["QUERY PLAN"] for r in conn.execute(
                "EXPLAIN " + service.Q["vector_candidates"], {
                    "tenant_id": tenant, "vector": "[" + ",".join(["0.05"] * 384) + "]",
                    "model": "m", "n": 40, "doc_ids": None, "source_id": None,
                    "file_type": None, "after": None, "before": None}).fetchall())
        finally:
            conn.execute("ROLLBACK")
    assert "Index Scan using idx_chunk_embeddings_hnsw" in plan, plan
    assert "Sort" not in plan, plan


SYNTHETIC_CHUNKS = """
WITH d AS (INSERT INTO documents (tenant_id, source_type, source_uri, title)
           SELECT %(t)s, 'md', 'upload://plan-' || g, 'plan' FROM generate_series(1, 30) g
           RETURNING doc_id),
v AS (INSERT INTO document_versions (tenant_id, doc_id, version_number, content_hash,
                                     embedding_model, embedding_dim)
      SELECT %(t)s, doc_id, 1, 'sha256:plan', 'm', 384 FROM d RETURNING doc_version_id),
c AS (INSERT INTO chunks (tenant_id, doc_version_id, ordinal, text, token_count, char_start,
                         char_end)
      SELECT %(t)s, v.doc_version_id, g, 'x', 1, 0, 1 FROM v, generate_series(1, %(n)s / 30) g
      RETURNING chunk_id, doc_version_id)
INSERT INTO chunk_embeddings (chunk_id, tenant_id, doc_version_id, embedding)
SELECT c.chunk_id, %(t)s, c.doc_version_id,
       (SELECT array_agg(random() - 0.5) FROM generate_series(1, 384)
        WHERE c.chunk_id IS NOT NULL)::halfvec
FROM c"""


# ── ask ─────────────────────────────────────────────────────────────────────────────────────
QUESTIONS = [
    "how fast do dragonflies fly", "what does the glacier station measure",
    "what flour feeds the sourdough starter", "what did the turbine inspection find",
    "glacier melt log", "who pays nine thousand euros", "what is the capital of France",
    "ice thickness", "cracked blade", "rye flour", "speed of insects", "Globex contract",
]


def _ask(gateway: stack.Process, user: User, question: str, **extra) -> dict:
    with gateway.client(user.token) as client:
        response = client.post("/v1/ask", json={"question": question, **extra})
    assert response.status_code == 200, response.text
    return response.json()


def test_every_citation_names_an_active_chunk_of_the_callers_tenant(world):
    cited = 0
    for user in (world.acme, world.globex):
        allowed = _active_chunk_ids(world, user.tenant_id)
        for question in QUESTIONS:
            answer = _ask(world.gateway, user, question)
            assert answer["source"] in ("extractive", "none")
            if answer["abstained"]:
                assert answer["citations"] == []
                assert answer["answer"] == "No evidence for this in your documents."
                continue
            for c in answer["citations"]:
                assert c["chunk_id"] in allowed, (user.email, question, c)
                assert f"[{c['n']}]" in answer["answer"]
                _assert_verbatim(world, c)
                cited += 1
    assert cited >= 10
    # A question nothing is about abstains rather than quoting noise.
    assert _ask(world.gateway, world.acme, "what is the capital of France")["abstained"]
    paraphrase = _ask(world.gateway, world.acme, "how fast do dragonflies fly")
    assert paraphrase["citations"][0]["doc_id"] == world.docs["odonata.md"]
    assert "50 km/h" in paraphrase["answer"]


def _assert_verbatim(world: World, citation: dict) -> None:
    """The quote is the cited chunk's stored text: one span, or spans joined by " … " (in
    order), none across a blank line (docs/decisions/0311)."""
    with world.conn() as conn:
        text = conn.execute("SELECT text FROM chunks WHERE chunk_id = %s",
                            (citation["chunk_id"],)).fetchone()["text"]
    at = 0
    for part in evidence.quote_parts(citation["quote"]):
        found = text.find(part, at)
        assert part and found >= 0 and "\n\n" not in part, (citation["quote"], text)
        at = found + len(part)


def test_an_answer_quotes_a_sentence_never_a_heading_caption_or_author_line(world):
    answer = _ask(world.gateway, world.acme, "how does lichen cover change with altitude")
    assert not answer["abstained"], answer
    first = answer["citations"][0]
    assert first["doc_id"] == world.docs["lichen.md"]
    assert first["quote"] == "Our survey found that lichen cover doubles with every 300 metres climbed."
    assert first["heading_path"] == ["Lichen cover and altitude"]
    for line in ("Figure 2", "Corresponding author", "# Lichen"):
        assert line not in answer["answer"]


def test_an_abstention_says_why(world):
    answer = _ask(world.gateway, world.acme, "what is the capital of France")
    assert answer["abstained"] and answer["reason"] == "weak_evidence"
    assert answer["evidence"]["best_similarity"] < 0.35


def test_ask_bounds(world):
    with world.gateway.client(world.acme.token) as client:
        assert client.post("/v1/ask", json={"question": ""}).json()["code"] == "query_empty"
        assert client.post("/v1/ask", json={"question": "a", "k": 99}).json()["code"] == "invalid_k"
        assert client.post("/v1/ask", json={}).status_code == 400


def test_the_provider_writes_the_answer_and_failures_fall_back(world):
    messages = world.messages
    before = len(messages.requests)
    answer = _ask(world.provider_gateway, world.acme, "how fast do dragonflies fly")
    assert answer["source"] == "anthropic" and not answer["abstained"]
    assert answer["citations"][0]["doc_id"] == world.docs["odonata.md"]
    for citation in answer["citations"]:  # the provider's citations quote verbatim too
        _assert_verbatim(world, citation)
    sent = messages.requests[before]
    assert sent["path"] == "/v1/messages"
    assert sent["headers"]["x-api-key"] == "test-provider-key"
    assert sent["headers"]["anthropic-version"] == "2023-06-01"
    assert sent["body"]["model"] == "claude-test"
    assert PARAPHRASED in sent["body"]["messages"][0]["content"]

    # A provider citing a passage it was never sent: that citation cannot stand.
    messages.reply = "It is 50 km/h [7]."
    answer = _ask(world.provider_gateway, world.acme, "how fast do dragonflies fly")
    assert answer["source"] == "extractive" and answer["fallback"] == "provider_cited_nothing"
    messages.reply = None

    # The provider failing: retried (ANTHROPIC_MAX_ATTEMPTS=2), then the extractive answer.
    messages.fail_status = 500
    before = len(messages.requests)
    try:
        answer = _ask(world.provider_gateway, world.acme, "how fast do dragonflies fly")
    finally:
        messages.fail_status = None
    assert len(messages.requests) - before == 2
    assert answer["source"] == "extractive" and answer["fallback"] == "provider_failed"
    assert answer["citations"][0]["doc_id"] == world.docs["odonata.md"]
    assert "test-provider-key" not in world.provider_gateway.logs()


def test_search_page_and_ask_box(world, chromium, out_dir):
    context = chromium.new_context(viewport=browser.LAPTOP)
    context.set_default_timeout(30_000)
    try:
        page = context.new_page()
        browser.sign_in(page, world.gateway.url, world.acme.email, TEST_PASSWORD)
        page.get_by_role("link", name="Search").click()
        page.wait_for_url(re.compile(r"/search$"))
        page.get_by_label("Search your documents").fill("glacier monitoring")
        page.get_by_label("Words", exact=True).check()
        page.get_by_role("button", name="Search", exact=True).click()
        page.wait_for_url(re.compile(r"/search\?q=glacier"))
        first = page.locator("[data-hit]").first
        assert first.locator("mark").first.inner_text().lower() == "glacier"
        link = first.get_by_role("link", name="glacier.md")
        assert link.get_attribute("href") == f"/documents/{world.docs['glacier.md']}?chunk=0#chunk-0"
        browser.shot(page, out_dir, "search")

        page.get_by_label("Ask a question about your documents").fill("how fast do dragonflies fly")
        page.get_by_role("button", name="Ask").click()
        answer = page.locator('[data-field="answer_text"]')
        answer.wait_for(state="visible")
        assert "50 km/h" in answer.inner_text()
        citation = page.locator('[data-field="citations"] li').first
        assert citation.get_by_role("link").get_attribute("href").startswith(
            f"/documents/{world.docs['odonata.md']}?chunk=")
        browser.shot(page, out_dir, "ask")
        link.click()
        page.wait_for_url(re.compile(re.escape(world.docs["glacier.md"])))
    finally:
        context.close()


def test_deactivated_content_is_never_found_or_cited(world):
    # Given the turbine report is found and cited while active
    question = "what did the quarterly turbine inspection find"
    before = _ask(world.gateway, world.acme, question)
    assert world.docs["turbine.md"] in {c["doc_id"] for c in before["citations"]}
    # When an admin deactivates it
    with world.gateway.client(world.acme.token) as client:
        done = client.post(f"/v1/documents/{world.docs['turbine.md']}/deactivate")
        assert done.status_code == 200, done.text
    # Then no mode finds it, and the same question abstains
    for mode in ("text", "vector", "hybrid"):
        assert "turbine.md" not in _titles(_hits(world, world.acme, q=question, mode=mode, k=50))
    after = _ask(world.gateway, world.acme, question)
    assert after["abstained"] and after["citations"] == []
    assert after["answer"] == "No evidence for this in your documents."
