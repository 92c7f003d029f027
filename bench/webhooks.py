"""Measure webhook delivery: throughput against a hand-written sender, and how long one tenant's
slow receivers can hold another tenant's delivery back.

    python bench/webhooks.py [--deliveries 2000] [--concurrency 16] [--deadline 2] [--quick]

Starts Postgres (cli.embedded), migrates, and runs local receivers on this machine. The
dispatcher is the worker's own (worker/webhooks/dispatcher.py), in this process, with its
settings but for the ones named here.

(a) deliveries_per_s: --deliveries test events to 20 endpoints of 10 tenants (receivers that
    answer 200 at once), delivered by the dispatcher until none is left: claims, signatures,
    URL checks, POSTs and settles. bare_posts_per_s: a hand-written asyncio + httpx loop that
    POSTs the same number of signed bodies to the same receivers with the same concurrency,
    with no database at all: the ceiling of the HTTP side. Their ratio says what the claims
    and settles cost.
(b) quiet_delay_s: one tenant's 20 endpoints answer 200 and then dribble one byte a second
    (three events each, so they keep every place busy); meanwhile another tenant's events come
    one every half second, and each one's wait from its commit to its arrival is measured.
    Target: the worst below --deadline plus the poll interval (one deadline).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import common  # first: sets the environment before boto3 loads
import httpx  # noqa: E402

from shared import db  # noqa: E402
from shared.db import migrate  # noqa: E402
from shared.settings import WorkerSettings  # noqa: E402
from shared.webhooks import signing  # noqa: E402
from tests.support.receiver import Dribbler, Receiver  # noqa: E402
from worker.webhooks import dispatcher  # noqa: E402

POLL_S = 0.1
SEND_TEST = db.load_queries(Path(__file__).resolve().parents[1] / "gateway" / "webhooks"
                            / "webhooks.sql")["send_test_event"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--deadline", type=float, default=2.0)
    parser.add_argument("--quiet-seconds", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="300 deliveries, 5 s of (b)")
    args = parser.parse_args()
    if args.quick:
        args.deliveries, args.quiet_seconds = min(args.deliveries, 300), 5.0
    with common.stack("bench-webhooks-") as (_root, pg, _moto):
        url = pg.ensure_database("bench")
        migrate.apply(url)
        _bench(args, url)


def _bench(args: argparse.Namespace, url: str) -> None:
    fast = Receiver().start()
    try:
        rate, hooks = _throughput(args, url, fast)
        bare = asyncio.run(_bare(args, hooks, fast))
    finally:
        fast.stop()
    print(f"deliveries_per_s {rate:.0f} ({args.deliveries} deliveries, concurrency "
          f"{args.concurrency})")
    print(f"bare_posts_per_s {bare:.0f} (hand-written asyncio + httpx, no database)")
    print(f"deliveries_vs_bare {rate / bare if bare else 0:.0%}")
    delays = _fairness(args, url)
    worst = max(delays) if delays else float("inf")
    print(f"quiet_delay_s p50 {statistics.median(delays):.2f} max {worst:.2f} over {len(delays)} "
          f"events while 20 dribbling endpoints held every place (target max < "
          f"{args.deadline + POLL_S:g})")
    print("fairness", "PASS" if worst < args.deadline + POLL_S else "MISS")


def _settings(url: str, args: argparse.Namespace, allow: list[str]) -> WorkerSettings:
    return WorkerSettings(database_url=url, webhook_url_allowlist=tuple(allow),
                          webhook_concurrency=args.concurrency, webhook_timeout_s=args.deadline,
                          webhook_dispatch_poll_s=POLL_S, webhook_backoff_base_s=60,
                          webhook_dispatch_batch=args.concurrency)


def _endpoint(conn: Any, tenant_id: uuid.UUID, url: str) -> tuple[uuid.UUID, str]:
    secret = signing.new_secret()
    row = conn.execute("INSERT INTO webhooks (tenant_id, url, event_types, secret) VALUES "
                       "(%s, %s, %s, %s) RETURNING webhook_id",
                       (tenant_id, url, ["ingestion.complete"], secret)).fetchone()
    return row["webhook_id"], secret


def _tenant(conn: Any, name: str) -> uuid.UUID:
    tenant_id: uuid.UUID = conn.execute("INSERT INTO tenants (name) VALUES (%s) RETURNING "
                                        "tenant_id", (name,)).fetchone()["tenant_id"]
    return tenant_id


def _throughput(args: argparse.Namespace, url: str,
                fast: Receiver) -> tuple[float, list[tuple[str, str]]]:
    hooks: list[tuple[uuid.UUID, uuid.UUID, str, str]] = []
    with db.connect(url, autocommit=True) as conn:
        for t in range(10):
            tenant_id = _tenant(conn, f"fast-{t}")
            for e in range(2):
                hook_url = fast.url.replace("/hooks/", f"/hooks/{t}-{e}/")
                webhook_id, secret = _endpoint(conn, tenant_id, hook_url)
                hooks.append((tenant_id, webhook_id, hook_url, secret))
        for n in range(args.deliveries):
            tenant_id, webhook_id, _, _ = hooks[n % len(hooks)]
            conn.execute(SEND_TEST, {"tenant_id": tenant_id, "webhook_id": webhook_id})
        conn.execute("ANALYZE webhook_deliveries")
    sender = dispatcher.Dispatcher(_settings(url, args, [h[2] for h in hooks]))
    started = time.monotonic()
    sender.drain()
    seconds = time.monotonic() - started
    with db.connect(url, autocommit=True) as conn:
        delivered = conn.execute("SELECT count(*) AS n FROM webhook_deliveries WHERE "
                                 "status = 'delivered'").fetchone()["n"]
    if delivered != args.deliveries:
        raise SystemExit(f"only {delivered} of {args.deliveries} delivered")
    return delivered / seconds, [(h[2], h[3]) for h in hooks]


def _signed_by_hand(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """Standard Webhooks headers as the spec's example code makes them: the baseline signs
    on its own, not with the product's shared/webhooks/signing.py."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": "v1," + base64.b64encode(mac).decode(),
            "content-type": "application/json"}


