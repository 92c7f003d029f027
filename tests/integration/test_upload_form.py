"""POST /v1/ingest against hostile multipart forms (issue 9 §2).

One file part, each text field once and within its limit, no other field, and no part of the
body buffered without a bound. Every refusal leaves nothing behind: no row, no stored byte.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterable, Iterator

import orjson
import psutil
import pytest

from tests.integration.test_upload import (
    assert_error,
    assert_nothing_left,
    run_row,
    upload_root,
)
from tests.support import documents

BOUNDARY = b"form-boundary-5c1e"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY.decode()}"
MiB = 1024 * 1024
# What the gateway may grow by while a hostile body streams through it. Today's main grew by
# more than 500 MB for a 200 MB title; a bounded parser needs a few MB of socket buffers.
RSS_GROWTH_LIMIT = 60 * MiB


def part_head(name: bytes, filename: bytes | None = None) -> bytes:
    disposition = b'form-data; name="' + name + b'"'
    if filename is not None:
        disposition += b'; filename="' + filename + b'"'
    return (b"--" + BOUNDARY + b"\r\nContent-Disposition: " + disposition + b"\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n")


def form(*parts: tuple[bytes, bytes | None, bytes]) -> bytes:
    """A whole multipart body from (field name, filename or None, value) parts, in order."""
    body = b"".join(part_head(name, filename) + value + b"\r\n" for name, filename, value in parts)
    return body + b"--" + BOUNDARY + b"--\r\n"


def post_form(client, body: bytes):
    return client.post("/v1/ingest", content=body, headers={"Content-Type": CONTENT_TYPE})


# ── more than one file ──────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("first_size", [0, 3 * MiB], ids=["small", "flushed_to_store"])
def test_two_file_parts_are_refused_and_nothing_is_stored(gateway, tenants, conn, stack_env,
                                                          first_size):
    # Given a form whose first file part is a real PDF and whose second is random bytes as .txt
    # (today the two were joined under the second name after the type check saw only the PDF);
    # a 3 MB first part is already being written to the store when the second one arrives
    user = tenants.user(role="user")
    pdf = documents.make_pdf([documents.prose(200, seed=7)])
    pdf += b"%" + b"p" * first_size + b"\n"
    body = form((b"file", b"report.pdf", pdf), (b"file", b"notes.txt", os.urandom(64 * 1024)))

    # When it is posted
    with gateway.client(user.token) as client:
        response = post_form(client, body)

    # Then it is refused as more than one file, and no run, document or stored byte is left
    assert_error(response, 400, "multiple_files")
    assert_nothing_left(conn, upload_root(stack_env))


# ── text fields ─────────────────────────────────────────────────────────────────────────────
def test_title_of_1kb_is_accepted_and_one_byte_more_is_refused(gateway, tenants, conn,
                                                               stack_env):
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        # Given a title of exactly 1024 bytes (multi-byte characters count as bytes)
        title = "é" * 512
        ok = post_form(client, form((b"title", None, title.encode()),
                                    (b"file", b"a.txt", b"first file\n")))
        # Then it is accepted and kept whole
        assert ok.status_code == 202, ok.text
        doc = conn.execute("SELECT title FROM documents WHERE doc_id = %s",
                           (ok.json()["doc_id"],)).fetchone()
        assert doc["title"] == title
        before = conn.execute("SELECT count(*) AS n FROM ingestion_runs").fetchone()["n"]

        # When a title of 1025 bytes comes with another file
        refused = post_form(client, form((b"title", None, b"t" * 1025),
                                         (b"file", b"b.txt", b"second file\n")))

    # Then it is refused as too large, naming the field, and nothing new is stored
    body = assert_error(refused, 400, "field_too_large")
    assert "'title'" in body["detail"] and "1024" in body["detail"]
    assert conn.execute("SELECT count(*) AS n FROM ingestion_runs").fetchone()["n"] == before
    [kept] = [p for p in upload_root(stack_env).rglob("*") if p.is_file()]
    assert kept.read_bytes() == b"first file\n"


def test_title_after_the_file_that_is_too_long_leaves_nothing(gateway, tenants, conn, stack_env):
    # Given a file part that arrived whole, then an oversized title
    user = tenants.user(role="user")
    body = form((b"file", b"a.txt", b"whole file\n" * 1000), (b"title", None, b"t" * 5000))
    # When it is posted
    with gateway.client(user.token) as client:
        response = post_form(client, body)
    # Then it is refused and the file already written is removed
    assert_error(response, 400, "field_too_large")
    assert_nothing_left(conn, upload_root(stack_env))


def test_a_field_sent_twice_is_refused(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    # Given two title parts, When they are posted with a file
    body = form((b"title", None, b"One"), (b"file", b"a.txt", b"text\n"), (b"title", None, b"Two"))
    with gateway.client(user.token) as client:
        response = post_form(client, body)
    # Then the form is refused, and nothing is left behind
    body_json = assert_error(response, 400, "duplicate_field")
    assert "'title'" in body_json["detail"]
    assert_nothing_left(conn, upload_root(stack_env))


def test_an_unknown_field_is_refused(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    # Given a form with a field the route does not know, When it is posted
    with gateway.client(user.token) as client:
        response = client.post("/v1/ingest", files={"file": ("a.txt", b"text\n")},
                               data={"titel": "typo"})
    # Then it is refused and names the field, and nothing is left behind
    body = assert_error(response, 400, "unknown_field")
    assert "'titel'" in body["detail"]
    assert_nothing_left(conn, upload_root(stack_env))


def test_a_malformed_doc_id_is_refused(gateway, tenants, conn, stack_env):
    user = tenants.user(role="user")
    # Given a doc_id that cannot be a document id, When it is posted with a file
    with gateway.client(user.token) as client:
        response = client.post("/v1/ingest", files={"file": ("a.txt", b"text\n")},
                               data={"doc_id": "../../other-tenant"})
    # Then it is refused, and nothing is left behind
    body = assert_error(response, 400, "invalid_request")
    assert "doc_id" in body["detail"]
    assert_nothing_left(conn, upload_root(stack_env))


def test_a_huge_part_header_is_refused(gateway, tenants, conn, stack_env):
    # Given a file part whose header carries a 2 MB filename (the parser buffers headers whole)
    user = tenants.user(role="user")
    body = form((b"file", b"n" * (2 * MiB) + b".txt", b"text\n"))
    # When it is posted
    with gateway.client(user.token) as client:
        response = post_form(client, body)
    # Then it is refused for the size of what is not the file, and nothing is left behind
    assert_error(response, 400, "field_too_large")
    assert_nothing_left(conn, upload_root(stack_env))


# ── streamed hostile bodies: bounded memory, early answers ─────────────────────────────────
def _connect(port: int, token: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall((f"POST /v1/ingest HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                  f"Authorization: Bearer {token}\r\nContent-Type: {CONTENT_TYPE}\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n").encode())
    return sock


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _read_response(sock: socket.socket) -> tuple[int, dict]:
    """Read one response with a Content-Length, even if the gateway then resets the connection."""
    raw = b""
    try:
        while b"\r\n\r\n" not in raw or len(raw.partition(b"\r\n\r\n")[2]) < _length(raw):
            piece = sock.recv(65536)
            if not piece:
                break
            raw += piece
    except ConnectionResetError:
        pass
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head, "no response before the connection closed"
    return int(head.split()[1]), orjson.loads(body[:_length(raw)])


def _length(raw: bytes) -> int:
    for line in raw.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 1 << 30


class PeakRss:
    """Samples a process's resident memory in a thread until stopped."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.base = self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            self._stop.wait(0.01)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


