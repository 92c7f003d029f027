"""POST /v1/ingest: streaming to the store, dedup, the run and its job on the queue.

Every refusal is checked for what a user relies on: the status and code they see, and that
nothing was left behind (no rows, no stored bytes, no half-written ``.part`` files).
"""

from __future__ import annotations

import hashlib
import socket
import unicodedata
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson
import pytest

from shared import objectstore
from tests.support import stack
from tests.support.stack import wait_until

COUNTED = ("documents", "ingestion_runs", "job_outbox", "document_versions")


# ── helpers (imported by the other gateway test modules) ────────────────────────────────────
def upload(client, name: str, data: bytes, title: str | None = None):
    form = {"title": title} if title else None
    return client.post("/v1/ingest", files={"file": (name, data)}, data=form)


def receive_all(queues, expect: int, timeout: float = 15) -> list:
    got: list = []

    def more() -> bool:
        got.extend(queues.queue.receive(10, wait_s=1))
        return len(got) >= expect

    wait_until(more, timeout=timeout, message=f"{expect} message(s) on the queue")
    return got


def multipart(filename: bytes, data: bytes, *, field: bytes = b"file",
              boundary: bytes = b"dragonfly-boundary-7f3a") -> tuple[bytes, str]:
    """A multipart body with the filename sent as raw bytes (httpx would percent-encode them).

    Backslash and quote are escaped as RFC 7230 quoted-string requires; nothing else is.
    """
    quoted = filename.replace(b"\\", b"\\\\").replace(b'"', b'\\"')
    body = (b"--" + boundary + b"\r\n"
            b'Content-Disposition: form-data; name="' + field + b'"; filename="' + quoted + b'"\r\n'
            b"Content-Type: application/octet-stream\r\n\r\n" + data + b"\r\n"
            b"--" + boundary + b"--\r\n")
    return body, f"multipart/form-data; boundary={boundary.decode()}"


def upload_root(stack_env: dict[str, str]) -> Path:
    return objectstore.file_path(stack_env["UPLOAD_STORE_URI"])


