"""Upload → queue → worker → content tables, with the gateway and a worker as real processes."""

from __future__ import annotations

import orjson
import pytest

from shared import objectstore
from tests.support import documents, stack

pytestmark = pytest.mark.slow

PHRASES = {
    "report.pdf": "quarterly turbine inspection",
    "handbook.docx": "volunteer onboarding checklist",
    "page.html": "glacier monitoring station",
    "guide.md": "sourdough starter hydration",
}


def _files() -> dict[str, bytes]:
    return {
        "report.pdf": documents.make_pdf([
            documents.prose(300, seed=1), f"The {PHRASES['report.pdf']} found no faults. "
            + documents.prose(250, seed=2), documents.prose(280, seed=3)]),
        "handbook.docx": documents.make_docx(
            "Handbook", [documents.prose(120, seed=4), f"See the {PHRASES['handbook.docx']}."],
            [["Role", "Owner"], ["Greeter", "Ana"]]),
        "page.html": documents.make_html(
            "Field notes", [("Stations", f"The {PHRASES['page.html']} reports daily. "
                             + documents.prose(150, seed=5))]),
        "guide.md": documents.make_markdown(4).replace(
            b"\n\n", f"\n\nAbout {PHRASES['guide.md']}.\n\n".encode(), 1),
    }


def test_every_type_becomes_an_active_searchable_version(gateway, stack_env, tenants, conn,
                                                          out_dir):
    # Given four documents of different types uploaded through the gateway
    user = tenants.user(role="user")
    runs = {}
    with gateway.client(user.token) as client:
        for name, data in _files().items():
            response = client.post("/v1/ingest", files={"file": (name, data)})
            assert response.status_code == 202, response.text
            runs[name] = response.json()["run_id"]

        # When a worker processes what is queued
        worker = stack.start_worker(stack_env, out_dir, once=True)
        assert worker.proc.wait(300) == 0, worker.logs()[-3000:]

        # Then every run succeeded and its document is listed
        for name, run_id in runs.items():
            run = client.get(f"/v1/ingestion-runs/{run_id}").json()
            assert run["status"] == "succeeded", (name, run["error"])
            assert run["stage"] == "done" and run["progress"] == 1
            assert run["stats"]["chunks_created"] > 0 and run["stats"]["tokens_total"] > 0
            assert set(run["stats"]["stages"]) >= {"read_ms", "extract_ms", "chunk_ms",
                                                   "embed_ms", "index_ms"}
            assert run["started_at"] and run["finished_at"]
        listed = client.get("/v1/documents").json()
        assert listed["total"] == 4

    for name, run_id in runs.items():
        _assert_content(conn, name, run_id)


def _assert_content(conn, name: str, run_id: str) -> None:
    version = conn.execute("SELECT * FROM document_versions WHERE run_id = %s", (run_id,)).fetchone()
    assert version["is_active"] and version["embedding_model"].endswith("all-MiniLM-L6-v2")
    assert version["embedding_dim"] == 384
    chunks = conn.execute("SELECT * FROM chunks WHERE doc_version_id = %s ORDER BY ordinal",
                          (version["doc_version_id"],)).fetchall()
    assert len(chunks) == version["chunk_count"] > 0
    assert [c["ordinal"] for c in chunks] == list(range(len(chunks)))

    # chunk texts cover the extracted text (kept as the version's artifact)
    artifact = orjson.loads(objectstore.file_path(version["artifact_uri"]).read_bytes())
    text = artifact["text"]
    covered = [False] * len(text)
    for c in chunks:
        assert text[c["char_start"]:c["char_end"]] == c["text"]
        covered[c["char_start"]:c["char_end"]] = [True] * (c["char_end"] - c["char_start"])
    assert all(covered[i] for i, ch in enumerate(text) if not ch.isspace()), name

    # one unit-norm 384-dim embedding per chunk (halfvec: l2_norm, not vector_norm)
    vectors = conn.execute(
        "SELECT vector_dims(embedding) AS dims, l2_norm(embedding) AS norm "
        "FROM chunk_embeddings WHERE doc_version_id = %s", (version["doc_version_id"],)).fetchall()
    assert len(vectors) == len(chunks)
    assert all(v["dims"] == 384 and abs(v["norm"] - 1) < 1e-3 for v in vectors)

    # full-text search finds the chunk holding the document's phrase
    found = conn.execute(
        "SELECT c.text FROM chunk_fts f JOIN chunks c USING (chunk_id) "
        "WHERE f.tenant_id = c.tenant_id AND f.doc_version_id = %s "
        "AND f.tsv @@ phraseto_tsquery('english', %s)",
        (version["doc_version_id"], PHRASES[name])).fetchall()
    assert found and PHRASES[name] in found[0]["text"].lower(), name

    # the raw upload is gone once its content is committed
    run = conn.execute("SELECT config FROM ingestion_runs WHERE run_id = %s", (run_id,)).fetchone()
    assert not objectstore.file_path(run["config"]["upload_uri"]).exists()
    if name == "page.html":
        everything = " ".join(c["text"] for c in chunks)
        assert not any(noise in everything for noise in documents.HTML_NOISE)
