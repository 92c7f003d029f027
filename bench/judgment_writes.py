"""What a judgments table's shape and its server cost the plain script's write (ADR 0540).

    python bench/judgment_writes.py keys       # PRIMARY KEY (id) beside (tenant_id, id) vs one key
    python bench/judgment_writes.py gins       # three trigram GINs vs one multicolumn GIN
    python bench/judgment_writes.py settings   # Postgres's defaults, max_wal_size, shared_buffers
    python bench/judgment_writes.py keys --rows 2000 --seed 20000   # a smoke run

No product code runs here: the write is `bench/records.py`'s plain script (its file, its COPY
into a stage, its one `INSERT … ON CONFLICT … DO UPDATE`), timed alone with the WAL it writes,
onto --seed judgments seeded as that bench seeds them, on the same durable stack.

`keys` and `gins` put two tables `LIKE judgments INCLUDING ALL` side by side, the second
reshaped (the id-only key put back; the GINs made one), and write into each in turn after a CHECKPOINT (each run then pays its full-page
images), rolled back, alternated. `settings` writes into one table without forcing checkpoints
(they fall where the WAL puts them, as in an import), restarting the server between settings.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path

import common  # first: sets the environment before boto3 loads
import records  # noqa: E402

from shared import db  # noqa: E402
from shared.db import migrate  # noqa: E402

GINS = ("case_number_normalized", "plaintiff_name_normalized", "defendant_name_normalized")


def _id_key_back(conn, table: str) -> None:  # type: ignore[no-untyped-def]
    """Before migration 0300 the ids had a second key of their own, PRIMARY KEY (id)."""
    conn.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_id_key UNIQUE (id)")


def _one_gin(conn, table: str) -> None:  # type: ignore[no-untyped-def]
    """The three trigram GINs of ``table`` as one multicolumn GIN."""
    names = [r["indexname"] for r in conn.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE '%%gin_trgm_ops%%'",
        (table,)).fetchall()]
    conn.execute(f"DROP INDEX {', '.join(names)}")
    conn.execute(f"CREATE INDEX {table}_trgm ON {table} USING gin ("
                 + ", ".join(f"{c} gin_trgm_ops" for c in GINS) + ")")


RESHAPE = {"keys": ("one key of ids (0300)", "two keys (before 0300)", _id_key_back),
           "gins": ("three trigram GINs", "one multicolumn GIN", _one_gin)}


def _stage(conn, rows: int, seeded: int) -> None:  # type: ignore[no-untyped-def]
    """The plain script's stage of its file, kept as a table for every run to read."""
    path = Path(tempfile.mkdtemp()) / "judgments.csv"
    path.write_bytes(records.make_csv(rows, "writes", seeded))
    conn.execute(records.BARE_STAGE.replace("TEMP TABLE", "TABLE"))
    with conn.cursor().copy("COPY bare_stage FROM STDIN") as copy:
        for row in records.bare_rows(path):
            copy.write_row(row)
    conn.execute("ANALYZE bare_stage")


def _write(url: str, table: str, tenant_id: uuid.UUID, *, checkpoint: bool) -> tuple[float, float]:
    """The plain upsert into ``table``, rolled back: seconds and MB of WAL."""
    with db.connect(url) as conn:
        if checkpoint:
            conn.execute("CHECKPOINT")
        start = conn.execute("SELECT pg_current_wal_insert_lsn() AS lsn").fetchone()
        began = time.monotonic()
        conn.execute(records.BARE_UPSERT.replace("bare_judgments", table),
                     {"tenant_id": tenant_id}).fetchall()
        took = time.monotonic() - began
        wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s::pg_lsn) AS b",
                           (start["lsn"] if start else None,)).fetchone()
        conn.rollback()
    return took, float(wal["b"] if wal else 0) / 1e6


def _show(label: str, took: float, wal: float) -> None:
    print(f"{label:42s} {took * 1000:7,.0f} ms  WAL {wal:5,.0f} MB  "
          f"load {os.getloadavg()[0]:.2f}", flush=True)


def compare_shapes(url: str, tenant_id: uuid.UUID, args: argparse.Namespace) -> None:
    as_is, reshaped, reshape = RESHAPE[args.compare]
    with db.connect(url, autocommit=True) as conn:
        for table in ("as_is", "reshaped"):
            conn.execute(f"CREATE TABLE {table} (LIKE judgments INCLUDING ALL)")
        reshape(conn, "reshaped")
        for table in ("as_is", "reshaped"):
            records.seed_table(conn, table, tenant_id, args.seed)
        _stage(conn, args.rows, args.seed)
    labels = {"as_is": as_is, "reshaped": reshaped}
    for round_ in range(args.rounds):
        for table in ("as_is", "reshaped") if round_ % 2 == 0 else ("reshaped", "as_is"):
            _show(f"round {round_ + 1}, {labels[table]}",
                  *_write(url, table, tenant_id, checkpoint=True))


def compare_settings(url: str, pg, tenant_id: uuid.UUID, args: argparse.Namespace) -> None:  # type: ignore[no-untyped-def]
    with db.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE as_is (LIKE judgments INCLUDING ALL)")
        records.seed_table(conn, "as_is", tenant_id, args.seed)
        _stage(conn, args.rows, args.seed)
    for label, setting in (("Postgres's defaults", None),
                           ("max_wal_size 8GB", "max_wal_size = '8GB'"),
                           ("+ shared_buffers 1GB (first run cold)", "shared_buffers = '1GB'")):
        if setting:
            with db.connect(url, autocommit=True) as conn:
                conn.execute(f"ALTER SYSTEM SET {setting}")
            pg.stop("fast")
            pg.start()
        for _ in range(args.rounds):
            _show(label, *_write(url, "as_is", tenant_id, checkpoint=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("compare", choices=("keys", "gins", "settings"))
    parser.add_argument("--rows", type=int, default=100_000, help="the file's rows")
    parser.add_argument("--seed", type=int, default=1_500_000, help="judgments already stored")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with common.stack("bench-judgment-writes-", durable=True) as (_root, pg, _moto):
        url = pg.ensure_database("bench")
        migrate.apply(url)
        with db.connect(url, autocommit=True) as conn:
            tenant_id = common.BenchUser(conn, "writes").tenant_id
        print(f"{args.rows:,} rows ({args.rows // 20:,} amends) onto {args.seed:,} judgments")
        if args.compare == "settings":
            compare_settings(url, pg, tenant_id, args)
        else:
            compare_shapes(url, tenant_id, args)


if __name__ == "__main__":
    main()
