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
- arrays: the product's statement fed by nine array parameters it unnests instead of the
  staging table, one statement on an autocommit connection: one round trip per group instead of
  about five (ADR 0341: Postgres the same, three times this process's CPU: not kept).
- bare_copy: bench/events.py's bare COPY script's statements (text COPY into a temporary table,
  `INSERT ... SELECT ... ON CONFLICT DO UPDATE ... RETURNING` of each event's id and whether
  it is new): what Postgres spends on the same rows with no outcome work (ADR 0288).

Each in one transaction per group, on an emptied ledger; events/s, this process's CPU seconds
per 1,000 events (the gateway's side of the writer) and Postgres's (its backends). No HTTP.
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
from events import COLUMNS, FROM_STAGE, Cpu  # noqa: E402
from psycopg.rows import tuple_row  # noqa: E402

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


STAGE = ("CREATE TEMP TABLE IF NOT EXISTS bench_stage (tenant_id uuid, source_system text, "
         "source_event_id text, source_sequence bigint, source_emitted_at timestamptz, "
         "type text, payload text, payload_sha256 text) ON COMMIT DELETE ROWS")


async def bare_copy(pool: db.AsyncPool, events: list[intake.Event]) -> list[dict[str, Any]]:
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        async with cur.copy(f"COPY bench_stage ({COLUMNS}) FROM STDIN") as copy:
            for e in events:
                await copy.write_row((e.tenant_id, e.source_system, e.source_event_id,
                                      e.source_sequence, e.source_emitted_at, e.type,
                                      e.payload_json, e.payload_sha256))
        await cur.execute(FROM_STAGE.format(t="event_ledger"))
        return [{"outcome": "new" if row["inserted"] else "duplicate",
                 "ledger_id": row["ledger_id"]} for row in await cur.fetchall()]


async def upsert_arrays(pool: db.AsyncPool, events: list[intake.Event]) -> list[dict[str, Any]]:
    """The product's statement fed by arrays instead of COPY (ADR 0341, not kept): as
    ``writer.upsert``, in one round trip: the group's columns as nine array parameters that
    the statement unnests, on an autocommit connection (one statement, its own transaction)."""
    columns: list[list[Any]] = [list(range(len(events))), [], [], [], [], [], [], [], []]
    (ranks, tenants, systems, ids, sequences, emitted, types, payloads, hashes) = columns
    for e in events:
        tenants.append(e.tenant_id)
        systems.append(e.source_system)
        ids.append(e.source_event_id)
        sequences.append(e.source_sequence)
        emitted.append(e.source_emitted_at)
        types.append(e.type)
        payloads.append(e.payload_json)
        hashes.append(e.payload_sha256)
    async with pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(INTAKE_ARRAYS, {
            "n": len(events), "rank": ranks, "tenant_id": tenants, "source_system": systems,
            "source_event_id": ids, "source_sequence": sequences, "source_emitted_at": emitted,
            "type": types, "payload": payloads, "payload_sha256": hashes}, prepare=True)
        rows = await cur.fetchall()
    if len(rows) != len(events):
        raise RuntimeError(f"intake answered {len(rows)} outcomes for {len(events)} events")
    return [writer.outcome(kind, ledger_id) for _, ledger_id, kind in rows]


INTAKE_ARRAYS = writer.Q["intake_group"].replace("WITH s AS MATERIALIZED (", """WITH event_intake AS MATERIALIZED (
    SELECT * FROM unnest(%(rank)s::int4[], %(tenant_id)s::uuid[], %(source_system)s::text[],
                         %(source_event_id)s::text[], %(source_sequence)s::int8[],
                         %(source_emitted_at)s::timestamptz[], %(type)s::text[],
                         %(payload)s::text[], %(payload_sha256)s::text[])
        AS t(rank, tenant_id, source_system, source_event_id, source_sequence,
             source_emitted_at, type, payload, payload_sha256)
), s AS MATERIALIZED (""", 1)
assert writer.Q["intake_group"] != INTAKE_ARRAYS


async def _prepare_both(conn: Any) -> None:
    await writer.prepare(conn)
    await conn.execute(STAGE)
    await conn.commit()
    await conn.set_autocommit(True)


MODES = {"copy": writer.upsert, "arrays": upsert_arrays, "pipeline": pipeline, "bare_copy": bare_copy}


async def run(url: str, mode: str, args: argparse.Namespace, tenant_id: uuid.UUID,
              pg: Any) -> None:
    with db.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE event_ledger CASCADE")
    pool = db.async_pool(url, min_size=args.connections, max_size=args.connections,
                         configure=_prepare_both)
    await pool.open(wait=True)
    upsert = MODES[mode]
    spent = Cpu(pg, None)
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
    postgres = spent.per_thousand(done[0]).split("postgres ")[1].split(",")[0]
    print(f"{mode}_events_per_s {done[0] / elapsed:.0f} ({args.connections} connections x "
          f"groups of {args.group}; CPU s per 1,000 events: this process {cpu / done[0] * 1000:.3f}, "
          f"Postgres {postgres}) [load {' '.join(f'{x:.2f}' for x in os.getloadavg())}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--group", type=int, default=400)
    parser.add_argument("--modes", default="copy,pipeline,copy,pipeline",
                        help=f"comma-separated, run in this order; of {', '.join(MODES)}")
    args = parser.parse_args()
    with common.stack("bench-writer-") as (_root, pg, _moto):
        url = pg.ensure_database("bench")
        migrate.apply(url)
        with db.connect(url, autocommit=True) as conn:
            tenant_id = conn.execute("INSERT INTO tenants (name) VALUES ('bench') "
                                     "RETURNING tenant_id").fetchone()["tenant_id"]
        for mode in args.modes.split(","):
            asyncio.run(run(url, mode, args, tenant_id, pg))


if __name__ == "__main__":
    main()
