"""A local webhook receiver for alert tests: records every JSON body posted to it."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson


class Webhook:
    def __init__(self, *, delay_s: float = 0.0, status: int = 204) -> None:
        self.received: list[dict] = []
        self.paths: list[str] = []
        self.delay_s = delay_s
        self.status = status
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/hooks/T000/SECRET-PATH"

    def start(self) -> Webhook:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                owner.received.append(orjson.loads(body))
                owner.paths.append(self.path)
                time.sleep(owner.delay_s)
                self.send_response(owner.status)
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def texts(self) -> list[str]:
        return [body["text"] for body in self.received]
