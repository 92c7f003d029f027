"""The invariants of issue 24, checked after the system settled, each printed with its count.

The expectation side is always what the clients were told (an acknowledged upload, batch or
event must be durable and finished) and what the soak itself generated (the files' rows, the
bucket's objects, the events' sequences); the product's own records are only the thing
checked. Reads go through the API where a client would read, and through SQL (reads only)
for what no API shows (chunks, index rows, the outbox of completion events).
"""

from __future__ import annotations

from bench.soak.checks import documents, events, imports, logs, operators, sources
from bench.soak.checks.world import SHOWN, Verdict, World

__all__ = ["SHOWN", "Verdict", "World", "run_all"]


def run_all(world: World) -> list[Verdict]:
    out: list[Verdict] = []
    for check in (documents.check, imports.check, events.check, sources.check, operators.check,
                  logs.check):
        out += check(world)
    return out
