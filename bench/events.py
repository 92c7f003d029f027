"""Measure event intake (POST /v1/events) against a bare upsert loop on the same database.

    python bench/events.py [--seconds 20] [--clients 16] [--batch 100] [--apply 20000]

Starts Postgres and moto (cli.embedded), migrates, makes a tenant, an admin and an API key, and
runs `ingest gateway` as a subprocess with its default event settings. Then, in the same run:

(a) intake_events_per_s: --clients concurrent clients, each on its own connection, send
    batches of --batch new events for --seconds; counted are events answered 202 (the answer
    comes after commit). intake_p95_ms: the requests' 95th percentile latency. Target < 100 ms.
(b) bare_events_per_s: one connection running the writer's own multi-row upsert
    (gateway/events/events.sql upsert_events) on batches of --batch new events, each batch its
    own transaction, for --seconds: what the database does with no HTTP, JSON or queue.
    Target: (a) >= 50 % of (b).
(c) apply_events_per_s: --apply pending `judgment.upserted` events (distinct case numbers, one
    judgments row each by the contract's column names) written by the writer's own upsert in
    another tenant, then one real `ingest worker --once` with its default settings drains them.
    Counted from the worker's start to the last event processed (start-up included, the
    consumer's idle wait before exit not) and, apply only, over the span from the first to the
    last event's processed_at.

Figures print as `name value (target ...)`, then PASS/MISS per target.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
import uuid
from pathlib import Path

import common  # first: sets the environment before boto3 loads

from cli.embedded import EmbeddedPostgres, MotoServer  # noqa: E402
from gateway.events import intake, keys, writer  # noqa: E402
from shared import aws, db, queue  # noqa: E402
from shared.db import migrate  # noqa: E402
from tests.support import stack  # noqa: E402

JWT_SECRET = "bench-secret-" + "b" * 40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--apply", type=int, default=20000, help="0 skips (c)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a gateway setting other than its default, e.g. EVENTS_GROUP_MAX=5000")
    args = parser.parse_args()
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
    bare = asyncio.run(_bare(url, user.tenant_id, args))
    _settle_intake_events(url, user.tenant_id)
    applied = _apply(url, env, root, args.apply) if args.apply else None
    ratio = rate / bare if bare else 0.0
    print(f"intake_events_per_s {rate:.0f} ({args.clients} clients x {args.batch}; "
          f"{refused} requests answered 429)")
    print(f"intake_p50_ms {p50:.1f}")
    print(f"intake_p95_ms {p95:.1f} (target < 100)")
    print(f"bare_events_per_s {bare:.0f}")
    print(f"intake_vs_bare {ratio:.0%} (target >= 50%)")
    if applied:
        print(f"apply_events_per_s {applied['wall']:.0f} ({args.apply} judgment.upserted by "
              f"one `ingest worker --once` in {applied['seconds']:.1f} s, start-up included)")
        print(f"apply_only_events_per_s {applied['span']:.0f} (first to last processed_at)")
    print("p95", "PASS" if p95 < 100 else "MISS", "| rate", "PASS" if ratio >= 0.5 else "MISS")


def _events(n: int, tag: str) -> list[dict]:
    return [{"source_system": "bench", "source_event_id": f"{tag}-{i}", "source_sequence": i,
             "type": "judgment.upserted", "payload": {"case_number": f"{tag}-{i}", "amount": i}}
            for i in range(n)]


def _intake(gateway: stack.Process, key: str, args: argparse.Namespace) -> tuple[float, float, float, int]:
    latencies: list[float] = []
    acked = [0]
    refused = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + args.seconds

    def client(n: int) -> None:
        with gateway.client() as c:
            b = 0
            while time.monotonic() < deadline:
                batch = _events(args.batch, f"c{n}-b{b}")
                b += 1
                started = time.perf_counter()
                r = c.post("/v1/events", json=batch, headers={"X-Api-Key": key})
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
    q = statistics.quantiles(latencies, n=20) if len(latencies) > 1 else [0.0] * 19
    return acked[0] / elapsed, statistics.median(latencies or [0.0]), q[18], refused[0]


async def _bare(url: str, tenant_id: uuid.UUID, args: argparse.Namespace) -> float:
    pool = db.async_pool(url, min_size=1, max_size=2, name="bench")
    await pool.open()
    try:
        done, b, spent = 0, 0, 0.0
        while spent < args.seconds:
            # Built outside the clock: only the database's work is timed.
            batch = [intake.check(e, tenant_id, 65536) for e in _events(args.batch, f"bare-{b}")]
            b += 1
            started = time.perf_counter()
            await writer.upsert(pool, batch)
            spent += time.perf_counter() - started
            done += len(batch)
        return done / spent
    finally:
        await pool.close()


def _settle_intake_events(url: str, tenant_id: uuid.UUID) -> None:
    """(a) and (b) leave hundreds of thousands of pending events whose payloads are not
    judgments. Left pending, the apply worker would dead-letter them beside (c)'s events (each
    claim shares its rows between the tenants, ADR 0166), and (c) would time that too."""
    with db.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM event_ledger WHERE tenant_id = %s", (tenant_id,))
        conn.execute("VACUUM ANALYZE event_ledger")


def _judgment_events(n: int) -> list[dict]:
    return [{"source_system": "bench-apply", "source_event_id": f"j-{i}", "source_sequence": i,
             "type": "judgment.upserted",
             "payload": {"File #": f"2024-CV-{i:07d}", "Plaintiff": "Acme Collections LLC",
                         "Defendant": f"Defendant {i}", "Amount": f"{i % 90000 + 100}.00",
                         "Entry Date": "2024-01-15"}} for i in range(n)]


def _apply(url: str, env: dict[str, str], root: Path, n: int) -> dict[str, float]:
    """Load n pending judgment events in a tenant of their own, time a worker draining them."""
    with db.connect(url, autocommit=True) as conn:
        tenant_id = conn.execute("INSERT INTO tenants (name) VALUES ('bench-apply') "
                                 "RETURNING tenant_id").fetchone()["tenant_id"]
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
