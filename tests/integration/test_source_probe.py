"""A source's "Test connection" sends one request and follows no redirect (docs/decisions/0206).

An endpoint that answered 307 to everything made one test cost 83 outbound requests and
answer with the internal name RecursionError."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support import stack


class _Redirecting(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).seen.append(self.path)
        self.send_response(307)
        self.send_header("Location", f"http://127.0.0.1:{self.server.server_port}{self.path}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def redirecting():
    _Redirecting.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Redirecting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_a_redirecting_endpoint_gets_one_request_and_the_answer_is_a_sentence(
        stack_env, out_dir, tenants, redirecting):
    # Given an endpoint an operator allowed, which answers every request with 307 to itself
    gateway = stack.start_gateway({**stack_env,
                                   "SOURCE_ENDPOINT_ALLOWLIST": json.dumps([redirecting])},
                                  out_dir, name="gateway-probe")
    operator = tenants.user(role="operator")
    try:
        # When an operator tests a source there
        with gateway.client(operator.token) as client:
            answer = client.post("/v1/sources/test-connection", json={
                "bucket": "kb-bucket", "endpoint_url": redirecting})
    finally:
        gateway.stop()
    # Then exactly one request went out, and the answer says what happened in words
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["ok"] is False and "redirect" in body["detail"]
    assert len(_Redirecting.seen) == 1, _Redirecting.seen
    assert "Error" not in body["detail"] and "Exception" not in body["detail"]
    assert body["detail"].endswith(".") and "\n" not in body["detail"]
