"""Ledger events from a producer with an API key: batches sent out of order (some events held
back and sent later, after newer ones of the same entity), duplicates of events already sent,
now and then an earlier id with another payload (a conflict: the first must be kept), and
poison events whose payload no contract accepts (they must end dead-lettered with a reason)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.soak.data import Event, Events
from bench.soak.work import Ctx, Pool


@dataclass
class Sent:
    event: Event
    first_body: dict                       # what the ledger must keep
    outcomes: list[str] = field(default_factory=list)  # each acknowledged answer for it
    unanswered: int = 0                    # sends that got no final answer


class EventsPool(Pool):
    kind = "event"
    pause_s = (0.5, 2.0)

    def __init__(self, ctx: Ctx, n: int = 0) -> None:
        super().__init__(ctx, n)
        self.events = Events(self.rng)
        self.key = ""
        self.held: list[Event] = []
        self.by_id: dict[str, Sent] = {}

    def setup(self) -> None:
        response = self.api.until_answered("POST", "/v1/api-keys", json={"name": "soak"})
        assert response is not None and response.status_code == 201, response
        self.key = response.json()["key"]

    def step(self) -> None:
        fresh = [self.events.make() for _ in range(self.rng.randint(3, 12))]
        batch: list[tuple[Event, dict]] = []
        for event in fresh:
            if self.rng.random() < 0.2:
                self.held.append(event)  # sent later, after newer events
            else:
                batch.append((event, event.body))
        if self.held and self.rng.random() < 0.5:
            late, self.held = self.held[:3], self.held[3:]
            batch += [(e, e.body) for e in late]
        known = [s for s in self.by_id.values() if s.outcomes]
        for _ in range(self.rng.randint(0, 3) if known else 0):
            again = self.rng.choice(known).event
            if self.rng.random() < 0.15:  # the same id with another payload: a conflict
                body = {**again.body, "payload": {**again.body["payload"], "Court": "Altered"}}
                batch.append((again, body))
            else:
                batch.append((again, again.body))
        self.rng.shuffle(batch)
        self._send(batch)

    def finish(self) -> None:
        while self.held:  # every event made is sent once at least
            late, self.held = self.held[:10], self.held[10:]
            self._send([(e, e.body) for e in late])

    def _send(self, batch: list[tuple[Event, dict]]) -> None:
        for event, body in batch:
            self.by_id.setdefault(event.source_event_id, Sent(event, body))
        response = self.api.until_answered(
            "POST", "/v1/events", json=[body for _, body in batch],
            headers={"X-Api-Key": self.key})
        if response is None or response.status_code != 202:
            for event, _ in batch:
                self.by_id[event.source_event_id].unanswered += 1
            return
        for (event, _), outcome in zip(batch, response.json()["outcomes"], strict=True):
            self.by_id[event.source_event_id].outcomes.append(outcome["outcome"])
        self.ctx.journal.acknowledged(self.kind, len(batch))
