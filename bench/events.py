"""Measure event intake (POST /v1/events) and ledger apply beside hand-written baselines on the
same database, with the machine's load printed beside each figure.

    python bench/events.py [--seconds 15] [--clients 16] [--batch 100] [--rounds 1]
                           [--open-loop 0.3,0.5]
                           [--apply 20000] [--skip-intake] [--durable] [--quick]

Starts Postgres and moto (cli.embedded), migrates, makes a tenant and an API key, and runs
`ingest gateway` as a subprocess with its default event settings, measured once it is ready
(/health/ready: its query model loaded). Every phase starts on an
empty table, so none pays for the rows another left behind. Then:

(a) intake: --clients threads, each with its own HTTP connection, send batches of --batch new
    events (sequence and emitted time set, a small judgment payload) for --seconds; counted are
    events answered 202 (the answer comes after commit); p50 and p95 of the requests.
    Beside it the writer's groups from the gateway's /metrics: how many, the mean group, how
    many lingered (EVENTS_GROUP_LINGER_MS, ADR 0340).
(b) bare_executemany: --clients connections, each sends batches of --batch events as one
    transaction of psycopg's `executemany` (pipelined) of a one-row `INSERT ... ON CONFLICT DO
    UPDATE ... RETURNING`, for --seconds.
(c) bare_copy: --clients connections, each batch one transaction: `COPY` into a temporary
    table, then `INSERT ... SELECT ... ON CONFLICT DO UPDATE ... RETURNING`.
    (b) and (c) write a copy of the ledger table (`LIKE event_ledger INCLUDING ALL` plus its
    foreign key: the same columns, defaults, checks and indexes), share none of the product's
    code, and do what a competent engineer does by hand for the same job: canonical JSON and
    SHA-256 of each payload, the row, and each event's ledger id and new/repeat back. They do
    no HTTP, no per-event checks, no queue. Targets: (a) >= 1.0x (b), >= 0.6x (c), p95 < 100 ms.
    --rounds N runs (a), (b), (c) N times, each round starting with the next phase (a-b-c,
    b-c-a, c-a-b, ...), and reports each phase's median, every round's figures and load, and
    the ratios as the median of the rounds' own ratios (use 3 or more: one round's ratio
    moves with whatever else the machine did then).
    --open-loop F[,F...] then offers (a) and (c) a fixed rate, F x (c)'s closed-loop events/s, each
    client sending its batches on a schedule whether or not its last answer came: latency is
    clocked from each batch's scheduled time (a batch sent late waited in the client, which a
    producer's queue would too). Beside the closed loop's p95 it says what is queueing (16
    clients that wait for each other's commits) and what is work (ADR 0288).
(e) --purge N: N pending junk events of one type (and 10,000 other events beside them) are
    discarded by filter through the product's service (gateway/events/replay.py), each with
    its audit row, in committed slices: the preview's and the purge's seconds, beside a bare
    one-statement UPDATE of the same rows on a copy of the table (no audit, one transaction).
(d) apply: --apply pending `judgment.upserted` events (distinct case numbers) in a tenant of
    their own, drained by one real `ingest worker --once` with its default settings:
    apply_events_per_s from the worker's first claim to the last event processed (and from the
    process start, start-up included). Beside it bare_apply: a hand-written loop over the same
    number of events in another tenant: claim 50 with `FOR UPDATE SKIP LOCKED`, then one
    transaction per event (upsert the judgment with values parsed inline, mark the event
    processed), no contract validation, no ordering checks; clocked the same way, from its
    first claim to its last processed_at. Target: >= 2x.

--set EVENTS_SERVER_TIMING=1: each intake phase also prints where requests' time went (the
gateway's Server-Timing parts for the middle 10 % and the slowest 5 %, how late each batch was
sent, the six slowest with when they started; ADR 0341). It costs the gateway a 2 ms timer:
leave it off for the figures.

Every phase's clock starts once all its clients are connected (ADR 0341).
Figures print as `name value (...) [load 1/5/15 min]`, then PASS/MISS per target.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import common  # first: sets the environment before boto3 loads
import psutil  # noqa: E402
import psycopg  # noqa: E402
from psycopg.rows import dict_row  # noqa: E402

from cli.embedded import EmbeddedPostgres, MotoServer  # noqa: E402
from shared import aws, queue  # noqa: E402
from shared.db import migrate  # noqa: E402
from tests.support import stack  # noqa: E402

JWT_SECRET = "bench-secret-" + "b" * 40
METRICS_TOKEN = "bench-metrics-" + "m" * 20
WRITER_COUNTERS = ("ingest_events_groups_total", "ingest_events_groups_lingered_total",
                   "ingest_events_committed_total")
LEASE_S = 60.0  # the worker's default LEDGER_APPLY_LEASE_S: a claim sets next_apply_at to now() + it
COLUMNS = ("tenant_id, source_system, source_event_id, source_sequence, source_emitted_at, type, "
           "payload, payload_sha256")
ON_CONFLICT = """ON CONFLICT (tenant_id, source_system, source_event_id) DO UPDATE
SET ingest_attempt_count = {t}.ingest_attempt_count + 1, ingest_last_seen_at = now()
RETURNING ledger_id, (xmax = 0) AS inserted"""
ONE_ROW = f"INSERT INTO {{t}} ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s)\n" + ON_CONFLICT
FROM_STAGE = (f"INSERT INTO {{t}} ({COLUMNS}) SELECT {COLUMNS.replace('payload,', 'payload::jsonb,')} "
              "FROM bench_stage\n" + ON_CONFLICT)


def load() -> str:
    return "[load " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + "]"


class Cpu:
    """CPU seconds spent by the gateway, by Postgres (the postmaster and its backends) and by
    this process (the clients or the bare scripts) over a phase: where an event's cost goes on
    a machine whose cores they all share."""

    def __init__(self, pg: EmbeddedPostgres, gateway: stack.Process | None) -> None:
        pid = int((pg.data_dir / "postmaster.pid").read_text().split()[0])
        self.postgres = psutil.Process(pid)
        self.gateway = psutil.Process(gateway.proc.pid) if gateway else None
        self.me = psutil.Process()
        self.start = self._now()

    def _now(self) -> dict[str, float]:
        def spent(p: psutil.Process, children: bool) -> float:
            procs = [p, *(p.children(recursive=True) if children else [])]
            # A process's own time, plus its children that exited (backends of closed
            # connections), plus those still running.
            own = p.cpu_times()
            total = own.children_user + own.children_system if children else 0.0
            for q in procs:
                try:
                    t = q.cpu_times()
                    total += t.user + t.system
                except psutil.NoSuchProcess:
                    pass
            return total
        return {"gateway": spent(self.gateway, True) if self.gateway else 0.0,
                "postgres": spent(self.postgres, True), "bench": spent(self.me, False)}

    def per_thousand(self, events: int) -> str:
        now = self._now()
        parts = [f"{name} {(now[name] - self.start[name]) / max(events, 1) * 1000:.3f}"
                 for name in ("gateway", "postgres", "bench") if now[name] or name != "gateway"]
        return "CPU s per 1,000 events: " + ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--open-loop", type=lambda v: [float(f) for f in v.split(",")],
                        default=[], metavar="F[,F...]",
                        help="then offer intake and the bare COPY script F x the bare COPY "
                             "script's closed-loop rate, open loop, for each F")
    parser.add_argument("--apply", type=int, default=20000, help="0 skips (d)")
    parser.add_argument("--skip-intake", action="store_true", help="skip (a)-(c)")
    parser.add_argument("--purge", type=int, default=0, metavar="N",
                        help="(e): N junk pending events discarded by filter; 0 skips it")
    parser.add_argument("--durable", action="store_true",
                        help="the Postgres `make run` starts (fsync, synchronous commit) instead "
                             "of the test suite's throw-away one")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 5 s phases, 2,000 "
                        "events to apply")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a gateway or worker setting other than its default")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.apply = 5.0, min(args.apply, 2000)
    with common.stack("bench-events-", durable=args.durable) as (root, pg, moto):
        _bench(args, root, pg, moto)


def _bench(args: argparse.Namespace, root: Path, pg: EmbeddedPostgres, moto: MotoServer) -> None:
    url = pg.ensure_database("bench")
    migrate.apply(url)
    sqs = aws.client("sqs", endpoint_url=moto.url, region="us-east-1")
    q_url, dlq_url = queue.ensure_queues(sqs, f"bench-{uuid.uuid4().hex[:6]}")
    tenant_id = _tenant(url, "bench")
    key = "dfk_" + uuid.uuid4().hex + uuid.uuid4().hex[:11]
    with _connect(url) as conn:
        conn.execute("INSERT INTO api_keys (tenant_id, name, key_hash, prefix) "
                     "VALUES (%s, 'bench', %s, 'dfk_bench')",
                     (tenant_id, hashlib.sha256(key.encode()).hexdigest()))
    env = {"DATABASE_URL": url, "AWS_ENDPOINT_URL": moto.url, "SQS_QUEUE_URL": q_url,
           "SQS_DLQ_URL": dlq_url, "UPLOAD_STORE_URI": (root / "uploads").as_uri(),
           "ARTIFACT_STORE_URI": (root / "artifacts").as_uri(), "JWT_SECRET": JWT_SECRET,
           "METRICS_TOKEN": METRICS_TOKEN, "LOG_LEVEL": "WARNING",
           # The bench's 16 clients share one address: at ~220 requests a second they outran
           # the per-address guard (32 requests refused with 429 in a 9-round run).
           **stack.UNGUARDED_ENV, **stack.MOTO_ENV, **stack.OFFLINE_ENV}
    env.update(item.split("=", 1) for item in args.set)
    print(f"machine: {os.cpu_count()} cores; postgres {'durable' if args.durable else 'throw-away (fsync off)'}")
    targets: list[tuple[str, bool]] = []
    if not args.skip_intake:
        targets += _intake_phases(args, root, pg, url, env, tenant_id, key)
    if args.apply:
        targets += _apply_phases(args, root, url, env)
    if args.purge:
        _purge_phase(url, args.purge)
    print(" | ".join(f"{name} {'PASS' if ok else 'MISS'}" for name, ok in targets))


# ── intake ─────────────────────────────────────────────────────────────────────────────────
def _intake_phases(args: argparse.Namespace, root: Path, pg: EmbeddedPostgres, url: str,
                   env: dict[str, str], tenant_id: uuid.UUID,
                   key: str) -> list[tuple[str, bool]]:
    gateway = stack.start_gateway(env, root / "logs")
    _ready(gateway)
    results: dict[str, list[tuple[float, float, float, str]]] = {
        "intake": [], "bare_executemany": [], "bare_copy": []}
    cpu: dict[str, str] = {}
    phases: list[tuple[str, Callable[[str], tuple[float, float, float, int]]]] = [
        ("intake", lambda tag: _grouped(gateway, lambda: _intake(gateway, key, args, tag)))]
    for name, statement in (("bare_executemany", _executemany), ("bare_copy", _copy)):
        phases.append((name, lambda tag, name=name, statement=statement: _bare(
            url, _bare_table(url, name), tenant_id, args, statement, tag)))
    try:
        for n in range(args.rounds):
            # Each round starts with another phase: whichever runs first (or last) meets the
            # machine's load as it is then, so a fixed order biases every ratio one way.
            for name, phase in phases[n % 3:] + phases[:n % 3]:
                _empty_ledger(url)
                spent = Cpu(pg, gateway if name == "intake" else None)
                rate, p50, p95, events = phase(f"r{n}")
                cpu[name] = spent.per_thousand(events)
                results[name].append((rate, p50, p95, load()))
        for fraction in args.open_loop:
            offered = fraction * statistics.median(r[0] for r in results["bare_copy"])
            _open_loop(args, url, gateway, key, tenant_id, pg, offered)
    finally:
        gateway.stop()
    return _intake_report(args, results, cpu)


def _intake_report(args: argparse.Namespace, results: dict[str, list[tuple[float, float, float, str]]],
                   cpu: dict[str, str]) -> list[tuple[str, bool]]:
    """Each phase's median over the rounds, then the ratios as the median of each round's own
    ratio: a round's three phases ran minutes apart at most, under the load printed beside
    them, so a round is the fair comparison; the median of rounds drops an outlier round."""
    for name, runs in results.items():
        rate = statistics.median(r[0] for r in runs)
        p50 = statistics.median(r[1] for r in runs)
        p95 = statistics.median(r[2] for r in runs)
        print(f"{name}_events_per_s {rate:.0f} (p50 {p50:.1f} ms, p95 {p95:.1f} ms; "
              f"{args.clients} clients x {args.batch}; median of {len(runs)}) {runs[-1][3]}")
        print(f"  {cpu[name]} (last round)")
    vs_many, vs_copy = [], []
    for n in range(args.rounds):
        intake, many, copy = (results[k][n] for k in ("intake", "bare_executemany", "bare_copy"))
        vs_many.append(intake[0] / many[0])
        vs_copy.append(intake[0] / copy[0])
        order = ["intake", "bare_executemany", "bare_copy"]
        order = order[n % 3:] + order[:n % 3]
        print(f"  round {n + 1} ({' > '.join(order)}): intake {intake[0]:.0f} (p95 "
              f"{intake[2]:.1f} ms) {intake[3]}, executemany {many[0]:.0f} {many[3]}, copy "
              f"{copy[0]:.0f} {copy[3]}: {vs_many[-1]:.2f}x, {vs_copy[-1]:.2f}x")
    many_ratio, copy_ratio = statistics.median(vs_many), statistics.median(vs_copy)
    p95 = statistics.median(r[2] for r in results["intake"])
    print(f"intake_vs_bare_executemany {many_ratio:.2f}x (median of {args.rounds} rounds' "
          f"ratios; target >= 1.0x)")
    print(f"intake_vs_bare_copy {copy_ratio:.2f}x (median of {args.rounds} rounds' ratios; "
          f"target >= 0.6x)")
    print(f"intake_p95_ms {p95:.1f} (target < 100)")
    return [("intake>=1.0x executemany", many_ratio >= 1.0),
            ("intake>=0.6x copy", copy_ratio >= 0.6), ("p95<100ms", p95 < 100)]


def _writer_counters(gateway: stack.Process) -> dict[str, float]:
    with gateway.client(METRICS_TOKEN) as c:
        text = c.get("/metrics").text
    found = dict.fromkeys(WRITER_COUNTERS, 0.0)
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name.split("{")[0] in found:
            found[name.split("{")[0]] += float(value)
    return found


def _grouped(gateway: stack.Process, phase: Callable[[], tuple[float, float, float, int]]
             ) -> tuple[float, float, float, int]:
    """Run an intake phase and print how the writer grouped it: groups, the mean group, how
    many groups lingered (EVENTS_GROUP_LINGER_MS)."""
    before = _writer_counters(gateway)
    result = phase()
    after = _writer_counters(gateway)
    groups, lingered, events = (after[k] - before[k] for k in WRITER_COUNTERS)
    print(f"  writer: {groups:.0f} groups, {events / max(groups, 1):.0f} events each on "
          f"average, {lingered:.0f} lingered")
    return result


def _open_loop(args: argparse.Namespace, url: str, gateway: stack.Process, key: str,
               tenant_id: uuid.UUID, pg: EmbeddedPostgres, offered: float) -> None:
    """Intake and the bare COPY script at one fixed offered rate (--open-loop)."""
    _empty_ledger(url)
    spent = Cpu(pg, gateway)
    rate, p50, p95, events = _grouped(gateway, lambda: _intake(gateway, key, args, "open",
                                                               offered))
    print(f"open_loop_intake_events_per_s {rate:.0f} (offered {offered:.0f}; p50 {p50:.1f} ms, "
          f"p95 {p95:.1f} ms from each batch's scheduled time) {load()}")
    print(f"  {spent.per_thousand(events)}")
    spent = Cpu(pg, None)
    rate, p50, p95, events = _bare(url, _bare_table(url, "bare_copy"), tenant_id, args, _copy,
                                   "open", offered)
    print(f"open_loop_bare_copy_events_per_s {rate:.0f} (offered {offered:.0f}; p50 {p50:.1f} "
          f"ms, p95 {p95:.1f} ms) {load()}")
    print(f"  {spent.per_thousand(events)}")


def _turns(n: int, args: argparse.Namespace, stop_at: list[float],
           offered: float | None) -> Iterator[float]:
    """Client n's batches: each one's start time (time.monotonic), until the phase ends.
    Closed loop (offered None): now, each time the last answer came. Open loop: every
    clients x batch / offered seconds, the clients staggered evenly; a client behind its
    schedule sends at once, and its latency still counts from the scheduled time."""
    if not offered:
        while (now := time.monotonic()) < stop_at[0]:
            yield now
        return
    interval = args.clients * args.batch / offered
    t0 = stop_at[0] - args.seconds + interval * n / args.clients
    b = 0
    while (due := t0 + b * interval) < stop_at[0]:
        if (wait := due - time.monotonic()) > 0:
            time.sleep(wait)
        yield due
        b += 1


def _ready(gateway: stack.Process, timeout_s: float = 120.0) -> None:
    """Wait for /health/ready: a load balancer sends a replica nothing before, and until then
    the gateway loads its query model (ADR 0321), seconds of CPU the intake phase would
    otherwise pay for (ADR 0287)."""
    deadline = time.monotonic() + timeout_s
    with gateway.client() as c:
        while c.get("/health/ready").status_code != 200:
            if time.monotonic() > deadline:
                raise SystemExit(f"gateway not ready after {timeout_s:.0f} s")
            time.sleep(0.2)


def _events(n: int, tag: str, emitted: str) -> list[dict]:
    return [{"source_system": "bench", "source_event_id": f"{tag}-{i}", "source_sequence": i,
             "source_emitted_at": emitted, "type": "judgment.upserted",
             "payload": {"case_number": f"{tag}-{i}", "amount": i, "court": "Superior Court"}}
            for i in range(n)]


def _intake(gateway: stack.Process, key: str, args: argparse.Namespace,
            tag: str, offered: float | None = None) -> tuple[float, float, float, int]:
    latencies: list[float] = []
    acked = [0]
    failures: list[str] = []
    lock = threading.Lock()
    emitted = datetime.now(UTC).isoformat()
    stop_at: list[float] = []
    ready = _start_line(args, stop_at)

    def client(n: int) -> None:
        with gateway.client() as c:
            c.get("/health/live")  # connected before the clock starts
            b = 0
            ready.wait()
            for started in _turns(n, args, stop_at, offered):
                batch = _events(args.batch, f"{tag}-c{n}-b{b}", emitted)
                b += 1
                sent = time.monotonic()
                try:
                    r = c.post("/v1/events", json=batch, headers={"X-Api-Key": key})
                except Exception as exc:  # noqa: BLE001 - counted and shown, not hidden
                    with lock:
                        failures.append(f"{type(exc).__name__}: {exc}")
                    continue
                took = (time.monotonic() - started) * 1000
                with lock:
                    if r.status_code == 202:
                        if "server-timing" in r.headers:
                            traces.append((took, {
                                **_server_timing(r.headers["server-timing"]),
                                "late": (sent - started) * 1000,
                                "at": started - stop_at[0] + args.seconds}))
                        latencies.append(took)
                        acked[0] += len(batch)
                    else:
                        failures.append(f"{r.status_code}: {r.text[:200]}")

    traces: list[tuple[float, dict[str, float]]] = []
    result = _timed(args, client, latencies, acked, ready, stop_at)
    if traces:
        _print_traces(traces)
    if failures:
        print(f"intake_failed_requests {len(failures)} (first: {failures[0]})")
    return result


def _server_timing(header: str) -> dict[str, float]:
    parts = {}
    for part in header.split(","):
        name, _, dur = part.strip().partition(";dur=")
        parts[name] = float(dur)
    return parts


def _print_traces(traces: list[tuple[float, dict[str, float]]]) -> None:
    """Where requests' time went (EVENTS_SERVER_TIMING=1): the slowest 5 % beside the middle
    10 %, each component's mean in ms; late = sent after its scheduled time (open loop: the
    client was still waiting for its last answer); client = the rest outside the server."""
    traces.sort(key=lambda t: t[0])
    n = len(traces)
    for label, chosen in (("p45-p55", traces[int(n * .45):int(n * .55)]),
                          ("slowest 5%", traces[int(n * .95):])):
        if not chosen:
            continue
        keys = list(chosen[0][1])
        means = {k: statistics.mean(t[1].get(k, 0.0) for t in chosen) for k in keys}
        means["client"] = statistics.mean(t[0] - t[1]["total"] - t[1]["late"] for t in chosen)
        lat = statistics.mean(t[0] for t in chosen)
        print(f"  trace {label} (n={len(chosen)}, latency {lat:.1f} ms): " + ", ".join(
            f"{k} {v:.1f}" for k, v in means.items() if k != "at"))
    for took, parts in traces[-6:]:
        print(f"  trace slowest {took:.0f} ms at {parts['at']:.2f} s: late {parts['late']:.0f}, "
              f"server {parts['total']:.0f} (db {parts['db']:.0f}, pre {parts['pre']:.0f}, "
              f"lagmax {parts['lagmax']:.0f}, gc {parts['gc']:.0f}, group "
              f"{parts.get('group', 0):.0f} events), rest "
              f"{took - parts['total'] - parts['late']:.0f}")


def _start_line(args: argparse.Namespace, stop_at: list[float]) -> threading.Barrier:
    """The clients and the main thread meet here once every client is connected; the phase's
    end (and an open loop's schedule) is set only then. Set before, the time clients took to
    connect counted as the first batches' lateness: the open loop's slowest 5 % were all in
    its first 0.1 s, sent 290-390 ms after their scheduled times (ADR 0341)."""
    return threading.Barrier(args.clients + 1,
                             action=lambda: stop_at.append(time.monotonic() + args.seconds))


def _timed(args: argparse.Namespace, work: Callable[[int], None], latencies: list[float],
           done: list[int], ready: threading.Barrier,
           stop_at: list[float]) -> tuple[float, float, float, int]:
    """Run ``work`` on --clients threads from one start signal for --seconds: events/s, p50,
    p95, events."""
    errors: list[BaseException] = []

    def guarded(n: int) -> None:
        try:
            work(n)
        except BaseException as exc:  # noqa: BLE001 - a broken phase must not print a figure
            errors.append(exc)
            raise

    threads = [threading.Thread(target=guarded, args=(n,)) for n in range(args.clients)]
    for t in threads:
        t.start()
    ready.wait()  # every client connected: the clock (and an open loop's schedule) starts now
    started = stop_at[0] - args.seconds
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    if errors:
        raise SystemExit(f"{len(errors)} of {args.clients} threads failed: {errors[0]!r}")
    q = statistics.quantiles(latencies, n=20) if len(latencies) > 1 else [0.0] * 19
    return done[0] / elapsed, statistics.median(latencies or [0.0]), q[18], done[0]


def _bare_table(url: str, name: str) -> str:
    """A fresh copy of the ledger table: same columns, defaults, checks, indexes, and its
    foreign key (LIKE does not copy foreign keys)."""
    table = f"{name}_ledger"
    with _connect(url) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (LIKE event_ledger INCLUDING ALL)")
        conn.execute(f"ALTER TABLE {table} ADD FOREIGN KEY (tenant_id) REFERENCES tenants")
        indexes = conn.execute("SELECT count(*) FILTER (WHERE tablename = 'event_ledger') AS a, "
                               "count(*) FILTER (WHERE tablename = %s) AS b FROM pg_indexes",
                               (table,)).fetchone()
    assert indexes["a"] == indexes["b"], indexes
    return table


def _rows(tenant_id: uuid.UUID, events: list[dict]) -> list[tuple]:
    """What a hand-written intake stores per event: the canonical payload and its SHA-256."""
    rows = []
    for e in events:
        payload = json.dumps(e["payload"], sort_keys=True, separators=(",", ":"))
        rows.append((tenant_id, e["source_system"], e["source_event_id"], e["source_sequence"],
                     datetime.fromisoformat(e["source_emitted_at"]), e["type"], payload,
                     hashlib.sha256(payload.encode()).hexdigest()))
    return rows


def _executemany(conn: psycopg.Connection, table: str, rows: list[tuple]) -> int:
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(ONE_ROW.format(t=table), rows, returning=True)
        answered = 0
        while True:
            answered += len(cur.fetchall())
            if not cur.nextset():
                break
    return answered


def _copy(conn: psycopg.Connection, table: str, rows: list[tuple]) -> int:
    with conn.transaction(), conn.cursor() as cur:
        with cur.copy(f"COPY bench_stage ({COLUMNS}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        return len(cur.execute(FROM_STAGE.format(t=table)).fetchall())


def _bare(url: str, table: str, tenant_id: uuid.UUID, args: argparse.Namespace,
          statement: Callable[[psycopg.Connection, str, list[tuple]], int],
          tag: str, offered: float | None = None) -> tuple[float, float, float, int]:
    latencies: list[float] = []
    done = [0]
    lock = threading.Lock()
    stop_at: list[float] = []
    ready = _start_line(args, stop_at)
    emitted = datetime.now(UTC).isoformat()

    def one(n: int) -> None:
        with _connect(url, autocommit=False) as conn:
            conn.execute("CREATE TEMP TABLE bench_stage (tenant_id uuid, source_system text, "
                         "source_event_id text, source_sequence bigint, "
                         "source_emitted_at timestamptz, type text, payload text, "
                         "payload_sha256 text) ON COMMIT DELETE ROWS")
            conn.commit()
            ready.wait()
            for b, started in enumerate(_turns(n, args, stop_at, offered)):
                rows = _rows(tenant_id, _events(args.batch, f"{table}-{tag}-{n}-{b}", emitted))
                answered = statement(conn, table, rows)
                assert answered == len(rows)
                with lock:
                    latencies.append((time.monotonic() - started) * 1000)
                    done[0] += len(rows)

    return _timed(args, one, latencies, done, ready, stop_at)


def _empty_ledger(url: str) -> None:
    """Every phase starts on empty tables: neither the product's nor a bare script's rows
    from an earlier phase sit in the cache or the disk beside it."""
    with _connect(url) as conn:
        conn.execute("TRUNCATE event_ledger CASCADE")
        conn.execute("DROP TABLE IF EXISTS bare_executemany_ledger, bare_copy_ledger")


# ── apply ──────────────────────────────────────────────────────────────────────────────────
def _apply_phases(args: argparse.Namespace, root: Path, url: str,
                  env: dict[str, str]) -> list[tuple[str, bool]]:
    _empty_ledger(url)
    applied = _apply(url, env, root, args.apply)
    print(f"apply_events_per_s {applied['rate']:.0f} ({args.apply} judgment.upserted by one "
          f"`ingest worker --once`, first claim to last processed) {load()}")
    print(f"apply_with_startup_events_per_s {applied['wall']:.0f} (process start to last "
          f"processed, {applied['seconds']:.1f} s)")
    bare = _bare_apply(url, args.apply)
    print(f"bare_apply_events_per_s {bare:.0f} (hand-written: one transaction per event, "
          f"first claim to last processed) {load()}")
    ratio = applied["rate"] / bare if bare else 0.0
    print(f"apply_vs_bare_apply {ratio:.2f}x (target >= 2x)")
    return [("apply>=2x bare", ratio >= 2.0)]


def _judgment_events(n: int, tag: str) -> list[dict]:
    return [{"source_system": "bench-apply", "source_event_id": f"{tag}-{i}",
             "source_sequence": i, "type": "judgment.upserted",
             "payload": {"File #": f"2024-CV-{tag.upper()}{i:07d}",
                         "Plaintiff": "Acme Collections LLC", "Defendant": f"Defendant {i}",
                         "Amount": f"{i % 90000 + 100}.00", "Entry Date": "2024-01-15"}}
            for i in range(n)]


def _tenant(url: str, name: str) -> uuid.UUID:
    with _connect(url) as conn:
        tenant_id: uuid.UUID = conn.execute("INSERT INTO tenants (name) VALUES (%s) "
                                            "RETURNING tenant_id", (name,)).fetchone()["tenant_id"]
    return tenant_id


def _load(url: str, tenant_id: uuid.UUID, events: list[dict]) -> None:
    """Pending events as intake stores them, by plain SQL (not the product's writer)."""
    rows = [(r[0], r[1], r[2], r[3], None, r[5], r[6], r[7]) for r in _rows(
        tenant_id, [{**e, "source_emitted_at": "2024-01-01T00:00:00+00:00"} for e in events])]
    with _connect(url) as conn, conn.cursor() as cur:
        with cur.copy(f"COPY event_ledger ({COLUMNS}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        conn.execute("VACUUM ANALYZE event_ledger")


def _apply(url: str, env: dict[str, str], root: Path, n: int) -> dict[str, float]:
    """n pending judgment events in a tenant of their own; time a worker draining them."""
    tenant_id = _tenant(url, "bench-apply")
    _load(url, tenant_id, _judgment_events(n, "j"))
    started = time.monotonic()
    worker = stack.spawn("worker", ["worker", "--once"], env, root / "logs")
    # Clocked until the last event is processed, not until exit: after draining the ledger,
    # --once also waits out the SQS consumer's idle checks, which is not apply work.
    with _connect(url) as conn:
        while worker.proc.poll() is None and conn.execute(
                "SELECT count(*) AS n FROM event_ledger WHERE tenant_id = %s AND "
                "process_state = 'pending'", (tenant_id,)).fetchone()["n"]:
            time.sleep(0.1)
    seconds = time.monotonic() - started
    if worker.proc.wait(600) != 0:
        raise SystemExit(f"worker failed:\n{worker.logs()[-4000:]}")
    with _connect(url) as conn:
        # The first claim's now() is its next_apply_at less the lease (a settle keeps it).
        done = conn.execute(
            "SELECT count(*) FILTER (WHERE process_state = 'processed') AS processed, "
            "extract(epoch FROM max(processed_at) - (min(next_apply_at) - "
            "make_interval(secs => %s))) AS span "
            "FROM event_ledger WHERE tenant_id = %s", (LEASE_S, tenant_id)).fetchone()
        rows = conn.execute("SELECT count(*) AS n FROM judgments WHERE tenant_id = %s",
                            (tenant_id,)).fetchone()["n"]
    if done["processed"] != n or rows != n:
        raise SystemExit(f"apply incomplete: {done['processed']} processed, {rows} judgments "
                         f"of {n}")
    span = float(done["span"])
    return {"seconds": seconds, "wall": n / seconds, "rate": n / span}


def _bare_apply(url: str, n: int) -> float:
    """The hand-written apply: claim 50 pending events at a time, then per event one
    transaction that upserts its judgment (values parsed inline) and marks it processed."""
    tenant_id = _tenant(url, "bench-bare-apply")
    _load(url, tenant_id, _judgment_events(n, "b"))
    with _connect(url) as conn:
        first_claim = conn.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        while True:
            with conn.transaction():
                batch = conn.execute(
                    "SELECT ledger_id, payload FROM event_ledger WHERE tenant_id = %s AND "
                    "process_state = 'pending' ORDER BY ledger_id LIMIT 50 FOR UPDATE SKIP LOCKED",
                    (tenant_id,)).fetchall()
            if not batch:
                break
            for row in batch:
                p = row["payload"]
                with conn.transaction():
                    conn.execute(
                        "INSERT INTO judgments AS j (tenant_id, case_number, plaintiff_name, "
                        "defendant_name, amount, filed_date, source, source_reference) "
                        "VALUES (%s, %s, %s, %s, %s, %s, 'manual', %s) "
                        "ON CONFLICT (tenant_id, case_number_normalized) DO UPDATE SET "
                        "amount = EXCLUDED.amount, updated_at = now() "
                        "WHERE j.amount IS DISTINCT FROM EXCLUDED.amount",
                        (tenant_id, p["File #"], p["Plaintiff"], p["Defendant"],
                         Decimal(p["Amount"].replace(",", "")), p["Entry Date"],
                         f"event {row['ledger_id']}"))
                    conn.execute("UPDATE event_ledger SET process_state = 'processed', "
                                 "processed_at = clock_timestamp() WHERE ledger_id = %s",
                                 (row["ledger_id"],))
        last = conn.execute("SELECT max(processed_at) AS t, count(*) AS n FROM event_ledger "
                            "WHERE tenant_id = %s AND process_state = 'processed'",
                            (tenant_id,)).fetchone()
    assert last["n"] == n
    return n / (last["t"] - first_claim).total_seconds()


# ── purge ──────────────────────────────────────────────────────────────────────────────────
def _purge_phase(url: str, n: int) -> None:
    from gateway.events import replay

    _empty_ledger(url)
    tenant_id = _tenant(url, "bench-purge")
    junk = [{"source_system": "bench", "source_event_id": f"junk-{i}", "source_sequence": None,
             "type": "junk.created", "payload": {"n": i}} for i in range(n)]
    kept = [{**e, "source_event_id": f"kept-{i}", "type": "judgment.upserted"}
            for i, e in enumerate(junk[:10000])]
    _load(url, tenant_id, junk + kept)
    with _connect(url) as conn:
        conn.execute("CREATE TABLE bare_purge (LIKE event_ledger INCLUDING ALL)")
        conn.execute("INSERT INTO bare_purge SELECT * FROM event_ledger")
        conn.execute("VACUUM ANALYZE bare_purge")
        wanted = replay.Filter.of(type="junk.created", state="pending")
        started = time.monotonic()
        preview = replay.discard_matching(conn, tenant_id=tenant_id, wanted=wanted,
                                          actor="cli:bench", actor_user_id=None, reason="",
                                          preview=True)
        previewed = time.monotonic() - started
        started = time.monotonic()
        done = replay.discard_matching(conn, tenant_id=tenant_id, wanted=wanted,
                                       actor="cli:bench", actor_user_id=None,
                                       reason="bench junk", at_most=preview["matched"])
        purged = time.monotonic() - started
        started = time.monotonic()
        bare = conn.execute("UPDATE bare_purge SET process_state = 'discarded' WHERE "
                            "tenant_id = %s AND type = 'junk.created' AND process_state = "
                            "'pending'", (tenant_id,)).rowcount
        bare_s = time.monotonic() - started
        audited = conn.execute("SELECT count(*) AS n FROM event_actions").fetchone()["n"]
    assert done["discarded"] == n == bare == audited, (done, bare, audited)
    print(f"purge_preview_s {previewed:.2f} ({preview['matched']} matched of {n + 10000}) {load()}")
    print(f"purge_s {purged:.1f} ({done['discarded']} discarded, each with its audit row, "
          f"slices of {replay.PURGE_SLICE}; {done['discarded'] / purged:.0f} events/s) {load()}")
    print(f"bare_update_s {bare_s:.1f} (one UPDATE, no audit, one transaction) {load()}")


def _connect(url: str, autocommit: bool = True) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=autocommit, row_factory=dict_row)


if __name__ == "__main__":
    main()
