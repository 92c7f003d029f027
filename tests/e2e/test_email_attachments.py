"""E-mail attachments become child documents of their message (docs/decisions/0250), through a
real gateway (its outbox relay makes the children) and a real worker, with unstructured's EML
and MSG samples (tests/fixtures/documents/README.md)."""

from __future__ import annotations

from email.message import EmailMessage
from pathlib import Path

import pytest

from tests.integration.test_upload import upload
from tests.integration.test_upload_versions import new_version
from tests.integration.test_web import sign_in
from tests.support import stack
from tests.support.stack import wait_until

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parents[1] / "fixtures" / "documents"
SUBJECT = "Fake email with attachment"
ATTACHED = "Hey this is a fake attachment!"


def _forward() -> bytes:
    """A message forwarding the MSG sample as an attachment: a grandchild for its .txt."""
    message = EmailMessage()
    message["Subject"] = "Fwd: the Outlook sample"
    message["From"] = "forwarder@example.org"
    message.set_content("Forwarding the message below.")
    message.add_attachment((FIXTURES / "fake-email-attachment.msg").read_bytes(),
                           maintype="application", subtype="vnd.ms-outlook",
                           filename="sample.msg")
    return bytes(message)


def _settled(conn, expected_runs: int) -> bool:
    row = conn.execute(
        "SELECT count(*) AS n, count(*) FILTER (WHERE status IN ('queued', 'running')) AS busy "
        "FROM ingestion_runs").fetchone()
    pending = conn.execute("SELECT count(*) AS n FROM message_attachments "
                           "WHERE child_doc_id IS NULL").fetchone()["n"]
    return row["n"] == expected_runs and row["busy"] == 0 and pending == 0


def _served(client, doc_id: str) -> bool:
    return any(v["is_active"] for v in client.get(f"/v1/documents/{doc_id}").json()["versions"])


