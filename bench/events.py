"""Measure event intake (POST /v1/events) and apply against hand-written baselines on the same
database.

    python bench/events.py [--seconds 20] [--clients 16] [--batch 100] [--apply 20000] [--quick]

Starts Postgres and moto (cli.embedded), migrates, makes a tenant, an admin and an API key, and
runs `ingest gateway` as a subprocess with its default event settings. Then, in the same run:

(a) intake_events_per_s: --clients concurrent clients, each on its own connection, send
    batches of --batch new events for --seconds; counted are events answered 202 (the answer
    comes after commit). intake_p95_ms: the requests' 95th percentile latency. Target < 100 ms.
(b) bare_1conn / bare_16conn events_per_s: a hand-written multi-row upsert (INSERT ... SELECT
    FROM unnest ... ON CONFLICT DO UPDATE of the repeat counter, plain psycopg, not the
    product's statement) on batches of --batch new events, each batch its own transaction,
    for --seconds, over 1 and over --clients connections at once: what the database does with
    no HTTP, JSON, checks or queue. Target: (a) >= 50 % of the --clients figure.
(c) apply: --apply pending `judgment.upserted` events (distinct case numbers, one judgments
    row each by the contract's column names) in a tenant of their own, drained by one real
    `ingest worker --once` with its default settings: apply_events_per_s from the worker's
    start to the last event processed (start-up included), and apply-only over the span from
    the first to the last processed_at. Beside it, bare_apply_events_per_s: a hand-written
    loop over the same number of events, one transaction per event (upsert the judgment,
    mark the event processed), without the contract's validation or the ordering checks.
    Then where apply's time goes: the same applier in this process over --profile events,
    each named statement and the contract's validation timed.

Figures print as `name value (target ...)`, then PASS/MISS per target.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import common  # first: sets the environment before boto3 loads

from cli.embedded import EmbeddedPostgres, MotoServer  # noqa: E402
from gateway.events import intake, keys, writer  # noqa: E402
from shared import aws, db, queue  # noqa: E402
from shared.db import migrate  # noqa: E402
from tests.support import stack  # noqa: E402

JWT_SECRET = "bench-secret-" + "b" * 40
BARE_UPSERT = """
INSERT INTO event_ledger (tenant_id, source_system, source_event_id, source_sequence,
                          source_emitted_at, type, payload, payload_sha256)
SELECT * FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::bigint[], %s::timestamptz[],
                     %s::text[], %s::jsonb[], %s::text[])
ON CONFLICT (tenant_id, source_system, source_event_id) DO UPDATE
SET ingest_attempt_count = event_ledger.ingest_attempt_count + 1, ingest_last_seen_at = now()
RETURNING ledger_id, (xmax = 0) AS inserted"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--apply", type=int, default=20000, help="0 skips (c)")
    parser.add_argument("--profile", type=int, default=3000,
                        help="events of (c)'s in-process breakdown; 0 skips it")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 5 s phases, 2,000 events to apply, 1,000 profiled")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a gateway setting other than its default, e.g. EVENTS_GROUP_MAX=5000")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.apply, args.profile = 5.0, min(args.apply, 2000), min(args.profile, 1000)
    with common.stack("bench-events-") as (root, pg, moto):
        _bench(args, root, pg, moto)


