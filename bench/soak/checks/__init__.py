"""The invariants of issue 24, checked after the system settled, each printed with its count.

The expectation side is always what the clients were told (an acknowledged upload, batch or
event must be durable and finished) and what the soak itself generated (the files' rows, the
bucket's objects, the events' sequences); the product's own records are only the thing
checked. Reads go through the API where a client would read, and through SQL (reads only)
for what no API shows (chunks, index rows, the outbox of completion events). No check counts
what a unique key already guarantees, and every one can fail: tests/unit/test_soak_checks.py
feeds each a world broken in its way and sees it fail.
"""

from __future__ import annotations

from bench.soak.checks import documents, events, imports, logs, operators, sources
from bench.soak.checks.world import SHOWN, Verdict, World

__all__ = ["SHOWN", "Verdict", "World", "run_all"]


CHECKS = (documents, imports, events, sources, operators, logs)


def run_all(world: World) -> list[Verdict]:
    """Each check gathers what it reads, then judges from that alone: the judging is what
    tests/unit/test_soak_checks.py hands a broken world to, one invariant at a time."""
    out: list[Verdict] = []
    for check in CHECKS:
        out += check.judge(check.gather(world))  # type: ignore[attr-defined]
    return out
