"""One soak from start to verdict: stack, pools, faults, settling, invariants, figures."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from bench.soak import checks, data, report
from bench.soak.faults import GAP_S, KINDS, Injector
from bench.soak.journal import Journal
from bench.soak.stack import Stack, alive
from bench.soak.work import Ctx, Pool
from bench.soak.work.documents import Uploads, Versions
from bench.soak.work.events import EventsPool
from bench.soak.work.hooks import endpoints
from bench.soak.work.reads import Admin, Reads
from bench.soak.work.records import Imports
from bench.soak.work.sources import Sources

DEV_TENANT = "dev"


@dataclass
class Options:
    minutes: float = 30.0
    seed: int = 1
    workers: int = 2
    settle_s: float = 600.0
    calm_s: float = 60.0           # the fault-free first minute
    out: Path = Path("test-output/soak")
    keep: bool = False             # keep the stack's folder (data, logs) after the run
    kinds: tuple[str, ...] = KINDS  # the faults to draw from (all by default)
    # Instead of a seeded draw, these faults in this order, ``gap_s`` apart (start to start,
    # each once the stack is whole again); the load then goes on ``tail_s`` and ends, at most
    # at ``minutes``. The test suite's short soak: every kind once in about 90 s of chaos.
    plan: tuple[str, ...] = ()
    gap_s: tuple[float, float] = GAP_S
    tail_s: float = 10.0
    # Product settings for every process of the stack, on top of the defaults (the test's short
    # soak shortens the visibility timeout, so redeliveries settle within its few minutes).
    settings: dict[str, str] = field(default_factory=dict)


@dataclass
class Result:
    verdicts: list[checks.Verdict]
    faults: dict[str, int]
    settled_s: float | None
    problems: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    recoveries: list[report.Recovery] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts) and not self.problems


def soak(opts: Options) -> Result:
    opts.out.mkdir(parents=True, exist_ok=True)
    for old in ("faults.jsonl", "customer-s3.log", "report.txt", "summary.json"):
        (opts.out / old).unlink(missing_ok=True)  # a report is of one run only
    folder = Path(tempfile.mkdtemp(prefix="ingest-soak-"))
    folder.chmod(0o755)
    stack = Stack(folder, opts.out, opts.workers, overrides=opts.settings)
    say(f"soak: seed {opts.seed}, {opts.minutes:g} min of load, {opts.workers} workers, "
        f"stack in {folder}, output in {opts.out}; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores")
    texts: list[str] = []
    reading = threading.Thread(target=lambda: texts.extend(data.paragraphs()), daemon=True)
    reading.start()  # parsing the standard library's docstrings takes a while: meanwhile
    began = time.monotonic()
    try:
        stack.start()
        reading.join()
        say(f"stack ready at {stack.url} in {time.monotonic() - began:.0f} s"
            + (f"; no disk-full fault: {stack.no_disk_fault}" if stack.no_disk_fault else ""))
        return _soak(opts, stack, texts)
    finally:
        code = stack.stop()
        say(f"stack stopped (ingest dev exited {code})")
        if not opts.keep:
            shutil.rmtree(folder, ignore_errors=True)


def _soak(opts: Options, stack: Stack, texts: list[str]) -> Result:
    t0, t0_wall = time.monotonic(), time.time()
    journal = Journal(t0)
    ctx = Ctx(stack, journal, opts.seed, texts)
    hooks = endpoints(opts.seed)
    setup = ctx.api("setup")
    for endpoint in hooks:
        endpoint.register(setup)
    uploads = [Uploads(ctx, 0)]
    versions, imports, events = Versions(ctx), Imports(ctx), EventsPool(ctx)
    sources, reads, admin = Sources(ctx), Reads(ctx), Admin(ctx)
    pools: list[Pool] = [*uploads, versions, imports, events, sources, reads, admin]
    injector = Injector(stack, opts.seed, t0, opts.out / "faults.jsonl",
                        first_after_s=opts.calm_s, kinds=opts.kinds, plan=opts.plan,
                        gap_s=opts.gap_s)
    for pool in pools:
        pool.start()
    injector.start()
    try:
        _load(opts, journal, injector)
    except BaseException:  # Ctrl-C: stop now, nothing to judge (the stack stops in soak())
        injector.stop.set()
        ctx.load_over.set()
        raise
    load_end_s = journal.now()
    injector.stop.set()
    injector.join(60)
    ctx.load_over.set()
    say("load over; the pools finish what they hold (the S3 pool syncs once more)")
    finishing = time.monotonic()
    for pool in pools:
        pool.join(420)
    say(f"pools finished in {time.monotonic() - finishing:.0f} s")
    settle_start = time.monotonic()
    tenant_id = _tenant(stack)
    settled = _settle(opts, stack, tenant_id, hooks)
    settled_s = time.monotonic() - settle_start if settled else None
    say(f"settled in {settled_s:.0f} s" if settled_s is not None else
        f"NOT settled within {opts.settle_s:.0f} s; checking what is there")
    children = {name: pid if alive(pid) else None for name, pid in stack.children().items()}
    world = checks.World(
        api=setup, dsn=stack.database_url, tenant_id=tenant_id, uploads=uploads,
        versions=versions, imports=imports, events=events, sources=sources, admin=admin,
        endpoints=hooks, faults=injector.injected(),
        load_end_at=t0_wall + load_end_s, children=children, workers=opts.workers,
        gateways=stack.gateways, logs=stack.server_logs(), ready=_ready(stack),
        calls=journal.snapshot()[0])
    checking = time.monotonic()
    verdicts = checks.run_all(world)
    say(f"invariants checked in {time.monotonic() - checking:.0f} s")
    recoveries = report.client_recovery(injector.injected(), world.calls, journal.requests(),
                                        load_end_s)
    result = Result(verdicts, dict(_count_faults(injector)), settled_s, list(ctx.problems),
                    recoveries=recoveries)
    result.lines = _print(opts, result, injector, journal, stack, tenant_id, t0_wall,
                          load_end_s)
    for endpoint in hooks:
        endpoint.stop()
    setup.close()
    return result


def _load(opts: Options, journal: Journal, injector: Injector) -> None:
    end = time.monotonic() + opts.minutes * 60
    next_note = time.monotonic() + 30
    while time.monotonic() < end:
        if opts.plan and injector.planned_done.is_set():  # the planned faults are over
            end = min(end, time.monotonic() + opts.tail_s)
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
        if time.monotonic() >= next_note:
            next_note += 30
            calls, done = journal.snapshot()
            failed = sum(1 for c in calls if c.status is None or c.status >= 500)
            say(f"[soak {journal.now():7.1f}s] {len(done)} pieces of work acknowledged, "
                f"{len(calls)} calls ({failed} without an answer or 5xx)")


def _tenant(stack: Stack) -> Any:
    with psycopg.connect(stack.database_url, row_factory=dict_row) as conn:
        row = conn.execute("SELECT tenant_id FROM tenants WHERE name = %s",
                           (DEV_TENANT,)).fetchone()
    assert row is not None, "ingest dev made no dev tenant"
    return row["tenant_id"]


SETTLED = """
SELECT
  (SELECT count(*) FROM ingestion_runs WHERE tenant_id = %(t)s
     AND status IN ('queued', 'running')) AS runs,
  (SELECT count(*) FROM import_batches WHERE tenant_id = %(t)s
     AND status NOT IN ('completed', 'partial', 'failed')) AS batches,
  (SELECT count(*) FROM event_ledger WHERE tenant_id = %(t)s
     AND process_state = 'pending') AS events,
  (SELECT count(*) FROM source_syncs WHERE tenant_id = %(t)s AND status = 'running') AS syncs,
  (SELECT count(*) FROM webhook_deliveries WHERE tenant_id = %(t)s AND status = 'pending'
     AND webhook_id = ANY(%(healthy)s)) AS deliveries