def _bench(args: argparse.Namespace, root: Path, pg: EmbeddedPostgres, moto: MotoServer) -> None:
    url = pg.ensure_database("bench")
    migrate.apply(url)
    sqs = aws.client("sqs", endpoint_url=moto.url, region="us-east-1")
    q_url, dlq_url = queue.ensure_queues(sqs, f"bench-{uuid.uuid4().hex[:6]}")
    with db.connect(url, autocommit=True) as conn:
        user = common.BenchUser(conn)
        key = keys.generate()
        conn.execute("INSERT INTO api_keys (tenant_id, name, key_hash, prefix) "
                     "VALUES (%s, 'bench', %s, 'dfk_bench')", (user.tenant_id, keys.digest(key)))
    env = {"DATABASE_URL": url, "AWS_ENDPOINT_URL": moto.url, "SQS_QUEUE_URL": q_url,
           "SQS_DLQ_URL": dlq_url, "UPLOAD_STORE_URI": (root / "uploads").as_uri(),
           "ARTIFACT_STORE_URI": (root / "artifacts").as_uri(), "JWT_SECRET": JWT_SECRET,
           "METRICS_TOKEN": "bench-metrics-" + "m" * 20, "LOG_LEVEL": "WARNING",
           **stack.MOTO_ENV, **stack.OFFLINE_ENV}
    env.update(item.split("=", 1) for item in args.set)
    gateway = stack.start_gateway(env, root / "logs")
    try:
        rate, p50, p95, refused = _intake(gateway, key, args)
    finally:
        gateway.stop()
    bare_one = _bare(url, user.tenant_id, args, connections=1)
    bare_many = _bare(url, user.tenant_id, args, connections=args.clients)
    _settle_intake_events(url, user.tenant_id)
    print(f"intake_events_per_s {rate:.0f} ({args.clients} clients x {args.batch}; "
          f"{refused} requests answered 429)")
    print(f"intake_p50_ms {p50:.1f}")
    print(f"intake_p95_ms {p95:.1f} (target < 100)")
    print(f"bare_1conn_events_per_s {bare_one:.0f}")
    print(f"bare_{args.clients}conn_events_per_s {bare_many:.0f}")
    ratio_many = rate / bare_many if bare_many else 0.0
    print(f"intake_vs_bare_1conn {rate / bare_one if bare_one else 0:.0%}")
    print(f"intake_vs_bare_{args.clients}conn {ratio_many:.0%} (target >= 50%)")
    if args.apply:
        applied = _apply(url, env, root, args.apply)
        bare_apply = _bare_apply(url, args.apply)
        print(f"apply_events_per_s {applied['wall']:.0f} ({args.apply} judgment.upserted by "
              f"one `ingest worker --once` in {applied['seconds']:.1f} s, start-up included)")
        print(f"apply_only_events_per_s {applied['span']:.0f} (first to last processed_at)")
        print(f"bare_apply_events_per_s {bare_apply:.0f} (hand-written: one transaction per "
              "event, upsert + mark processed, no contract or ordering checks)")
        print(f"apply_only_vs_bare_apply {applied['span'] / bare_apply if bare_apply else 0:.0%}")
    if args.profile:
        _profile(url, args.profile)
    print("p95", "PASS" if p95 < 100 else "MISS", "| rate", "PASS" if ratio_many >= 0.5 else "MISS")


def _events(n: int, tag: str) -> list[dict]:
    return [{"source_system": "bench", "source_event_id": f"{tag}-{i}", "source_sequence": i,
             "type": "judgment.upserted", "payload": {"case_number": f"{tag}-{i}", "amount": i}}
            for i in range(n)]


def _intake(gateway: stack.Process, key: str,
            args: argparse.Namespace) -> tuple[float, float, float, int]:
    latencies: list[float] = []
    acked = [0]
    refused = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + args.seconds

    failures: list[str] = []

    def client(n: int) -> None:
        with gateway.client() as c:
            b = 0
            while time.monotonic() < deadline:
                batch = _events(args.batch, f"c{n}-b{b}")
                b += 1
                started = time.perf_counter()
                try:
                    r = c.post("/v1/events", json=batch, headers={"X-Api-Key": key})
                except Exception as exc:  # noqa: BLE001 - counted and shown, not hidden
                    with lock:
                        failures.append(f"{type(exc).__name__}: {exc}")
                    continue
                took = (time.perf_counter() - started) * 1000
                with lock:
                    if r.status_code == 202:
                        latencies.append(took)
                        acked[0] += len(batch)
                    else:
                        refused[0] += 1

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    if failures:
        print(f"intake_failed_requests {len(failures)} (first: {failures[0][:200]})")
    q = statistics.quantiles(latencies, n=20) if len(latencies) > 1 else [0.0] * 19
    return acked[0] / elapsed, statistics.median(latencies or [0.0]), q[18], refused[0]


