"""A server-sent-events client for tests: reads GET /v1/live in a thread, event by event, as a
browser's EventSource would (comments, `id:`, `event:`, multi-line `data:`)."""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import dataclass, field

import httpx


@dataclass
class Event:
    event: str
    data: dict
    id: str | None = None


@dataclass
class Stream:
    """An open stream; `opened` is set once the server's first comment (": live") arrived,
    which it sends only after this stream is subscribed."""

    url: str
    headers: dict[str, str]
    status: int | None = None
    content_type: str = ""
    opened: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)
    comments: list[str] = field(default_factory=list)
    # Why the stream ended other than cleanly (the server cut it mid-chunk), or None.
    error: str | None = None
    _events: queue.Queue = field(default_factory=queue.Queue)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Stream:
        threading.Thread(target=self._read, daemon=True).start()
        if not self.opened.wait(30):
            raise AssertionError(f"the stream did not open (status {self.status})")
        return self

    def close(self) -> None:
        self._stop.set()

    def next(self, timeout: float = 30) -> Event:
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no event within {timeout} s") from None

    def until(self, predicate, timeout: float = 30) -> tuple[Event, list[Event]]:
        """The first event that matches, and every event before it."""
        before: list[Event] = []
        while True:
            event = self.next(timeout)
            if predicate(event):
                return event, before
            before.append(event)

    def _read(self) -> None:
        try:
            with httpx.Client(timeout=httpx.Timeout(60, read=120)) as client, \
                    client.stream("GET", self.url, headers=self.headers) as response:
                self.status = response.status_code
                self.content_type = response.headers.get("content-type", "")
                if response.status_code != 200:
                    return
                fields: dict[str, list[str]] = {}
                for line in response.iter_lines():
                    if self._stop.is_set():
                        return
                    if line.startswith(":"):
                        self.comments.append(line[1:].strip())
                        self.opened.set()
                    elif line == "":
                        if "data" in fields or "event" in fields:
                            self._events.put(Event(
                                fields.get("event", ["message"])[0],
                                json.loads("\n".join(fields.get("data", ["{}"]))),
                                fields.get("id", [None])[0]))
                        fields = {}
                    else:
                        name, _, value = line.partition(":")
                        fields.setdefault(name, []).append(value.removeprefix(" "))
        except httpx.HTTPError as exc:
            # The server went away mid-stream: the stream has ended, as `ended` says
            self.error = f"{type(exc).__name__}: {exc}"

        finally:
            self.ended.set()
            self.opened.set()


def open_stream(base_url: str, token: str | None = None, *, last_event_id: str | None = None,
                cookie: str | None = None) -> Stream:
    headers = {"Accept": "text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if cookie:
        headers["Cookie"] = cookie
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    return Stream(f"{base_url}/v1/live", headers).start()
