"""A real local HTTP server standing in for a tenant's webhook receiver: records each request's
headers and raw body, answers the statuses it is told to (e.g. 500, 500, then 200)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    def __init__(self, statuses: list[int] | None = None, default: int = 200,
                 hang_first: bool = False, delay_s: float = 0.0) -> None:
        self.requests: list[Request] = []
        # The first request gets no answer until stop(): a sender that dies mid-POST.
        self._hang = threading.Event() if hang_first else None
        self._statuses = list(statuses or [])
        self._default = default
        self._delay_s = delay_s  # each answer waits this long after the request is recorded
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/hooks/dragonfly?token=t0p"

    def start(self) -> Receiver:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with owner._lock:
                    owner.requests.append(Request(self.path, dict(self.headers), body))
                    status = owner._statuses.pop(0) if owner._statuses else owner._default
                    hang = owner._hang is not None and len(owner.requests) == 1
                if hang and owner._hang is not None:
                    owner._hang.wait()
                    return
                time.sleep(owner._delay_s)
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._hang is not None:
            self._hang.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
