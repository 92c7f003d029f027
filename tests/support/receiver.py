"""A real local HTTP server standing in for a tenant's webhook receiver: records each request's
headers and raw body, answers the statuses it is told to (e.g. 500, 500, then 200)."""

from __future__ import annotations

import select
import socket
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
        self.arrived_at: list[float] = []  # time.monotonic() of each request, in order
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
                    owner.arrived_at.append(time.monotonic())
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


class Dribbler:
    """A receiver that takes every POST, answers 200 with a Content-Length of ``length`` and
    then sends the body one byte every ``every_s`` seconds: a slow or hostile endpoint that
    never trips a per-read timeout. Records when each request arrived and how many were open
    at once, in all and per path."""

    def __init__(self, *, length: int = 100, every_s: float = 1.0) -> None:
        self.length, self.every_s = length, every_s
        self.arrivals: list[tuple[float, str]] = []
        self.open_now: dict[str, int] = {}
        self.most_open = 0
        self.most_open_per_path: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    def url(self, path: str) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def start(self) -> Dribbler:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                self.rfile.read(int(self.headers.get("content-length", 0)))
                path = self.path
                with owner._lock:
                    owner.arrivals.append((time.monotonic(), path))
                    owner.open_now[path] = owner.open_now.get(path, 0) + 1
                    owner.most_open = max(owner.most_open, sum(owner.open_now.values()))
                    owner.most_open_per_path[path] = max(
                        owner.most_open_per_path.get(path, 0), owner.open_now[path])
                try:
                    self.send_response(200)
                    self.send_header("content-length", str(owner.length))
                    self.end_headers()
                    for _ in range(owner.length):
                        if self._gone(owner.every_s) or owner._stopping.is_set():
                            return
                        self.wfile.write(b"x")
                        self.wfile.flush()
                except OSError:
                    pass  # the sender gave up: what we are here to see
                finally:
                    with owner._lock:
                        owner.open_now[path] -= 1

            def _gone(self, wait_s: float) -> bool:
                """Waits ``wait_s``; True as soon as the sender closed the connection (so the
                open counts are the sender's, not this server's lagging view)."""
                readable, _, _ = select.select([self.connection], [], [], wait_s)
                return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""

            def log_message(self, *_: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
