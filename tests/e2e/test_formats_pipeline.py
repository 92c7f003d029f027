"""The formats of issue 25 through the real worker: upload → queue → parser child → chunks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import scans, stack

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parents[1] / "fixtures" / "documents"
FAQ = str(FIXTURES / "debian-faq.en.pdf")
# file -> (a phrase known to be in it, the page its chunk must carry or None)
EXPECTED = {
    "fake-power-point-table.pptx": ("tangerine pink aqua", 1),
    "vodafone.xlsx": ("fixed broadband customers", None),
    # the message's own body: its attachment's text is a child document's (ADR 0250,
    # tests/e2e/test_email_attachments.py follows it there)
    "fake-email-attachment.msg": ("lots of whitespace", None),
    "fake.odt": ("lorem ipsum dolor", None),
    "scan.pdf": ("choosing a debian distribution", 2),
}


def test_new_formats_become_searchable_with_their_pages(gateway, stack_env, tenants, conn,
                                                         out_dir):
    scans.require_ocr()
    files = {name: (FIXTURES / name).read_bytes() for name in EXPECTED if name != "scan.pdf"}
    # a two-page scan (no text layer) of the FAQ's pages 14 and 15
    files["scan.pdf"] = scans.image_pdf([scans.render(FAQ, 13), scans.render(FAQ, 14)])
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        runs = {}
        for name, data in files.items():
            response = client.post("/v1/ingest", files={"file": (name, data)})
            assert response.status_code == 202, response.text
            runs[name] = response.json()["run_id"]
        worker = stack.start_worker(stack_env, out_dir, once=True)
        assert worker.proc.wait(900) == 0, worker.logs()[-3000:]
        for name, run_id in runs.items():
            run = client.get(f"/v1/ingestion-runs/{run_id}").json()
            assert run["status"] == "succeeded", (name, run["error"])
    for name, run_id in runs.items():
        phrase, page = EXPECTED[name]
        found = conn.execute(
            "SELECT c.text, c.page FROM chunks c JOIN document_versions v USING (doc_version_id) "
            "JOIN chunk_fts f USING (chunk_id) WHERE v.run_id = %s AND f.tenant_id = c.tenant_id "
            "AND f.tsv @@ phraseto_tsquery('english', %s)", (run_id, phrase)).fetchall()
        assert found, name
        assert found[0]["page"] == page, name
