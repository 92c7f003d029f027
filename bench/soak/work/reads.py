"""Readers and the tenant's admin: searches in every mode and cited answers, and the admin's
routine of redriving what reached the dead-letter queue and retrying runs that say
``retryable: true``. The admin acts only while the load runs: what happens after it (the
settling) must need nobody (invariant 5), so each action is recorded with its time."""

from __future__ import annotations

from dataclasses import dataclass

from bench.soak.work import Pool
from tests.support import corpus

READER_PATIENCE_S = 30.0


class Reads(Pool):
    kind = "search"
    pause_s = (0.5, 2.5)

    def step(self) -> None:
        query = self.rng.choice(corpus.QUERIES)
        # A person asks again after a refusal that says when (model_loading, a busy server),
        # for as long as they would wait on a search page.
        if self.rng.random() < 0.25:
            self.api.until_answered("POST", "/v1/ask", json={"question": query},
                                    give_up_s=READER_PATIENCE_S, stop=self.stopped)
            return
        mode = self.rng.choice(("text", "hybrid", "vector"))
        response = self.api.until_answered("GET", "/v1/search", params={"q": query, "mode": mode},
                                           label=f"GET /v1/search?mode={mode}",
                                           give_up_s=READER_PATIENCE_S, stop=self.stopped)
        if response is not None and response.status_code == 200:
            self.ctx.journal.acknowledged(self.kind)


@dataclass(frozen=True)
class Action:
    at_s: float
    what: str       # "redrive" or "retry"
    target: str     # the run id, or "all"
    status: int | None


class Admin(Pool):
    kind = "ops"
    pause_s = (15.0, 30.0)

    def __init__(self, ctx, n: int = 0) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx, n)
        self.actions: list[Action] = []

    def step(self) -> None:
        letters = self.api.until_answered("GET", "/v1/dead-letters", give_up_s=30,
                                          stop=self.stopped)
        if self.stopped():
            return
        if letters is not None and letters.status_code == 200 and letters.json().get("items"):
            done = self.api.once("POST", "/v1/dead-letters/redrive",
                                 json={"all": True, "reason": "soak: the admin's redrive"})
            self.actions.append(Action(self.ctx.journal.now(), "redrive", "all",
                                       done.status_code if done is not None else None))
        failed = self.api.until_answered("GET", "/v1/ingestion-runs", give_up_s=30,
                                         stop=self.stopped,
                                         params={"status": "failed", "limit": 50})
        if failed is None or failed.status_code != 200:
            return
        for run in failed.json()["items"]:
            if self.stopped():
                return  # the admin's routine is the load's; the settling needs nobody
            if not run.get("retryable") or str(run.get("doc_id")) in self.ctx.versioned_docs:
                continue
            done = self.api.once("POST", f"/v1/ingestion-runs/{run['run_id']}/retry",
                                 label="POST /v1/ingestion-runs/{id}/retry",
                                 json={"reason": "soak: the admin's retry"})
            self.actions.append(Action(self.ctx.journal.now(), "retry", str(run["run_id"]),
                                       done.status_code if done is not None else None))
            if done is not None and done.status_code == 202:
                self.ctx.journal.acknowledged(self.kind)