def _stream(sock: socket.socket, pieces: Iterable[bytes]) -> int:
    """Send chunked pieces until done or until the gateway stops reading; return bytes sent."""
    sent = 0
    try:
        for piece in pieces:
            sock.sendall(_chunk(piece))
            sent += len(piece)
        sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def _endless(part: bytes, total: int) -> Iterator[bytes]:
    """A part header, then ``total`` bytes of its value generated on the fly, 1 MB at a time."""
    yield part
    block = b"v" * MiB
    for _ in range(total // MiB):
        yield block
    yield b"\r\n--" + BOUNDARY + b"--\r\n"


@pytest.mark.parametrize(("field", "code"), [(b"title", "field_too_large"),
                                             (b"comment", "unknown_field")])
def test_a_200_mb_streamed_field_keeps_the_gateway_small(gateway, tenants, conn, stack_env,
                                                         field, code):
    # Given a chunked body whose text field (a title, or a field the route does not know) is
    # 200 MB, generated while it is sent
    user = tenants.user(role="user")
    sock = _connect(gateway.port, user.token)

    # When it is streamed to the gateway while its memory is sampled
    with sock, PeakRss(gateway.proc.pid) as rss:
        _stream(sock, _endless(part_head(field), 200 * MiB))
        status, body = _read_response(sock)

    # Then the gateway answered 400 with the field's code and never held the field
    assert status == 400 and body["code"] == code, body
    growth = rss.peak - rss.base
    assert growth < RSS_GROWTH_LIMIT, f"gateway grew by {growth / MiB:.0f} MB"
    assert_nothing_left(conn, upload_root(stack_env))


def test_an_oversized_title_is_answered_before_the_body_ends(gateway, tenants, conn, stack_env):
    # Given a chunked body that has sent a file and 64 KB of its title, and sends nothing more
    user = tenants.user(role="user")
    with _connect(gateway.port, user.token) as sock:
        sock.sendall(_chunk(part_head(b"file", b"a.txt") + b"some text\r\n"))
        sock.sendall(_chunk(part_head(b"title") + b"t" * (64 * 1024)))
        started = time.monotonic()

        # When the client waits for an answer without finishing the body
        status, body = _read_response(sock)

    # Then the gateway has already refused it: it did not wait for the rest of the body
    assert status == 400 and body["code"] == "field_too_large", body
    assert time.monotonic() - started < 30
    assert_nothing_left(conn, upload_root(stack_env))


# ── field order ─────────────────────────────────────────────────────────────────────────────
def test_title_after_the_file_part_is_used(gateway, tenants, conn):
    user = tenants.user(role="user")
    # Given a form that sends the title after the file, When it is posted
    with gateway.client(user.token) as client:
        response = post_form(client, form((b"file", b"a.md", b"# Notes\n"),
                                          (b"title", None, b"Team notes")))
    # Then the document carries that title
    assert response.status_code == 202, response.text
    assert run_row(conn, response.json()["run_id"])["config"]["title"] == "Team notes"