"""


def _settle(opts: Options, stack: Stack, tenant_id: Any, hooks: list) -> bool:
    """Wait, touching nothing, until no work is left and every process is up."""
    healthy = [h.webhook_id for h in hooks if h.healthy]
    deadline = time.monotonic() + opts.settle_s
    next_note = 0.0
    while True:
        left: dict[str, Any] = {}
        with contextlib.suppress(psycopg.Error):
            with psycopg.connect(stack.database_url, row_factory=dict_row,
                                 connect_timeout=5) as conn:
                row = conn.execute(SETTLED, {"t": tenant_id, "healthy": healthy}).fetchone()
            left = {k: v for k, v in (row or {}).items() if v}
        down = [n for n, pid in stack.children().items() if not alive(pid)]
        if not left and not down and _ready(stack):
            return True
        if time.monotonic() >= deadline:
            say(f"still left: {left or '-'}; down: {down or '-'}")
            return False
        if time.monotonic() >= next_note:
            next_note = time.monotonic() + 15
            say(f"settling: left {left or '-'}, down {down or '-'}")
        time.sleep(3)


def _ready(stack: Stack) -> bool:
    return stack.ready()


def _count_faults(injector: Injector) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in injector.injected():
        counts[f.kind] = counts.get(f.kind, 0) + 1
    return counts


FINISHED = """
SELECT 'document runs' AS kind, extract(epoch FROM finished_at) - %(t0)s AS at_s
  FROM ingestion_runs WHERE tenant_id = %(t)s AND status = 'succeeded' AND batch_id IS NULL
