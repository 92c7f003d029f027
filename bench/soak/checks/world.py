"""What every check reads (the pools' records, the stack's handles) and what it answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row

from bench.soak.faults import Fault
from bench.soak.journal import Api, Call
from bench.soak.work.documents import Uploads, Versions
from bench.soak.work.events import EventsPool
from bench.soak.work.hooks import Endpoint
from bench.soak.work.reads import Admin
from bench.soak.work.records import Imports
from bench.soak.work.sources import Sources

FINAL_RUN = ("succeeded", "failed")
FINAL_BATCH = ("completed", "partial", "failed")
SHOWN = 5  # examples printed under a failed invariant


@dataclass
class Verdict:
    key: str
    text: str
    ok: bool
    count: int
    problems: list[str] = field(default_factory=list)
    note: str = ""

    def line(self) -> str:
        mark = "PASS" if self.ok else "FAIL"
        tail = f" ({self.note})" if self.note else ""
        return f"{mark} {self.key:<3} {self.text}: {self.count}{tail}"


def verdict(key: str, text: str, count: int, problems: list[str], note: str = "") -> Verdict:
    return Verdict(key, text, not problems, count, problems, note)


@dataclass
class World:
    """Everything the checks read: the pools' records and the stack's handles."""

    api: Api
    dsn: str
    tenant_id: Any
    uploads: list[Uploads]
    versions: Versions
    imports: Imports
    events: EventsPool
    sources: Sources
    admin: Admin
    endpoints: list[Endpoint]
    faults: list[Fault]
    load_end_at: float           # when the load ended, on the wall clock (epoch seconds)
    children: dict[str, int | None]
    workers: int
    gateways: int
    logs: list[Any]
    ready: bool
    calls: list[Call]

    def sql(self, query: str, params: Any = None) -> list[dict[str, Any]]:
        with psycopg.connect(self.dsn, row_factory=dict_row, autocommit=True) as conn:
            return conn.execute(query, params).fetchall()