def _bare(url: str, tenant_id: uuid.UUID, args: argparse.Namespace, *,
          connections: int) -> float:
    """Events/s of the hand-written upsert over ``connections`` connections at once, each
    batch one transaction; rows are built before the clock starts."""
    done = [0]
    lock = threading.Lock()
    ready = threading.Barrier(connections + 1)
    stop_at: list[float] = []

    def one(n: int) -> None:
        with db.connect(url) as conn:
            b = 0
            ready.wait()
            while time.monotonic() < stop_at[0]:
                rows = _bare_rows(tenant_id, _events(args.batch, f"bare{connections}-{n}-{b}"))
                b += 1
                with conn.transaction():
                    conn.execute(BARE_UPSERT, rows).fetchall()
                with lock:
                    done[0] += args.batch

    threads = [threading.Thread(target=one, args=(n,)) for n in range(connections)]
    for t in threads:
        t.start()
    stop_at.append(time.monotonic() + args.seconds)
    started = time.monotonic()
    ready.wait()
    for t in threads:
        t.join()
    return done[0] / (time.monotonic() - started)


def _bare_rows(tenant_id: uuid.UUID, events: list[dict]) -> list[list]:
    payloads = [json.dumps(e["payload"], sort_keys=True, separators=(",", ":")) for e in events]
    return [[tenant_id] * len(events), [e["source_system"] for e in events],
            [e["source_event_id"] for e in events], [e["source_sequence"] for e in events],
            [None] * len(events), [e["type"] for e in events], payloads,
            [hashlib.sha256(p.encode()).hexdigest() for p in payloads]]


def _settle_intake_events(url: str, tenant_id: uuid.UUID) -> None:
    """(a) and (b) leave hundreds of thousands of pending events whose payloads are not
    judgments. Left pending, the apply worker would dead-letter them beside (c)'s events (each
    claim shares its rows between the tenants, ADR 0166), and (c) would time that too."""
    with db.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM event_ledger WHERE tenant_id = %s", (tenant_id,))
        conn.execute("VACUUM ANALYZE event_ledger")


def _judgment_events(n: int, tag: str = "j") -> list[dict]:
    return [{"source_system": "bench-apply", "source_event_id": f"{tag}-{i}", "source_sequence": i,
             "type": "judgment.upserted",
             "payload": {"File #": f"2024-CV-{tag.upper()}{i:07d}", "Plaintiff": "Acme Collections LLC",
                         "Defendant": f"Defendant {i}", "Amount": f"{i % 90000 + 100}.00",
                         "Entry Date": "2024-01-15"}} for i in range(n)]


def _tenant(url: str, name: str) -> uuid.UUID:
    with db.connect(url, autocommit=True) as conn:
        tenant_id: uuid.UUID = conn.execute("INSERT INTO tenants (name) VALUES (%s) "
                                            "RETURNING tenant_id", (name,)).fetchone()["tenant_id"]
    return tenant_id


