"""A local webhook receiver for alert tests: the webhook receiver (tests/support/receiver.py)
at a Slack-like secret path, with each posted body read as JSON."""

from __future__ import annotations

import orjson

from tests.support.receiver import Receiver


class Webhook(Receiver):
    def __init__(self, *, delay_s: float = 0.0, status: int = 204) -> None:
        super().__init__(default=status, delay_s=delay_s)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/hooks/T000/SECRET-PATH"

    @property
    def received(self) -> list[dict]:
        return [orjson.loads(r.body) for r in list(self.requests)]

    @property
    def paths(self) -> list[str]:
        return [r.path for r in list(self.requests)]

    def texts(self) -> list[str]:
        return [body["text"] for body in self.received]
