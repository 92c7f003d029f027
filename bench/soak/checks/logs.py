"""6. The logs: no personal data or secret, no traceback an injected fault does not explain, and
no answer 500 to a client.

``gather`` reads the logs; ``judge`` decides from what was gathered
(tests/unit/test_soak_checks.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import orjson

from bench.soak.checks.world import Verdict, World, verdict
from bench.soak.faults import Fault
from bench.soak.journal import Call
from tests.support import logscan

# What a fault may make a process log with its traceback: the error types of its family.
FAMILIES = {
    "kill_postgres": r"Operational|AdminShutdown|Interface|Connection|DatabaseUnavailable|"
                     r"PoolTimeout|CrashShutdown|ServiceUnavailable|Unavailable|Closed",
    "kill_moto": r"Endpoint|Connect|ReadTimeout|ClientError|QueueUnavailable|Unavailable|"
                 r"ProtocolError|RemoteDisconnected|Closed",
    "queue_outage": r"Endpoint|Connect|ReadTimeout|ClientError|QueueUnavailable|Unavailable|"
                    r"ProtocolError|RemoteDisconnected|Closed",
    # Only the store's own translation of ENOSPC: a bare OSError is a path that missed it.
    "disk_full": r"StorageUnavailable",
}
GRACE_S = 90.0


@dataclass
class Facts:
    logs: dict[str, str]          # log file name → its text
    personal: set[str]            # every name, e-mail, phone and address the soak sent
    faults: list[Fault]
    calls: list[Call]


def gather(world: World) -> Facts:
    return Facts({path.name: path.read_text(errors="replace") for path in world.logs},
                 _personal(world), list(world.faults), list(world.calls))


def judge(facts: Facts) -> list[Verdict]:
    found_personal: list[str] = []
    tracebacks: list[str] = []
    attributed = 0
    for name, text in facts.logs.items():
        for kind, line in logscan.scan_text(text):
            found_personal.append(f"{name}: {kind}: {line[:200]}")
        for value in facts.personal:
            if value in text:
                found_personal.append(f"{name}: a value the soak sent as personal data "
                                      f"({_mask(value)})")
        if name == "ingest-dev.log":
            for when, error_type, head in _tracebacks(text):
                if _caused(facts.faults, when, error_type):
                    attributed += 1
                else:
                    tracebacks.append(f"{when} {error_type}: {head[:200]}")
    errors = [c for c in facts.calls if c.status == 500]
    answered = [f"{c.endpoint} at {c.at_s:.0f}s" for c in errors]
    return [verdict("6a", "log lines with personal data or secrets (must be 0)",
                    len(found_personal), found_personal,
                    f"{len(facts.personal)} personal values sent, {len(facts.logs)} logs"),
            verdict("6b", "tracebacks not caused by an injected fault (must be 0)",
                    len(tracebacks), tracebacks, f"{attributed} caused by injected faults"),
            # A fault may make the product answer 503 (retry later), never 500: an unhandled
            # error says nothing a client can act on.
            verdict("6c", "answers 500 (an unhandled error) to the clients (must be 0)",
                    len(errors), answered, f"{len(facts.calls)} calls")]


def _personal(world: World) -> set[str]:
    values: set[str] = set()
    for s in world.imports.sent:
        values |= s.file.personal
    for sent in world.events.by_id.values():
        values.add(sent.event.body["payload"]["Defendant"])
    return {v for v in values if len(v) >= 8}


def _mask(value: str) -> str:
    return value[:2] + "…" + value[-2:]


# The exception lines of a traceback ("    | psycopg.OperationalError: server closed …"):
# what an ExceptionGroup holds, e.g. a sync's task group that met a database outage.
_RAISED = re.compile(r"^[ |+\-]*((?:\w+\.)*\w+)(?::|$)", re.MULTILINE)


def _tracebacks(text: str) -> Iterable[tuple[float | None, str, str]]:
    for line in text.splitlines():
        if "Traceback (most recent call last)" not in line:
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            yield None, "raw", line
            continue
        when = datetime.fromisoformat(record["ts"]).timestamp() if "ts" in record else None
        error_type = str(record.get("error_type", "?"))
        if error_type.endswith("ExceptionGroup"):
            inner = {m.rsplit(".", 1)[-1] for m in _RAISED.findall(record.get("traceback", ""))
                     if m.rsplit(".", 1)[-1][:1].isupper()}
            error_type = " ".join(sorted(inner - {"Traceback", error_type})) or error_type
        yield when, error_type, f"{record.get('event')}: {record.get('error', '')}"


def _caused(faults: list[Fault], when: float | None, error_type: str) -> bool:
    if when is None:
        return False
    for fault in faults:
        family = FAMILIES.get(fault.kind)
        if family and fault.started_at - 2 <= when <= fault.ended_at + GRACE_S \
                and re.search(family, error_type):
            return True
    return False