def test_attachments_become_documents_that_follow_their_message(gateway, stack_env, tenants,
                                                                 conn, out_dir):
    # Given a user's uploads: the EML and MSG samples (one .txt attachment each), and a message
    # forwarding the MSG sample as an attachment
    user = tenants.user(role="user")
    admin = tenants.user(role="admin")
    stranger = tenants.user("globex", role="admin")
    eml = (FIXTURES / "fake-email-attachment.eml").read_bytes()
    worker = stack.start_worker(stack_env, out_dir)
    try:
        with gateway.client(user.token) as client:
            docs = {name: upload(client, name, data).json()["doc_id"] for name, data in (
                ("mail.eml", eml),
                ("mail.msg", (FIXTURES / "fake-email-attachment.msg").read_bytes()),
                ("forward.eml", _forward()))}

            # When the worker reads them and the gateway's relay makes their attachments
            # documents (3 messages + 3 attachments + the forwarded message's own attachment)
            wait_until(lambda: _settled(conn, 7), timeout=600, message="all runs settled")
            runs = conn.execute("SELECT status, error FROM ingestion_runs").fetchall()
            assert all(r["status"] == "succeeded" for r in runs), runs

            # Then each message lists its attachment, whose text is the child's, not its own
            for name in ("mail.eml", "mail.msg"):
                message = client.get(f"/v1/documents/{docs[name]}").json()
                assert message["parent"] is None
                (child,) = message["attachments"]
                assert child["title"] == "fake-attachment.txt"
                text = _text(conn, docs[name])
                assert "## Attachments\n\n- fake-attachment.txt" in text
                assert ATTACHED not in text
                got = client.get(f"/v1/documents/{child['doc_id']}").json()
                assert got["parent"] == {"doc_id": docs[name], "title": name, "subject": SUBJECT}
                assert got["parent_doc_id"] == docs[name]
                assert _text(conn, child["doc_id"]).startswith(ATTACHED)
            # and the forwarded message is a child whose own attachment is its child in turn
            (forwarded,) = client.get(f"/v1/documents/{docs['forward.eml']}").json()[
                "attachments"]
            assert forwarded["title"] == "sample.msg"
            (grandchild,) = client.get(f"/v1/documents/{forwarded['doc_id']}").json()[
                "attachments"]
            assert _text(conn, grandchild["doc_id"]).startswith(ATTACHED)
            depth = conn.execute("SELECT depth FROM message_attachments WHERE child_doc_id = %s",
                                 (grandchild["doc_id"],)).fetchone()["depth"]
            assert depth == 2

            # and a search hit (and a citation) inside an attachment names the message
            hits = client.get("/v1/search", params={"q": "fake attachment", "mode": "text",
                                                    "k": 20}).json()["hits"]
            parents = {h["doc_id"]: h["parent"] for h in hits}
            eml_child = client.get(f"/v1/documents/{docs['mail.eml']}").json()["attachments"][0]
            assert parents[eml_child["doc_id"]] == {"doc_id": docs["mail.eml"],
                                                    "title": "mail.eml", "subject": SUBJECT}
            # (the gateway's first question loads its embedding model: minutes on a busy box)
            answer = client.post("/v1/ask", json={"question": "this is a fake attachment"},
                                 timeout=600).json()
            cited = {c["doc_id"]: c["parent"] for c in answer["citations"]}
            assert cited and all(p is not None for d, p in cited.items() if d not in docs.values())
            assert any(p and p["subject"] == SUBJECT for p in cited.values())

            # and the pages say the same: the attachment's page names its e-mail, the e-mail's
            # page lists its attachment, a search hit inside it links the e-mail
            with sign_in(gateway, user.email) as browser:
                page = browser.get(f"/documents/{eml_child['doc_id']}").text
                assert (f'Attachment of the e-mail <a href="/documents/{docs["mail.eml"]}" '
                        f'data-field="parent">{SUBJECT}</a>') in page
                page = browser.get(f"/documents/{docs['mail.eml']}").text
                assert f'<a href="/documents/{eml_child["doc_id"]}">fake-attachment.txt</a>' \
                    in page
                page = browser.get("/search", params={"q": "fake attachment",
                                                      "mode": "text"}).text
                assert f'attachment of <a href="/documents/{docs["mail.eml"]}" ' in page

            # and an attachment is versioned with its message, never on its own
            refused = new_version(client, eml_child["doc_id"], b"hello", name="fake.txt")
            assert refused.status_code == 409
            assert refused.json()["code"] == "document_versioned_by_message"

        # and another tenant sees neither the attachment nor its message
        with gateway.client(stranger.token) as other:
            assert other.get(f"/v1/documents/{eml_child['doc_id']}").status_code == 404
            assert other.get("/v1/search", params={"q": "fake attachment",
                                                   "mode": "text"}).json()["hits"] == []

        with gateway.client(admin.token) as client:
            # When an admin takes the e-mail down, Then its attachment goes too; back, back
            assert client.post(f"/v1/documents/{docs['mail.eml']}/deactivate").status_code == 200
            assert not _served(client, eml_child["doc_id"])
            refused = client.post(f"/v1/documents/{eml_child['doc_id']}/reactivate")
            assert refused.status_code == 409
            assert client.post(f"/v1/documents/{docs['mail.eml']}/reactivate").status_code == 200
            assert _served(client, eml_child["doc_id"])

            # When the e-mail gets a new version whose attachment changed
            changed = eml.replace(b"SGV5IHRoaXMgaXMgYSBmYWtlIGF0dGFjaG1lbnQh",
                                  b"SGV5IHRoaXMgaXMgYSBuZXcgYXR0YWNobWVudCE=")
            assert changed != eml
            assert new_version(client, docs["mail.eml"], changed,
                               name="mail.eml").status_code == 202
            wait_until(lambda: _settled(conn, 9), timeout=300, message="new version settled")

            # Then the old attachment is retired and the new one is served under the message
            assert not _served(client, eml_child["doc_id"])
            (new_child,) = client.get(f"/v1/documents/{docs['mail.eml']}").json()["attachments"]
            assert new_child["doc_id"] != eml_child["doc_id"]
            assert _served(client, new_child["doc_id"])
            assert _text(conn, new_child["doc_id"]).startswith("Hey this is a new attachment!")
    finally:
        worker.stop()


def _text(conn, doc_id: str) -> str:
    """The served version's text, chunk after chunk."""
    rows = conn.execute(
        "SELECT c.text FROM chunks c JOIN document_versions v USING (doc_version_id) "
        "WHERE v.doc_id = %s AND v.is_active ORDER BY c.ordinal", (doc_id,)).fetchall()
    return "\n".join(r["text"] for r in rows)
