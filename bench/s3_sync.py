"""Measure S3 source syncs on a stack of their own.

    python bench/s3_sync.py [--unchanged 5000] [--new 500] [--new-kb 50] [--repeat 3]
                            [--concurrency 4]

Starts Postgres (pgserver binaries) and moto (cli.embedded), migrates, makes a tenant and an
admin, and drives the sync service IN-PROCESS: gateway.syncs.SyncManager, the very object the
gateway's lifespan builds, on an asyncio loop with the gateway's pool and a file:// upload store.
No HTTP: a trigger's HTTP round trip is milliseconds and would only add noise. The advisory
lock, heartbeat, listing, downloads, intake transactions and outbox rows are all real.

(a) no-change re-sync of --unchanged objects: the pure diff cost. The bucket is synced once
    and the worker's result written directly (active versions), then re-synced --repeat times.
    Printed: wall time, time spent listing (inside list_objects_v2 calls), time in the
    database (awaited queries), and database time as a share of listing time; beside them, a
    bare paginated listing of the same bucket. Target: dominated by listing, database < 20 %.
(b) first sync of --new objects of --new-kb KB each: wall time from trigger to the sync's end,
    i.e. to every run and outbox job committed ("queued"); objects/s and MB/s; beside them,
    bare GETs of the same objects with as many threads (the ceiling moto allows here).

moto serves S3 from one Python process on the same two cores as everything else, so absolute
figures are moto's more than ours; the ratios are the point.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from cli.embedded import EmbeddedPostgres, MotoServer  # noqa: E402
from gateway.auth import users  # noqa: E402
from gateway.sources import syncs  # noqa: E402
from shared import aws, db, objectstore  # noqa: E402
from shared.db import migrate  # noqa: E402
from shared.settings import GatewaySettings  # noqa: E402
from tests.support import s3sync  # noqa: E402

MB = 1024 * 1024


def fill_bucket(s3: Any, bucket: str, count: int, size: int, tag: str) -> None:
    s3.create_bucket(Bucket=bucket)
    filler = (b"lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]

    def put(i: int) -> None:
        body = f"{tag} {i}\n".encode() + filler[: max(0, size - 16)]
        s3.put_object(Bucket=bucket, Key=f"{tag}/d{i % 10}/doc-{i:05d}.txt", Body=body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(count)))


def bare_download_s(s3: Any, bucket: str, threads: int) -> float:
    """GET + SHA-256 of every object with ``threads`` threads: what moto itself allows."""
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])]

    def get(key: str) -> None:
        digest = hashlib.sha256()
        for chunk in s3.get_object(Bucket=bucket, Key=key)["Body"].iter_chunks(MB):
            digest.update(chunk)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(get, keys))
    return time.perf_counter() - start


def bare_listing_s(s3: Any, bucket: str) -> float:
    start = time.perf_counter()
    for _ in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, PaginationConfig={
            "PageSize": 1000}):
        pass
    return time.perf_counter() - start


class Bench:
    def __init__(self, database_url: str, moto_url: str, uploads: pathlib.Path,
                 concurrency: int) -> None:
        self.settings = GatewaySettings(
            dev_mode=True, database_url=database_url, aws_endpoint_url=moto_url,
            upload_store_uri=uploads.as_uri(), sync_download_concurrency=concurrency)
        self.s3 = aws.client("s3", endpoint_url=moto_url, region="us-east-1")
        with db.connect(database_url, autocommit=True) as conn:
            self.tenant_id = users.ensure_tenant(conn, "bench")
            self.user_id = users.create_user(conn, tenant_id=self.tenant_id,
                                             email="admin@bench.test",
                                             password="bench-password",
                                             # an operator: no grant needed (0065)
                                             role="operator")["user_id"]

    async def __aenter__(self) -> Bench:
        self.pool = db.async_pool(self.settings.database_url, max_size=10, name="bench")
        await self.pool.open()
        store = objectstore.open_store(self.settings.upload_store_uri, self.s3)
        self.manager = syncs.SyncManager(self.settings, self.pool, store, self.s3)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.manager.shutdown()
        await self.pool.close()

    async def source(self, bucket: str) -> uuid.UUID:
        async with self.pool.connection() as conn:
            row = await (await conn.execute(
                "INSERT INTO ingestion_sources (tenant_id, name, bucket, created_by) "
                "VALUES (%s, %s, %s, %s) RETURNING source_id",
                (self.tenant_id, bucket, bucket, self.user_id))).fetchone()
        assert row is not None
        return row["source_id"]

    async def sync(self, source_id: uuid.UUID) -> tuple[float, dict[str, Any]]:
        start = time.perf_counter()
        started = await self.manager.trigger(tenant_id=self.tenant_id, source_id=source_id,
                                             initiated_by=self.user_id)
        await self.manager.wait(started["sync_id"])
        wall = time.perf_counter() - start
        async with self.pool.connection() as conn:
            row = await (await conn.execute("SELECT * FROM source_syncs WHERE sync_id = %s",
                                            (started["sync_id"],))).fetchone()
        assert row is not None and row["status"] == "succeeded", row
        return wall, row


async def no_change(bench: Bench, count: int, repeat: int) -> None:
    bucket = f"unchanged-{uuid.uuid4().hex[:6]}"
    print(f"filling {bucket} with {count} objects ...", flush=True)
    fill_bucket(bench.s3, bucket, count, 200, "u")
    source_id = await bench.source(bucket)
    wall, row = await bench.sync(source_id)
    print(f"  initial sync: {row['new_count']} queued in {wall:.1f} s")
    with db.connect(bench.settings.database_url, autocommit=True) as conn:
        s3sync.settle_runs(conn, bench.tenant_id)  # what a worker would have written
    runs = []
    for _ in range(repeat):
        wall, row = await bench.sync(source_id)
        assert row["unchanged_count"] == count and row["new_count"] == 0, row
        runs.append((wall, row["timings"]["list_s"], row["timings"]["db_s"]))
    bare = statistics.median(bare_listing_s(bench.s3, bucket) for _ in range(repeat))
    wall, list_s, db_s = (statistics.median(x) for x in zip(*runs, strict=True))
    print(f"(a) no-change re-sync of {count} objects (median of {repeat})")
    print(f"  resync_wall_s          {wall:8.3f}")
    print(f"  listing_s              {list_s:8.3f}   (inside list_objects_v2 calls)")
    print(f"  database_s             {db_s:8.3f}   (awaited queries)")
    print(f"  database_share_pct     {100 * db_s / list_s:8.1f}   of listing (target < 20)")
    print(f"  bare_listing_s         {bare:8.3f}   (paginator alone, same bucket)")
    print(f"  wall_over_listing      {wall / list_s:8.2f}")
    print(f"  objects_per_s          {count / wall:8.0f}")
    print(f"  {'PASS' if db_s < 0.2 * list_s else 'MISS'} database < 20 % of listing")


async def first_sync(bench: Bench, count: int, kb: int) -> None:
    bucket = f"new-{uuid.uuid4().hex[:6]}"
    print(f"filling {bucket} with {count} objects of {kb} KB ...", flush=True)
    fill_bucket(bench.s3, bucket, count, kb * 1024, "n")
    source_id = await bench.source(bucket)
    wall, row = await bench.sync(source_id)
    assert row["new_count"] == count, row
    mb = row["bytes_downloaded"] / MB
    timings = row["timings"]
    print(f"(b) first sync of {count} new {kb} KB objects, trigger to all runs queued")
    print(f"  first_sync_wall_s      {wall:8.3f}")
    print(f"  objects_per_s          {count / wall:8.1f}")
    print(f"  mb_per_s               {mb / wall:8.2f}   ({mb:.1f} MB)")
    print(f"  listing_s              {timings['list_s']:8.3f}")
    print(f"  fetch_s (summed)       {timings['fetch_s']:8.3f}   over "
          f"{bench.settings.sync_download_concurrency} download slots")
    print(f"  database_s (summed)    {timings['db_s']:8.3f}")
    slots = bench.settings.sync_download_concurrency
    bare = bare_download_s(bench.s3, bucket, slots)
    print(f"  bare_get_objects_per_s {count / bare:8.1f}   (GET + SHA-256 alone, {slots} threads)")
    print(f"  sync_share_of_bare_pct {100 * bare / wall:8.1f}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unchanged", type=int, default=5000)
    parser.add_argument("--new", type=int, default=500)
    parser.add_argument("--new-kb", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as folder:
        root = pathlib.Path(folder)
        pg = EmbeddedPostgres(root / "pg", disposable=True)
        moto = MotoServer(log_path=root / "moto.log")
        try:
            pg.start()
            database_url = pg.ensure_database("bench")
            migrate.apply(database_url)
            moto_url = moto.start()
            print(f"cores {len(os.sched_getaffinity(0))}, download slots {args.concurrency}, "
                  "in-process SyncManager, moto S3, embedded Postgres 16")
            async with Bench(database_url, moto_url, root / "uploads", args.concurrency) as bench:
                await no_change(bench, args.unchanged, args.repeat)
                await first_sync(bench, args.new, args.new_kb)
        finally:
            moto.stop()
            pg.stop("immediate")


if __name__ == "__main__":
    asyncio.run(main())
