"""What the benchmarks share: the repo on sys.path, offline/moto settings, a bench user, the
stack (durable like `make run`, or disposable), the worker's environment and its memory.

Import this first: it sets the environment before anything imports boto3 or the model.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", HF_HUB_OFFLINE="1",
                  TRANSFORMERS_OFFLINE="1")


class BenchUser:
    """A tenant `bench` and its admin, written straight into the database."""

    def __init__(self, conn, name: str = "bench") -> None:  # type: ignore[no-untyped-def]
        self.tenant_id = conn.execute("INSERT INTO tenants (name) VALUES (%s) "
                                      "RETURNING tenant_id", (name,)).fetchone()["tenant_id"]
        self.user_id = conn.execute(
            "INSERT INTO users (tenant_id, email, password_hash, role) VALUES (%s, %s, 'x', 'admin') "
            "RETURNING user_id", (self.tenant_id, f"{name}@bench.test")).fetchone()["user_id"]

    def token(self) -> str:
        from gateway import auth
        from tests.support import stack as test_stack

        return auth.issue_token(auth.Principal(self.user_id, self.tenant_id, "admin"),
                                test_stack.TEST_JWT_SECRET, 1)


@contextlib.contextmanager
def stack(prefix: str, *, durable: bool = False) -> Iterator[tuple[Path, Any, Any]]:
    """A temp folder, an embedded Postgres and a moto server, stopped whatever happens.

    ``durable``: the Postgres `make run` starts (fsync, full-page writes, a password: ADR 0040),
    for benches whose figures are database writes; otherwise the test suite's throw-away mode."""
    from cli.embedded import EmbeddedPostgres, MotoServer

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        root = Path(tmp)
        pg = (EmbeddedPostgres(root / "pg", password=secrets.token_urlsafe(16)) if durable
              else EmbeddedPostgres(root / "pg", disposable=True))
        moto = MotoServer()
        pg.start()
        moto.start()
        if durable:
            _print_server(pg.url())
        try:
            yield root, pg, moto
        finally:
            moto.stop()
            pg.stop("immediate")


SERVER_SETTINGS = ("shared_buffers", "fsync", "full_page_writes", "max_wal_size")


def _print_server(url: str) -> None:
    """The settings both scripts of a bench share, printed beside their figures."""
    from shared import db  # here: this module must load before anything imports boto3

    with db.connect(url) as conn:
        shown = conn.execute("SELECT name, current_setting(name) AS value "
                             "FROM unnest(%s::text[]) AS name", (list(SERVER_SETTINGS),)).fetchall()
    print("postgres (shared by every script of the bench): "
          + ", ".join(f"{s['name']} {s['value']}" for s in shown))


def wait_ready(url: str, timeout: float = 180) -> None:
    """Wait until a gateway has its query model: it answers vector queries 503 model_loading
    until then (ADR 0321), which a bench must not count or fail on."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health/ready", timeout=10).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise SystemExit(f"the gateway at {url} was not ready after {timeout:.0f} s")
        time.sleep(0.2)


def stack_env(root: Path, url: str, moto: Any) -> dict[str, str]:
    """Gateway and worker settings for a bench stack: its database, queues and stores."""
    from shared import aws, queue
    from tests.support import stack as test_stack

    sqs = aws.client("sqs", endpoint_url=moto.url, region="us-east-1")
    q_url, dlq_url = queue.ensure_queues(sqs, f"bench-{uuid.uuid4().hex[:6]}")
    return {"DATABASE_URL": url, "AWS_ENDPOINT_URL": moto.url, "SQS_QUEUE_URL": q_url,
            "SQS_DLQ_URL": dlq_url, "UPLOAD_STORE_URI": (root / "uploads").as_uri(),
            "ARTIFACT_STORE_URI": (root / "artifacts").as_uri(),
            "JWT_SECRET": test_stack.TEST_JWT_SECRET,
            "METRICS_TOKEN": "bench-metrics-token-" + "m" * 20, "DEV_MODE": "false",
            "OUTBOX_POLL_S": "0.2", "SQS_WAIT_TIME_S": "1", "UPLOAD_MAX_SIZE_MB": "1024",
            "LOG_LEVEL": "INFO", **test_stack.MOTO_ENV, **test_stack.OFFLINE_ENV}


class RssPeak:
    """Peak memory of a process over what it held when sampling started (its RSS), and of its
    child processes (a worker's validation processes: their PSS, so pages they share with the
    server they were forked from count once), sampled every 50 ms."""

    def __init__(self, pid: int) -> None:
        import psutil

        self._psutil = psutil
        self.proc = psutil.Process(pid)
        self.base = self.proc.memory_info().rss
        self.peak = self.base
        self.children_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _children(self) -> int:
        total = 0
        for child in self.proc.children(recursive=True):
            with contextlib.suppress(self._psutil.Error):
                total += child.memory_full_info().pss
        return total

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
                self.children_peak = max(self.children_peak, self._children())
            except self._psutil.Error:
                return

    def stop(self) -> str:
        """What to print: the worker's growth and its children's peak, in MiB."""
        self._stop.set()
        self._thread.join()
        return (f"worker peak RSS growth {(self.peak - self.base) / 2**20:.1f} MiB; its child "
                f"processes (validation pool) peak PSS {self.children_peak / 2**20:.1f} MiB")


def settle(conn: Any) -> None:
    """A CHECKPOINT before a timed script (not timed): it starts with no dirty page of the seed
    or of the script before it left to write back. Seeding writes more WAL than max_wal_size,
    so a checkpoint it started otherwise runs on through the first script timed after it, on
    the same two cores; each script still pays its own full-page images after this one."""
    conn.execute("CHECKPOINT")


def load_average() -> str:
    return "load average (1, 5, 15 min): " + ", ".join(f"{v:.2f}" for v in os.getloadavg())