def stored_files(root: Path) -> list[Path]:
    """Every file under the upload store, including hidden and ``.part`` files."""
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def counts(conn) -> dict[str, int]:
    return {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"] for t in COUNTED}


def add_active_version(conn, *, tenant_id, doc_id, run_id, content_hash: str) -> None:
    """What the worker leaves when it finishes a run: the run `succeeded` (through `running`,
    as the transition trigger requires) and the document's active version, in one transaction.

    Without chunks: the callers test intake's deduplication and the reads' tenant filters,
    which look only at the version's hash and `is_active` and the run's status, never at chunks.
    """
    with conn.transaction():
        conn.execute("UPDATE ingestion_runs SET status = 'running', started_at = now() "
                     "WHERE run_id = %s AND status = 'queued'", (run_id,))
        conn.execute(
            "INSERT INTO document_versions (tenant_id, doc_id, run_id, version_number, "
            "content_hash, is_active, embedding_model, embedding_dim) "
            "VALUES (%s, %s, %s, 1, %s, true, %s, 384)",
            (tenant_id, doc_id, run_id, content_hash, "sentence-transformers/all-MiniLM-L6-v2"))
        conn.execute("UPDATE ingestion_runs SET status = 'succeeded', finished_at = now() "
                     "WHERE run_id = %s", (run_id,))


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def assert_error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code, body
    # One sentence a user can act on, not a stack trace.
    assert body["detail"] and "\n" not in body["detail"] and "Traceback" not in body["detail"]
    return body


def assert_nothing_left(conn, root: Path) -> None:
    assert counts(conn) == dict.fromkeys(COUNTED, 0)
    assert stored_files(root) == []


def run_row(conn, run_id):
    return conn.execute("SELECT * FROM ingestion_runs WHERE run_id = %s", (run_id,)).fetchone()


# ── happy path ──────────────────────────────────────────────────────────────────────────────
def test_upload_creates_document_run_and_exact_job(gateway, tenants, conn, queues):
    # Given a user
    user = tenants.user(role="user")
    data = b"# Security policy\n\nAll laptops are encrypted.\n" * 50
    digest = sha(data)

    # When they upload a Markdown file
    with gateway.client(user.token) as client:
        response = upload(client, "policy.md", data, title="IT Security Policy")

    # Then a run is queued for a new content-addressed document
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "queued" and set(body) == {"run_id", "doc_id", "status"}
    run = run_row(conn, body["run_id"])
    assert run["status"] == "queued" and run["tenant_id"] == user.tenant_id
    assert run["run_type"] == "manual_upload" and run["initiated_by"] == user.user_id
    assert run["started_at"] is None and run["finished_at"] is None
    doc = conn.execute("SELECT * FROM documents WHERE doc_id = %s", (body["doc_id"],)).fetchone()
    assert doc["source_uri"] == f"upload://{digest}" and doc["title"] == "IT Security Policy"
    # and the stored bytes are exactly the upload
    config = run["config"]
    assert config["content_hash"] == digest and config["file_size_bytes"] == len(data)
    assert config["original_filename"] == "policy.md"
    assert objectstore.file_path(config["upload_uri"]).read_bytes() == data
    # and exactly this job payload sits on the queue
    [message] = receive_all(queues, 1)
    job = orjson.loads(message.body)
    assert job == {
        "schema_version": 1, "job_type": "upload_ingest", "run_id": body["run_id"],
        "doc_id": body["doc_id"], "tenant_id": str(user.tenant_id),
        "upload_uri": config["upload_uri"], "title": "IT Security Policy", "source_type": "md",
        "source_uri": f"upload://{digest}", "original_filename": "policy.md",
        "content_hash": digest, "embedding_model": "sentence-transformers/all-MiniLM-L6-v2",
        "embedding_dim": 384, "submitted_at": job["submitted_at"], "attachment_depth": 0,
    }
    # and the outbox row is marked published (the relay commits that just after the send)
    wait_until(lambda: conn.execute("SELECT published_at FROM job_outbox WHERE run_id = %s",
                                    (body["run_id"],)).fetchone()["published_at"],
               timeout=10, message="outbox row marked published")


# ── dedup ───────────────────────────────────────────────────────────────────────────────────
def test_same_bytes_after_processing_are_skipped_without_new_rows(gateway, tenants, conn,
                                                                   stack_env):
    # Given a file that was uploaded and processed (the worker wrote its active version)
    user = tenants.user(role="user")
    data = b"Quarterly report: revenue grew.\n" * 40
    root = upload_root(stack_env)
    with gateway.client(user.token) as client:
        first = upload(client, "report.txt", data).json()
        first_file = objectstore.file_path(run_row(conn, first["run_id"])["config"]["upload_uri"])
        add_active_version(conn, tenant_id=user.tenant_id, doc_id=first["doc_id"],
                           run_id=first["run_id"], content_hash=sha(data))
        before = counts(conn)

        # When the same bytes are uploaded again, under another name
        second = upload(client, "report-copy.txt", data)

    # Then the upload is skipped with the document's id and no new rows
    assert second.status_code == 200, second.text
    assert second.json() == {"doc_id": first["doc_id"], "status": "skipped",
                             "reason": "already ingested, no changes"}
    assert counts(conn) == before
    # and the second copy is gone from the upload store; the first one stays
    assert stored_files(root) == [first_file]


def test_same_bytes_while_first_run_is_queued_point_at_that_run(gateway, tenants, conn,
                                                                stack_env):
    # Given an upload whose run is still queued (no worker has picked it up)
    user = tenants.user(role="user")
    data = b"Onboarding checklist\n- laptop\n- badge\n" * 30
    root = upload_root(stack_env)
    with gateway.client(user.token) as client:
        first = upload(client, "onboarding.md", data).json()
        assert first["status"] == "queued"
        first_file = objectstore.file_path(run_row(conn, first["run_id"])["config"]["upload_uri"])
        before = counts(conn)

        # When the same bytes are uploaded again
        second = upload(client, "onboarding.md", data)

    # Then it is skipped and names the run that is already doing the work
    assert second.status_code == 200, second.text
    assert second.json() == {"doc_id": first["doc_id"], "status": "skipped",
                             "reason": "already being ingested by another run",
                             "run_id": first["run_id"]}
    # and nothing new was written or kept
    assert counts(conn) == before
    assert stored_files(root) == [first_file]


def test_same_bytes_after_failed_run_start_a_new_run_for_the_same_document(gateway, tenants,
                                                                           conn, queues):
    # Given an upload whose run failed before any version was written
    user = tenants.user(role="user")
    data = b"Travel policy: book economy.\n" * 30
    with gateway.client(user.token) as client:
        first = upload(client, "travel.txt", data).json()
        conn.execute("UPDATE ingestion_runs SET status = 'failed', error = 'boom', "
                     "finished_at = now() WHERE run_id = %s", (first["run_id"],))

        # When the user uploads the same bytes again to retry
        second = upload(client, "travel.txt", data)

    # Then a new run is queued for the same document
    assert second.status_code == 202, second.text
    body = second.json()
    assert body["doc_id"] == first["doc_id"] and body["run_id"] != first["run_id"]
    assert run_row(conn, body["run_id"])["status"] == "queued"
    assert counts(conn)["documents"] == 1 and counts(conn)["ingestion_runs"] == 2
    # and its job reaches the queue
    run_ids = {orjson.loads(m.body)["run_id"] for m in receive_all(queues, 2)}
    assert run_ids == {first["run_id"], body["run_id"]}


def test_twenty_concurrent_identical_uploads_make_one_document_and_one_run(gateway, tenants,
                                                                         conn, stack_env):
    # Given twenty clients holding the same file
    user = tenants.user(role="user")
    data = b"Incident runbook: page the on-call engineer.\n" * 200

    def send(_: int) -> httpx.Response:
        with gateway.client(user.token) as client:
            return upload(client, "runbook.md", data)

    # When they all upload it at once
    with ThreadPoolExecutor(max_workers=20) as pool:
        responses = list(pool.map(send, range(20)))

    # Then exactly one upload queued a run and the other nineteen were skipped, pointing at it
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 19 + [202], [r.text for r in responses]
    [accepted] = [r.json() for r in responses if r.status_code == 202]
    skipped = [r.json() for r in responses if r.status_code == 200]
    assert all(s["status"] == "skipped" and s["doc_id"] == accepted["doc_id"] for s in skipped)
    assert all(s.get("run_id") == accepted["run_id"] for s in skipped)
    # and the database holds one document, one run, one job
    assert counts(conn) == {"documents": 1, "ingestion_runs": 1, "job_outbox": 1,
                            "document_versions": 0}
    # and the store holds one copy of the file: the accepted run's
    [kept] = stored_files(upload_root(stack_env))
    assert kept == objectstore.file_path(run_row(conn, accepted["run_id"])["config"]["upload_uri"])
    assert kept.read_bytes() == data


# ── oversize ────────────────────────────────────────────────────────────────────────────────
@pytest.fixture
def small_gateway(stack_env: dict[str, str], out_dir: Path) -> Iterator[stack.Process]:
    """A gateway that accepts files up to 1 MB."""
    process = stack.start_gateway({**stack_env, "UPLOAD_MAX_SIZE_MB": "1"}, out_dir, "gateway-1mb")
    yield process
    process.stop()


def send_whole_then_read(port: int, token: str, content_type: str, pieces: Iterator[bytes], *,
                         length: int | None) -> tuple[int, dict]:
    """POST like a simple client: send the whole request, only then read the response.

    httpx reads an early response even when its send fails; browsers and many clients do not,
    so this checks that the gateway lets the client finish sending and then answers.
    """
    framing = (f"Content-Length: {length}" if length is not None
               else "Transfer-Encoding: chunked")
    head = (f"POST /v1/ingest HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: {content_type}\r\n"
            f"{framing}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head)
        for piece in pieces:
            sock.sendall(piece if length is not None
                         else b"%x\r\n%s\r\n" % (len(piece), piece))
        if length is None:
            sock.sendall(b"0\r\n\r\n")
        response = b""
        while chunk := sock.recv(65536):
            response += chunk
    status_line, _, rest = response.partition(b"\r\n")
    _, _, body = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), orjson.loads(body)


def _oversize_pieces(size: int, chunk: int = 256 * 1024) -> tuple[list[bytes], str, int]:
    head, content_type = multipart(b"big.txt", b"")
    opening, closing = head.split(b"\r\n\r\n\r\n", 1)
    pieces = [opening + b"\r\n\r\n", *([b"y" * chunk] * (size // chunk)), b"\r\n" + closing]
    return pieces, content_type, sum(map(len, pieces))


def test_oversize_upload_with_content_length_is_refused_413(small_gateway, tenants, conn,
                                                           stack_env):
    # Given a 1 MB limit and a 40 MB file sent with Content-Length: more than socket buffers
    # hold, so the client is still sending when the gateway decides
    user = tenants.user(role="user")
    pieces, content_type, length = _oversize_pieces(40 * 1024 * 1024)

    # When a client sends all of it before reading the answer
    status, body = send_whole_then_read(small_gateway.port, user.token, content_type,
                                        iter(pieces), length=length)

    # Then it reads a 413 that names the limit (not a reset connection), and nothing is left
    assert status == 413, body
    assert body["code"] == "file_too_large" and "1 MB" in body["detail"]
    assert_nothing_left(conn, upload_root(stack_env))


def test_oversize_upload_with_content_length_is_refused_413_for_httpx(small_gateway, tenants,
                                                                     conn, stack_env):
    user = tenants.user(role="user")
    with small_gateway.client(user.token) as client:
        response = upload(client, "big.txt", b"x" * (3 * 1024 * 1024))
    assert_error(response, 413, "file_too_large")
    assert_nothing_left(conn, upload_root(stack_env))


def _chunked_multipart(size: int, chunk: int = 64 * 1024) -> tuple[Iterator[bytes], str]:
    head, content_type = multipart(b"stream.txt", b"")
    opening, closing = head.split(b"\r\n\r\n\r\n", 1)

    def body() -> Iterator[bytes]:
        yield opening + b"\r\n\r\n"
        sent = 0
        while sent < size:
            n = min(chunk, size - sent)
            yield b"y" * n
            sent += n
        yield b"\r\n" + closing

    return body(), content_type


def test_oversize_streamed_upload_is_refused_413_mid_stream(small_gateway, tenants, conn,
                                                           stack_env):
    # Given a 1 MB limit and a 40 MB file streamed without Content-Length (chunked encoding)
    user = tenants.user(role="user")
    pieces, content_type, _ = _oversize_pieces(40 * 1024 * 1024)

    # When it is sent whole, so the limit trips only after a megabyte was received and stored
    status, body = send_whole_then_read(small_gateway.port, user.token, content_type,
                                        iter(pieces), length=None)

    # Then the client reads a 413 (not a reset connection), and the partial file is gone
    assert status == 413, body
    assert body["code"] == "file_too_large"
    assert_nothing_left(conn, upload_root(stack_env))


def test_oversize_streamed_upload_is_refused_413_for_httpx(small_gateway, tenants, conn,
                                                          stack_env):
    user = tenants.user(role="user")
    body, content_type = _chunked_multipart(4 * 1024 * 1024)
    with small_gateway.client(user.token) as client:
        response = client.post("/v1/ingest", content=body,
                               headers={"Content-Type": content_type})
    assert "content-length" not in {k.lower() for k in response.request.headers}
    assert_error(response, 413, "file_too_large")
    assert_nothing_left(conn, upload_root(stack_env))


def test_streamed_upload_under_the_limit_is_accepted(small_gateway, tenants, conn):
    # Given a 1 MB limit and a 900 KB file streamed without Content-Length
    user = tenants.user(role="user")
    body, content_type = _chunked_multipart(900 * 1024)

    # When it is uploaded
    with small_gateway.client(user.token) as client:
        response = client.post("/v1/ingest", content=body,
                               headers={"Content-Type": content_type})

    # Then it is accepted whole: the limit is on the file, not on the chunking
    assert response.status_code == 202, response.text
    config = run_row(conn, response.json()["run_id"])["config"]
    assert config["file_size_bytes"] == 900 * 1024
    assert objectstore.file_path(config["upload_uri"]).read_bytes() == b"y" * (900 * 1024)


# ── refused content ─────────────────────────────────────────────────────────────────────────
def test_pdf_that_is_text_is_refused_415(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    # Given a text file named .pdf, When it is uploaded
    with gateway.client(user.token) as client:
        response = upload(client, "invoice.pdf", b"Dear customer, please pay.\n" * 20)
    # Then it is refused as unsupported, and nothing is left behind
    body = assert_error(response, 415, "unsupported_type")
    assert "PDF" in body["detail"]
    assert_nothing_left(conn, upload_root(stack_env))


def test_large_pdf_that_is_text_is_refused_415(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    # Given a 3 MB text file named .pdf (bigger than one write batch), When it is uploaded
    with gateway.client(user.token) as client:
        response = upload(client, "invoice.pdf", b"Dear customer, please pay.\n" * 120_000)
    # Then it is refused, and nothing is left behind
    assert_error(response, 415, "unsupported_type")
    assert_nothing_left(conn, upload_root(stack_env))


def test_docx_that_is_not_a_zip_is_refused_415(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    # Given a .docx whose bytes are plain text, When it is uploaded
    with gateway.client(user.token) as client:
        response = upload(client, "contract.docx", b"This is not a Word document.\n" * 10)
    # Then it is refused, and nothing is left behind
    assert_error(response, 415, "unsupported_type")
    assert_nothing_left(conn, upload_root(stack_env))


def test_txt_with_nul_bytes_is_refused_415(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    # Given a binary file named .txt, When it is uploaded
    with gateway.client(user.token) as client:
        response = upload(client, "notes.txt", b"MZ\x90\x00\x03\x00\x00\x00" * 100)
    # Then it is refused, and nothing is left behind
    assert_error(response, 415, "unsupported_type")
    assert_nothing_left(conn, upload_root(stack_env))


def test_unsupported_extension_is_refused_415(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    # Given an .exe, When it is uploaded
    with gateway.client(user.token) as client:
        response = upload(client, "setup.exe", b"MZ\x90\x00" * 100)
    # Then it is refused with the list of what is accepted, and nothing is left behind
    body = assert_error(response, 415, "unsupported_type")
    assert ".exe" in body["detail"] and "pdf" in body["detail"]
    assert_nothing_left(conn, upload_root(stack_env))


def test_legacy_word_doc_is_refused_415_with_how_to_convert(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    # Given a legacy Word .doc (an OLE compound file), When it is uploaded
    with gateway.client(user.token) as client:
        response = upload(client, "contract.doc", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600)
    # Then the refusal says how to save it in the format we read, and nothing is left behind
    body = assert_error(response, 415, "unsupported_type")
    assert "save it as .docx" in body["detail"]
    assert_nothing_left(conn, upload_root(stack_env))


@pytest.mark.parametrize("name", ["fake-power-point.pptx", "stanley-cups.xlsx", "fake-email.msg",
                                  "fake-email-attachment.eml", "winter-sports.epub", "fake.odt"])
def test_new_document_types_are_queued(gateway, tenants, name):
    user = tenants.user(role="user")
    data = (Path(__file__).parents[1] / "fixtures" / "documents" / name).read_bytes()
    # Given a real file of a type issue 25 added, When it is uploaded, Then a run is queued
    with gateway.client(user.token) as client:
        response = upload(client, name, data)
    assert response.status_code == 202, response.text


def test_image_named_png_that_is_a_jpeg_is_refused_415(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        response = upload(client, "scan.png", b"\xff\xd8\xff\xe0\x00\x10JFIF" + b"\0" * 100)
    assert_error(response, 415, "unsupported_type")
    assert_nothing_left(conn, upload_root(stack_env))


def test_empty_file_is_refused_400(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    # Given an empty .txt, When it is uploaded
    with gateway.client(user.token) as client:
        response = upload(client, "empty.txt", b"")
    # Then it is refused as empty, and nothing is left behind
    assert_error(response, 400, "empty_file")
    assert_nothing_left(conn, upload_root(stack_env))


def test_form_with_the_file_in_another_field_is_refused_400(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    # Given a multipart form whose file sits in another field, When it is posted
    with gateway.client(user.token) as client:
        response = client.post("/v1/ingest", files={"document": ("a.txt", b"hello")},
                               data={"title": "x"})
    # Then it is refused as an unknown field with a hint about the field name; nothing is left
    body = assert_error(response, 400, "unknown_field")
    assert "'document'" in body["detail"] and "'file'" in body["detail"]
    assert_nothing_left(conn, upload_root(stack_env))


def test_form_without_file_field_is_refused_400(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    # Given a multipart form with only a title, When it is posted
    with gateway.client(user.token) as client:
        response = client.post("/v1/ingest", files={"title": (None, b"Minutes")})
    # Then it is refused with a hint about the field name, and nothing is left behind
    body = assert_error(response, 400, "invalid_request")
    assert "'file'" in body["detail"]
    assert_nothing_left(conn, upload_root(stack_env))


def test_non_multipart_body_is_refused_400(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    # Given a JSON body, When it is posted to the upload route
    with gateway.client(user.token) as client:
        response = client.post("/v1/ingest", json={"file": "aGVsbG8="})
    # Then it is refused and says to use multipart, and nothing is left behind
    body = assert_error(response, 400, "invalid_request")
    assert "multipart/form-data" in body["detail"]
    assert_nothing_left(conn, upload_root(stack_env))


def test_multipart_without_boundary_is_refused_400(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    # Given a multipart Content-Type that names no boundary, When it is posted
    with gateway.client(user.token) as client:
        response = client.post("/v1/ingest", content=b"--x\r\n\r\nhello",
                               headers={"Content-Type": "multipart/form-data"})
    # Then it is refused as a bad request (not a server error), and nothing is left behind
    assert_error(response, 400, "invalid_request")
    assert_nothing_left(conn, upload_root(stack_env))


def test_body_that_is_not_multipart_despite_its_header_is_refused_400(gateway, tenants, conn,
                                                                     stack_env):
    user = tenants.user(role="user")
    # Given a body that does not follow the boundary its Content-Type announces
    with gateway.client(user.token) as client:
        response = client.post("/v1/ingest", content=b"just some bytes, no parts at all",
                               headers={"Content-Type": "multipart/form-data; boundary=abc"})
    # Then it is refused as a bad request, and nothing is left behind
    assert_error(response, 400, "invalid_request")
    assert_nothing_left(conn, upload_root(stack_env))


def test_multipart_body_cut_before_its_end_is_refused_400(gateway, tenants, conn, stack_env):
    # Given a well-formed HTTP request whose multipart body stops in the middle of the file
    user = tenants.user(role="user")
    body, content_type = multipart(b"cut.txt", b"all of this text should arrive\n" * 5000)
    cut = body[: len(body) // 2]

    # When it is posted
    with gateway.client(user.token) as client:
        response = client.post("/v1/ingest", content=cut, headers={"Content-Type": content_type})

    # Then it is refused instead of storing half a file as if it were whole
    body_json = assert_error(response, 400, "invalid_request")
    assert "again" in body_json["detail"]
    assert_nothing_left(conn, upload_root(stack_env))


# ── hostile filenames ───────────────────────────────────────────────────────────────────────
HOSTILE_NAMES = {
    "traversal": "../../etc/passwd.txt",
    "control_chars": "re\x00port\x01\x1b[31m\x7f.txt",
    "very_long": "a" * 296 + ".txt",
    "windows_path": "C:\\evil\\..\\x.md",
}


@pytest.mark.parametrize("original", HOSTILE_NAMES.values(), ids=HOSTILE_NAMES.keys())
def test_hostile_filename_is_stored_safely_and_kept_for_display(gateway, tenants, conn,
                                                                stack_env, original):
    # Given a file whose name tries to escape the store or smuggle control characters
    user = tenants.user(role="user")
    data = f"Harmless text for {original!r}.\n".encode() * 5
    body, content_type = multipart(original.encode(), data)

    # When it is uploaded
    with gateway.client(user.token) as client:
        response = client.post("/v1/ingest", content=body, headers={"Content-Type": content_type})

    # Then it is accepted and stored inside <upload root>/<tenant_id>/<run_id>/
    assert response.status_code == 202, response.text
    run_id = response.json()["run_id"]
    config = run_row(conn, run_id)["config"]
    root = upload_root(stack_env).resolve()
    [stored] = stored_files(root)
    assert stored.resolve() == objectstore.file_path(config["upload_uri"]).resolve()
    assert stored.resolve().parent == root / str(user.tenant_id) / run_id
    assert stored.read_bytes() == data
    # under a name with no path, no control characters and at most 120 characters
    name = stored.name
    assert "/" not in name and "\\" not in name and name not in (".", "..")
    assert not any(unicodedata.category(ch).startswith("C") for ch in name)
    assert len(name) <= 120 and name.endswith((".txt", ".md"))
    # while the run keeps the name the user gave, for display
    assert config["original_filename"] == _storable(original)


def _storable(name: str) -> str:
    # Postgres text cannot hold NUL; the gateway drops only that character from the display name.
    return name.replace("\x00", "")


def test_title_defaults_to_the_original_filename(gateway, tenants, conn):
    user = tenants.user(role="user")
    # Given an upload without a title, When it is accepted
    with gateway.client(user.token) as client:
        body = upload(client, "Board minutes 2024.md", b"# Minutes\n").json()
    # Then the document is titled by the file's name
    doc = conn.execute("SELECT title FROM documents WHERE doc_id = %s", (body["doc_id"],)).fetchone()
    assert doc["title"] == "Board minutes 2024.md"


def test_uploads_of_two_tenants_with_same_bytes_are_separate_documents(gateway, tenants, conn):
    # Given two tenants uploading identical bytes
    a, b = tenants.user(tenant="alpha"), tenants.user(tenant="beta")
    data = b"Shared template text.\n" * 10
    with gateway.client(a.token) as ca, gateway.client(b.token) as cb:
        first, second = upload(ca, "t.txt", data), upload(cb, "t.txt", data)
    # Then each gets its own document and run: dedup never crosses tenants
    assert first.status_code == second.status_code == 202
    assert first.json()["doc_id"] != second.json()["doc_id"]
    rows = conn.execute("SELECT tenant_id FROM documents ORDER BY tenant_id").fetchall()
    assert sorted(r["tenant_id"] for r in rows) == sorted([a.tenant_id, b.tenant_id])


def test_title_with_nul_is_kept_without_it(gateway, tenants, conn):
    user = tenants.user(role="user")
    # Given a title with a NUL character (Postgres text cannot hold one), When it is uploaded
    with gateway.client(user.token) as client:
        response = upload(client, "a.txt", b"hello world\n", title="Budget\x00 2025")
    # Then it is accepted, titled without the NUL
    assert response.status_code == 202, response.text
    doc = conn.execute("SELECT title FROM documents WHERE doc_id = %s",
                       (response.json()["doc_id"],)).fetchone()
    assert doc["title"] == "Budget 2025"