def _apply(url: str, env: dict[str, str], root: Path, n: int) -> dict[str, float]:
    """Load n pending judgment events in a tenant of their own, time a worker draining them."""
    tenant_id = _tenant(url, "bench-apply")
    asyncio.run(_load(url, tenant_id, _judgment_events(n)))
    started = time.monotonic()
    worker = stack.spawn("worker", ["worker", "--once"], env, root / "logs")
    # Clocked until the last event is processed, not until exit: after draining the ledger,
    # --once also waits out the SQS consumer's idle checks, which is not apply work.
    with db.connect(url, autocommit=True) as conn:
        while worker.proc.poll() is None and conn.execute(
                "SELECT count(*) AS n FROM event_ledger WHERE tenant_id = %s AND "
                "process_state = 'pending'", (tenant_id,)).fetchone()["n"]:
            time.sleep(0.2)
    seconds = time.monotonic() - started
    if worker.proc.wait(600) != 0:
        raise SystemExit(f"worker failed:\n{worker.logs()[-4000:]}")
    with db.connect(url, autocommit=True) as conn:
        done = conn.execute(
            "SELECT count(*) FILTER (WHERE process_state = 'processed') AS processed, "
            "extract(epoch FROM max(processed_at) - min(processed_at)) AS span "
            "FROM event_ledger WHERE tenant_id = %s", (tenant_id,)).fetchone()
        rows = conn.execute("SELECT count(*) AS n FROM judgments WHERE tenant_id = %s",
                            (tenant_id,)).fetchone()["n"]
    if done["processed"] != n or rows != n:
        raise SystemExit(f"apply incomplete: {done['processed']} processed, {rows} judgments "
                         f"of {n}")
    span = float(done["span"] or 0)
    return {"seconds": seconds, "wall": n / seconds, "span": n / span if span else 0.0}


def _bare_apply(url: str, n: int) -> float:
    """The hand-written apply: claim 50 pending events at a time, then per event one
    transaction that upserts its judgment (values parsed inline) and marks it processed."""
    tenant_id = _tenant(url, "bench-bare-apply")
    asyncio.run(_load(url, tenant_id, _judgment_events(n, tag="b")))
    done = 0
    started = time.monotonic()
    with db.connect(url, autocommit=True) as conn:
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
                done += 1
    return done / (time.monotonic() - started)


def _profile(url: str, n: int) -> None:
    """Where apply's time goes: the worker's own applier in this process, each statement it
    runs timed by its name, the contract's validation timed, the rest being Python glue."""
    from shared.settings import WorkerSettings
    from worker.ledger import applier, apply

    tenant_id = _tenant(url, "bench-profile")
    asyncio.run(_load(url, tenant_id, _judgment_events(n, tag="p")))
    names = {text: name for name, text in apply.Q.items()}
    names[apply.UPSERT_JUDGMENT] = "upsert_judgment (records.sql)"
    spent: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)

    class Timed:
        def __init__(self, conn: Any) -> None:
            self._conn = conn

        def execute(self, query: Any, params: Any = None) -> Any:
            started = time.perf_counter()
            try:
                return self._conn.execute(query, params)
            finally:
                name = names.get(query, "other SQL")
                spent[name] += time.perf_counter() - started
                counts[name] += 1

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

    class TimedApplier(applier.Applier):
        def conn(self) -> Any:
            return Timed(super().conn())

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **kw: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spent[name] += time.perf_counter() - started
                counts[name] += 1
        return wrapper

    original = apply.validate
    apply.validate = timed("validate (contract, Python)", original)
    worker = TimedApplier(WorkerSettings(database_url=url, ledger_apply_report_s=3600))
    try:
        started = time.perf_counter()
        worker.drain()
        wall = time.perf_counter() - started
    finally:
        apply.validate = original
        worker.close()
    print(f"apply_profile {n} events in {wall:.1f} s = {n / wall:.0f} events/s in this process; "
          "where the time goes:")
    for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<32} {seconds:7.2f} s {seconds / wall:6.1%}  "
              f"{seconds / max(counts[name], 1) * 1000:6.2f} ms x {counts[name]}")
    rest = wall - sum(spent.values())
    print(f"  {'the rest (Python glue, commits)':<32} {rest:7.2f} s {rest / wall:6.1%}")


async def _load(url: str, tenant_id: uuid.UUID, events: list[dict]) -> None:
    pool = db.async_pool(url, min_size=1, max_size=2, name="bench-load")
    await pool.open()
    try:
        for i in range(0, len(events), 500):
            await writer.upsert(pool, [intake.check(e, tenant_id, 65536)
                                       for e in events[i:i + 500]])
    finally:
        await pool.close()


if __name__ == "__main__":
    main()
