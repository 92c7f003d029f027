"""The client pools of the soak: each a thread (or a few) doing one kind of work the way its
users do, recording what it sent and what it was told. A pool's own error (the soak's bug, not
the product's) is recorded in ``Ctx.problems`` and reported; the pool carries on."""

from __future__ import annotations

import random
import threading
import time
import traceback
from dataclasses import dataclass, field

from bench.soak.journal import Api, Journal
from bench.soak.stack import Stack


@dataclass
class Ctx:
    stack: Stack
    journal: Journal
    seed: int
    texts: list[str]
    load_over: threading.Event = field(default_factory=threading.Event)
    problems: list[str] = field(default_factory=list)
    versioned_docs: set[str] = field(default_factory=set)

    def api(self, kind: str, token: bool = True) -> Api:
        return Api(self.stack.url, self.journal, kind, self.stack.token() if token else None)


class Pool(threading.Thread):
    kind = "work"
    pause_s = (1.0, 3.0)

    def __init__(self, ctx: Ctx, n: int = 0) -> None:
        super().__init__(name=f"soak-{self.kind}-{n}", daemon=True)
        self.ctx = ctx
        self.rng = random.Random(f"{self.kind}-{n}-{ctx.seed}")
        self.api = ctx.api(self.kind)
        self._lock = threading.Lock()

    def run(self) -> None:
        try:
            if not self._guarded(self.setup):
                return
            while not self.ctx.load_over.is_set():
                self._guarded(self.step)
                self.ctx.load_over.wait(self.rng.uniform(*self.pause_s))
            self._guarded(self.finish)
        finally:
            self.api.close()

    def _guarded(self, fn) -> bool:  # type: ignore[no-untyped-def]
        try:
            fn()
            return True
        except Exception:  # noqa: BLE001 - the soak's own failure: reported, not fatal
            self.ctx.problems.append(f"{self.name}: {traceback.format_exc(limit=4)}")
            time.sleep(1)
            return False

    def setup(self) -> None:
        pass

    def step(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        pass

    def stopped(self) -> bool:
        return self.ctx.load_over.is_set()
