"""Three webhook receivers of the tenant, real HTTP servers in the soak's process: one healthy,
one that fails half of its requests (500), one slow (answers 200 after 2 s, inside the
dispatcher's 5 s timeout). Each keeps every request it answered 2xx, with its headers."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook

from bench.soak.journal import Api


@dataclass(frozen=True)
class Received:
    webhook_id: str
    headers: dict[str, str]
    body: bytes
    status: int
    signature_error: str | None  # checked on receipt, as a receiver does (its clock matters)


class Endpoint:
    def __init__(self, name: str, seed: int, *, fail_share: float = 0.0,
                 delay_s: float = 0.0) -> None:
        self.name = name
        self.fail_share = fail_share
        self.delay_s = delay_s
        self.rng = random.Random(f"hook-{name}-{seed}")
        self.requests: list[Received] = []
        self.webhook_id = ""   # the product's id of this endpoint
        self.secret = ""
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def healthy(self) -> bool:
        """Answers 2xx within the dispatcher's timeout: every event must reach it."""
        return self.fail_share == 0

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/hooks/{self.name}"

    def start(self) -> Endpoint:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with owner._lock:
                    fail = owner.rng.random() < owner.fail_share
                status = 500 if fail else 200
                problem = owner.verify(body, dict(self.headers))
                time.sleep(owner.delay_s)
                with owner._lock:
                    owner.requests.append(Received(self.headers.get("webhook-id", ""),
                                                   dict(self.headers), body, status, problem))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def verify(self, body: bytes, headers: dict[str, str]) -> str | None:
        """The Standard Webhooks check a receiver makes: signature, and a timestamp within
        five minutes of its own clock."""
        try:
            Webhook(self.secret).verify(body, {k.lower(): v for k, v in headers.items()})
        except Exception as exc:  # noqa: BLE001 - any failure to verify is the finding
            return f"{type(exc).__name__}: {exc}"
        return None

    def register(self, api: Api) -> None:
        response = api.until_answered("POST", "/v1/webhooks", json={
            "url": self.url, "event_types": ["ingestion.complete"]})
        assert response is not None and response.status_code == 201, \
            response.text if response is not None else "no answer"
        self.webhook_id, self.secret = response.json()["webhook_id"], response.json()["secret"]

    def delivered(self) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if r.status < 300]

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def endpoints(seed: int) -> list[Endpoint]:
    return [Endpoint("healthy", seed).start(),
            Endpoint("flaky", seed, fail_share=0.5).start(),
            Endpoint("slow", seed, delay_s=2.0).start()]
