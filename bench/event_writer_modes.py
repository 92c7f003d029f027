"""The event writer's two candidate ways into Postgres, side by side (docs/decisions/0280).

    python bench/event_writer_modes.py [--seconds 10] [--connections 4] [--group 400]

Starts a throw-away Postgres (cli.embedded) and migrates it, then for --seconds each, on
--connections connections at once (the writer's default), commits groups of --group new events
(checked by intake exactly as the gateway checks them):

- copy: the product's writer (gateway/events/writer.py upsert): binary COPY into the
  connection's staging table, one set statement that inserts, counts repeats and returns each
  event's outcome.
- pipeline: psycopg pipeline mode, one `INSERT ... ON CONFLICT DO UPDATE ... RETURNING` per
  event (executemany, returning), the outcome of each worked out from what it returns.

Both in one transaction per group; events/s and the gateway process's CPU seconds per 1,000
events (the gateway's core is what intake runs out of first). No HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import common  # first: the repo on sys.path

from gateway.events import intake, writer  # noqa: E402
from shared import db  # noqa: E402
from shared.db import migrate  # noqa: E402

ONE = """INSERT INTO event_ledger AS l (tenant_id, source_system, source_event_id,
    source_sequence, source_emitted_at, type, payload, payload_sha256)
VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s)
ON CONFLICT (tenant_id, source_system, source_event_id) DO UPDATE
SET ingest_attempt_count = l.ingest_attempt_count + 1, ingest_last_seen_at = now()
RETURNING (xmax = 0) AS inserted, ledger_id, payload_sha256, type, source_sequence,
          source_emitted_at"""


async def pipeline(pool: db.AsyncPool, events: list[intake.Event]) -> list[dict[str, Any]]:
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        await cur.executemany(ONE, [(e.tenant_id, e.source_system, e.source_event_id,
                                     e.source_sequence, e.source_emitted_at, e.type,
                                     e.payload_json, e.payload_sha256) for e in events],
                              returning=True)
        out = []
        for e in events:
            row = await cur.fetchone()
            assert row is not None
            same = (row["payload_sha256"], row["type"], row["source_sequence"],
                    row["source_emitted_at"]) == (e.payload_sha256, e.type, e.source_sequence,
                                                  e.source_emitted_at)
            out.append({"outcome": "new" if row["inserted"] else
                        "duplicate" if same else "conflict", "ledger_id": row["ledger_id"]})
            cur.nextset()
        return out


async def run(url: str, mode: str, args: argparse.Namespace, tenant_id: uuid.UUID) -> None:
    pool = db.async_pool(url, min_size=args.connections, max_size=args.connections,
                         configure=writer.prepare)
    await pool.open(wait=True)
    upsert = writer.upsert if mode == "copy" else pipeline
    emitted = datetime.now(UTC).isoformat()
    run_id = uuid.uuid4().hex[:8]
    done = [0]
    stop_at = time.monotonic() + args.seconds

    async def one(n: int) -> None:
        g = 0
        while time.monotonic() < stop_at:
            events = [intake.check({"source_system": "bench", "source_event_id":
                                    f"{run_id}-{n}-{g}-{i}", "source_sequence": i,
                                    "source_emitted_at": emitted, "type": "judgment.upserted",
                                    "payload": {"case_number": f"{n}-{g}-{i}", "amount": i,
                                                "court": "Superior Court"}},
                                   tenant_id, 65536) for i in range(args.group)]
            g += 1
            outcomes = await upsert(pool, events)
            assert all(o["outcome"] == "new" for o in outcomes)
            done[0] += len(events)

    cpu, started = time.process_time(), time.monotonic()
    await asyncio.gather(*(one(n) for n in range(args.connections)))
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    await pool.close()
    print(f"{mode}_events_per_s {done[0] / elapsed:.0f} ({args.connections} connections x "
          f"groups of {args.group}; {cpu / done[0] * 1000:.2f} s of this process's CPU per "
          f"1,000 events) [load {' '.join(f'{x:.2f}' for x in os.getloadavg())}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--group", type=int, default=400)
    args = parser.parse_args()
    with common.stack("bench-writer-") as (_root, pg, _moto):
        url = pg.ensure_database("bench")
        migrate.apply(url)
        with db.connect(url, autocommit=True) as conn:
            tenant_id = conn.execute("INSERT INTO tenants (name) VALUES ('bench') "
                                     "RETURNING tenant_id").fetchone()["tenant_id"]
        for mode in ("copy", "pipeline", "copy", "pipeline"):
            asyncio.run(run(url, mode, args, tenant_id))


if __name__ == "__main__":
    main()