async def _bare(args: argparse.Namespace, hooks: list[tuple[str, str]], fast: Receiver) -> float:
    """The same number of signed POSTs with the same concurrency, and nothing else."""
    body = b'{"type":"webhook.test","timestamp":"t","data":{"message":"bench"}}'
    places = asyncio.Semaphore(args.concurrency)

    async def post(client: httpx.AsyncClient, n: int) -> None:
        hook_url, secret = hooks[n % len(hooks)]
        headers = _signed_by_hand(secret, f"msg_{n}", int(time.time()), body)
        async with places:
            response = await client.post(hook_url, content=body, headers=headers)
            response.raise_for_status()

    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=args.deadline) as client:
        started = time.monotonic()
        await asyncio.gather(*(post(client, n) for n in range(args.deliveries)))
        return args.deliveries / (time.monotonic() - started)


def _fairness(args: argparse.Namespace, url: str) -> list[float]:
    slow, quiet = Dribbler(length=120, every_s=1.0).start(), Receiver().start()
    try:
        with db.connect(url, autocommit=True) as conn:
            noisy = _tenant(conn, "noisy")
            slow_urls = [slow.url(f"/slow/{n}") for n in range(20)]
            for hook_url in slow_urls:
                webhook_id, _ = _endpoint(conn, noisy, hook_url)
                for _ in range(3):
                    conn.execute(SEND_TEST, {"tenant_id": noisy, "webhook_id": webhook_id})
            calm = _tenant(conn, "quiet")
            calm_hook, _ = _endpoint(conn, calm, quiet.url)
            sender = dispatcher.Dispatcher(_settings(url, args, [*slow_urls, quiet.url]))
            thread = threading.Thread(target=sender.run_forever, daemon=True)
            thread.start()
            try:
                while slow.most_open < args.concurrency:
                    time.sleep(0.05)
                sent: list[float] = []
                stop_at = time.monotonic() + args.quiet_seconds
                while time.monotonic() < stop_at:
                    conn.execute(SEND_TEST, {"tenant_id": calm, "webhook_id": calm_hook})
                    sent.append(time.monotonic())
                    time.sleep(0.5)
                deadline = time.monotonic() + args.deadline * 3
                while len(quiet.requests) < len(sent) and time.monotonic() < deadline:
                    time.sleep(0.05)
                arrived = list(quiet.arrived_at)
            finally:
                sender.stop()
                thread.join(args.deadline + 10)
    finally:
        slow.stop()
        quiet.stop()
    if len(arrived) < len(sent):
        print(f"quiet_missing {len(sent) - len(arrived)} of {len(sent)} never arrived")
        arrived += [float("inf")] * (len(sent) - len(arrived))
    # Each is a separate event of one endpoint: the n-th sent is the n-th to arrive, or an
    # earlier one overtook it, which only makes the worst wait look better than it was by
    # less than the half-second spacing.
    return [a - s for s, a in zip(sent, sorted(arrived), strict=True)]


if __name__ == "__main__":
    main()
