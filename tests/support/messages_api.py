"""A tiny local server that speaks the Anthropic Messages API (POST /v1/messages), for tests.

It answers like the real API (a `content` list of text blocks) with a reply that cites the
passages it was sent, records every request it received, and can be switched to fail with a
status, so tests see the gateway's retries and fail-open. No network is needed or used.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class MessagesApi:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail_status: int | None = None  # answer every request with this status
        self.reply: str | None = None  # a fixed reply text instead of the citing one
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> MessagesApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, body: dict[str, Any]) -> str:
        """Cite the first passage the prompt holds, quoting its first words."""
        if self.reply is not None:
            return self.reply
        prompt = body["messages"][0]["content"]
        first = re.search(r"^\[1\] (.*)$", prompt, re.MULTILINE)
        words = " ".join((first.group(1) if first else "").split()[:8])
        return f"According to your documents, {words} [1]."

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                api.requests.append({"path": self.path, "headers": dict(self.headers),
                                     "body": body})
                if self.path != "/v1/messages":
                    return self._send(404, {"type": "error", "error": {"type": "not_found_error"}})
                if api.fail_status is not None:
                    return self._send(api.fail_status, {"type": "error", "error": {
                        "type": "api_error", "message": "Internal server error"}})
                self._send(200, {
                    "id": f"msg_{len(api.requests)}", "type": "message", "role": "assistant",
                    "model": body.get("model"), "stop_reason": "end_turn",
                    "content": [{"type": "text", "text": api.answer(body)}],
                    "usage": {"input_tokens": 10, "output_tokens": 10}})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler
