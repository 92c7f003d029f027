"""An HTTP proxy in front of the real SQS endpoint that makes the queue refuse chosen messages.

Real SQS answers SendMessageBatch with per-entry failures (``Failed``) that moto only produces
for an invalid DelaySeconds. This proxy forwards every request to the real server, but for
SendMessageBatch (botocore's JSON protocol: ``X-Amz-Target: AmazonSQS.SendMessageBatch``) it
takes out the entries whose body names a chosen run id, forwards the rest, and answers those
entries in ``Failed`` with the fault the test chose. A refused entry never reaches the queue,
as with real SQS. It can also hold SendMessageBatch requests, so a test can pile several jobs
into one batch. The interface (``url``, ``port``, ``start``, ``stop``) matches TcpProxy's.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson

SEND_BATCH = "AmazonSQS.SendMessageBatch"
# Headers that describe one hop, not the message; the proxy sets its own.
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass(frozen=True)
class EntryFault:
    """One per-entry failure, shaped as SQS returns it in SendMessageBatch's ``Failed``."""

    code: str
    message: str
    sender_fault: bool


# What real SQS answers for a body it will not accept, and for a failure on its side.
REFUSED = EntryFault("InvalidMessageContents",
                     "Invalid binary character '#x1' was found in the message body.", True)
TRANSIENT = EntryFault("InternalError", "We encountered an internal error. Please try again.",
                       False)


@dataclass(frozen=True)
class SentEntry:
    """One entry of a SendMessageBatch the proxy saw: its body and what it answered."""

    batch: int
    body: str
    fault: EntryFault | None


class SqsFaultProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.faults: dict[str, EntryFault] = {}  # a run id (found in a message body) -> fault
        self.seen: list[SentEntry] = []  # every SendMessageBatch entry, in order
        self.batches = 0
        self.held = 0  # SendMessageBatch requests now waiting at the gate
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> SqsFaultProxy:
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._open.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def hold(self) -> None:
        """Make SendMessageBatch requests wait until release(); other requests pass."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def entries_for(self, run_id: str) -> list[SentEntry]:
        with self._lock:
            return [e for e in self.seen if run_id in e.body]

    def _send_batch(self, body: bytes,
                    forward: Callable[[bytes], tuple[int, bytes]]) -> tuple[int, bytes]:
        """Split the batch into refused and forwarded entries; merge the two answers."""
        with self._lock:
            self.held += 1
        self._open.wait()
        request = orjson.loads(body)
        with self._lock:
            self.held -= 1
            self.batches += 1
            batch = self.batches
            refused: dict[str, EntryFault] = {}
            for entry in request["Entries"]:
                fault = next((f for run_id, f in self.faults.items()
                              if run_id in entry["MessageBody"]), None)
                self.seen.append(SentEntry(batch, entry["MessageBody"], fault))
                if fault:
                    refused[entry["Id"]] = fault
        passed = [e for e in request["Entries"] if e["Id"] not in refused]
        if passed:
            status, answer = forward(orjson.dumps({**request, "Entries": passed}))
            if status != 200:
                return status, answer
            result = orjson.loads(answer)
        else:  # SQS refuses an empty batch; nothing goes upstream
            result = {"Successful": []}
        result["Failed"] = result.get("Failed", []) + [
            {"Id": id_, "SenderFault": f.sender_fault, "Code": f.code, "Message": f.message}
            for id_, f in refused.items()]
        return 200, orjson.dumps(result)


def _handler(proxy: SqsFaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as boto3's connection pool expects

        def _relay(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            reply_headers: list[tuple[str, str]] = []

            def forward(data: bytes) -> tuple[int, bytes]:
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.target_port, timeout=60)
                try:
                    upstream.request(self.command, self.path, body=data, headers=headers)
                    response = upstream.getresponse()
                    payload = response.read()
                    reply_headers[:] = [(k, v) for k, v in response.getheaders()
                                        if k.lower() not in HOP_HEADERS]
                    return response.status, payload
                finally:
                    upstream.close()

            if self.headers.get("X-Amz-Target") == SEND_BATCH:
                status, payload = proxy._send_batch(body, forward)
                if not reply_headers:
                    reply_headers.append(("Content-Type", "application/x-amz-json-1.0"))
            else:
                status, payload = forward(body)
            self.send_response(status)
            for key, value in reply_headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _relay

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass  # the test reads the proxy's state, not its access log

    return Handler