UNION ALL
SELECT 'import batches', extract(epoch FROM completed_at) - %(t0)s FROM import_batches
  WHERE tenant_id = %(t)s AND status IN ('completed', 'partial')
UNION ALL
SELECT 'ledger events', extract(epoch FROM processed_at) - %(t0)s FROM event_ledger
  WHERE tenant_id = %(t)s AND process_state = 'processed'
"""


def _print(opts: Options, result: Result, injector: Injector, journal: Journal, stack: Stack,
           tenant_id: Any, t0_wall: float, load_end_s: float) -> list[str]:
    calls, done = journal.snapshot()
    with psycopg.connect(stack.database_url, row_factory=dict_row) as conn:
        rows = conn.execute(FINISHED, {"t": tenant_id, "t0": t0_wall}).fetchall()
    lines = [f"seed {opts.seed}; {opts.minutes:g} min of load; first {opts.calm_s:.0f} s "
             f"without faults; {stack.gateways} gateway and {opts.workers} worker processes",
             "", "faults injected (clients served again: from the fault to the first request "
             "served after the last one that failed; requests ok: of the clients' requests, "
             "with their retries, begun before the next fault):"]
    lines += report.faults_summary(injector.faults, result.recoveries)
    if stack.no_disk_fault:
        lines.append(f"  (disk_full left out: {stack.no_disk_fault})")
    lines += ["", "targets (issue 36), from the clients' side:"]
    lines += report.targets(result.recoveries)
    lines += ["", "invariants:"] + [f"  {v.line()}" for v in result.verdicts]
    for v in result.verdicts:
        if v.problems:
            lines.append(f"  {v.key}: {len(v.problems)} problem(s), e.g.:")
            lines += [f"      {p}" for p in v.problems[:checks.SHOWN]]
    if result.problems:
        lines += ["", "the soak's own errors (its bugs, not the product's):"]
        lines += [f"  {p.strip()}" for p in result.problems[:10]]
    lines += ["", "acknowledged work per minute:"]
    lines += report.throughput(done, opts.calm_s, load_end_s)
    lines += ["", "finished work per minute (from the database):"]
    lines += report.finished(rows, opts.calm_s, load_end_s)
    lines += ["", "latency per endpoint:"] + report.latency(calls, opts.calm_s, load_end_s)
    lines += ["", f"settled in {result.settled_s:.0f} s" if result.settled_s is not None
              else "did NOT settle", "ALL INVARIANTS HOLD" if result.ok else "SOAK FAILED"]
    text = "\n".join(lines)
    print("\n" + text, flush=True)
    (opts.out / "report.txt").write_text(text + "\n")
    (opts.out / "summary.json").write_text(json.dumps({
        "seed": opts.seed, "minutes": opts.minutes, "ok": result.ok,
        "faults": result.faults, "settled_s": result.settled_s,
        "recovery": [{"n": r.fault.n, "kind": r.fault.kind, "target": r.fault.target,
                      "started_s": r.fault.started_s, "served_again_s": r.served_again_s,
                      "failed_attempts": r.failed_attempts, "requests": r.requests,
                      "succeeded": r.succeeded, "processes_ready_s": r.fault.recovered_s}
                     for r in result.recoveries],
        "targets": report.targets(result.recoveries),
        "invariants": [{k: v for k, v in asdict(verdict).items() if k != "problems"}
                       | {"problems": verdict.problems[:20]} for verdict in result.verdicts],
        "problems": result.problems}, indent=1, default=str))
    return lines


def say(text: str) -> None:
    print(text, flush=True)
