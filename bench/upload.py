"""Measure the gateway's upload path against its targets, on a stack of its own.

    python bench/upload.py [--big-mb 200] [--uploads 500] [--clients 16] [--keep]

Starts Postgres (pgserver binaries) and moto (cli.embedded), migrates, makes a user, and runs
`ingest gateway` as a subprocess with a file:// upload store, exactly as in production. Then:

(a) upload_rss_growth_mb: the gateway's peak RSS above idle while it receives one --big-mb
    upload streamed from a generator (chunked; VmRSS sampled every 10 ms, and VmHWM after a
    peak reset where the kernel allows it). Target < 32 MB.
(b) upload_throughput_mb_s: one --big-mb upload with Content-Length, wall clock from request to
    response, next to a baseline of sha256 + write of the same bytes to a file in the same
    folder, measured in the same run. Target >= 25% of the baseline.
(c) upload_latency_p50_ms / p95: --uploads distinct 100 KB .txt files from --clients concurrent
    clients, each with its own connection. Target p95 < 150 ms.

Figures print as plain lines: `name value (target ...)`, then PASS/MISS per target.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

# Run as a script from anywhere: make the repository importable.
ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

import httpx  # noqa: E402

from cli.embedded import EmbeddedPostgres, MotoServer, free_port, wait_for_port  # noqa: E402
from gateway import auth  # noqa: E402
from gateway.auth import users  # noqa: E402
from shared import aws, db, queue  # noqa: E402
from shared.db import migrate  # noqa: E402

MiB = 1024 * 1024
JWT_SECRET = "bench-secret-" + "b" * 40
CHUNK = MiB
BOUNDARY = "bench-boundary-5b1c"


# ── the stack ───────────────────────────────────────────────────────────────────────────────
class Stack:
    def __init__(self, folder: pathlib.Path, extra_env: dict[str, str] | None = None) -> None:
        self.folder = folder
        self.extra_env = extra_env or {}
        self.pg = EmbeddedPostgres(folder / "pg", disposable=True)
        self.moto = MotoServer(log_path=folder / "moto.log")
        self.gateway: subprocess.Popen | None = None
        self.port = free_port()
        self.uploads = folder / "uploads"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        self.pg.start()
        database_url = self.pg.ensure_database("bench")
        migrate.apply(database_url)
        moto_url = self.moto.start()
        sqs = aws.client("sqs", endpoint_url=moto_url, region="us-east-1")
        queue_url, dlq_url = queue.ensure_queues(sqs, "bench-jobs")
        with db.connect(database_url, autocommit=True) as conn:
            tenant_id = users.ensure_tenant(conn, "bench")
            user = users.create_user(conn, tenant_id=tenant_id, email="bench@bench.test",
                                     password="bench-password", role="user", replace=True)
        token = auth.issue_token(auth.Principal(user["user_id"], tenant_id, "user"),
                                 JWT_SECRET, 2)
        env = {
            **os.environ, "DATABASE_URL": database_url, "AWS_ENDPOINT_URL": moto_url,
            "SQS_QUEUE_URL": queue_url, "SQS_DLQ_URL": dlq_url,
            "UPLOAD_STORE_URI": self.uploads.as_uri(), "JWT_SECRET": JWT_SECRET,
            "METRICS_TOKEN": "bench-metrics-" + "m" * 20,
            "UPLOAD_MAX_SIZE_MB": "300", "LOG_LEVEL": "WARNING", **self.extra_env,
        }
        log = open(self.folder / "gateway.log", "ab")  # noqa: SIM115 - lives with the process
        self.gateway = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "gateway", "--port", str(self.port)],
            cwd=ROOT, env=env, stdout=log, stderr=log)
        wait_for_port(self.port, timeout=60, proc=self.gateway)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health/live", timeout=2).status_code == 200:
                    return token
            time.sleep(0.05)
        raise RuntimeError("gateway did not become live")

    def stop(self) -> None:
        if self.gateway and self.gateway.poll() is None:
            self.gateway.terminate()
            try:
                self.gateway.wait(20)
            except subprocess.TimeoutExpired:
                self.gateway.kill()
        self.moto.stop()
        self.pg.stop()


# ── request bodies ──────────────────────────────────────────────────────────────────────────
def multipart_parts(filename: str) -> tuple[bytes, bytes, str]:
    opening = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; "
               f"filename=\"{filename}\"\r\nContent-Type: text/plain\r\n\r\n").encode()
    closing = f"\r\n--{BOUNDARY}--\r\n".encode()
    return opening, closing, f"multipart/form-data; boundary={BOUNDARY}"


def text_block(size: int, salt: str) -> bytes:
    """``size`` bytes of text that differ per salt (uploads are content-addressed)."""
    line = f"{salt} the quick brown fox jumps over the lazy dog 0123456789\n".encode()
    return (line * (size // len(line) + 1))[:size]


def streamed_body(size: int, salt: str) -> tuple[Iterator[bytes], str]:
    opening, closing, content_type = multipart_parts("big.txt")
    block = text_block(CHUNK, salt)

    def gen() -> Iterator[bytes]:
        yield opening
        sent = 0
        while sent < size:
            n = min(CHUNK, size - sent)
            yield block[:n]
            sent += n
        yield closing

    return gen(), content_type


# ── (a) memory ──────────────────────────────────────────────────────────────────────────────
def _status_kb(pid: int, field: str) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_peak(pid: int) -> bool:
    try:
        pathlib.Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class RssSampler(threading.Thread):
    def __init__(self, pid: int, interval_s: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval_s = pid, interval_s
        self.samples: list[int] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.samples.append(_status_kb(self.pid, "VmRSS"))
            time.sleep(self.interval_s)

    def stop(self) -> list[int]:
        self._halt.set()
        self.join()
        return self.samples


def measure_rss(stack: Stack, client: httpx.Client, size: int) -> tuple[float, float, str]:
    pid = stack.gateway.pid  # type: ignore[union-attr]
    idle_sampler = RssSampler(pid)
    idle_sampler.start()
    time.sleep(1.0)
    idle_kb = statistics.median(idle_sampler.stop())
    hwm_reset = _reset_peak(pid)
    sampler = RssSampler(pid)
    sampler.start()
    body, content_type = streamed_body(size, f"rss-{uuid.uuid4()}")
    response = client.post("/v1/ingest", content=body, headers={"Content-Type": content_type})
    peak_kb = max(sampler.stop())
    if hwm_reset:
        peak_kb = max(peak_kb, _status_kb(pid, "VmHWM"))
    assert response.status_code == 202, response.text
    how = "VmRSS every 10 ms" + (" + VmHWM after reset" if hwm_reset else "")
    return (peak_kb - idle_kb) / 1024, idle_kb / 1024, how


# ── (b) throughput ──────────────────────────────────────────────────────────────────────────
def baseline_mb_s(folder: pathlib.Path, data: bytes) -> float:
    path = folder / "baseline.bin"
    start = time.perf_counter()
    sha = hashlib.sha256()
    view = memoryview(data)
    with open(path, "wb") as fh:
        for offset in range(0, len(data), MiB):
            piece = view[offset:offset + MiB]
            sha.update(piece)
            fh.write(piece)
    sha.hexdigest()
    elapsed = time.perf_counter() - start
    path.unlink()
    return len(data) / MiB / elapsed


def upload_mb_s(client: httpx.Client, data: bytes) -> float:
    opening, closing, content_type = multipart_parts("throughput.txt")
    length = len(opening) + len(data) + len(closing)

    def body() -> Iterator[bytes]:
        # Handed to httpx in 1 MiB pieces: given one 200 MB bytes object, httpx re-slices the
        # unsent remainder after every socket send and becomes the bottleneck (~50 MB/s here).
        yield opening
        view = memoryview(data)
        for offset in range(0, len(data), MiB):
            yield bytes(view[offset:offset + MiB])
        yield closing

    start = time.perf_counter()
    response = client.post("/v1/ingest", content=body(), headers={
        "Content-Type": content_type, "Content-Length": str(length)})
    elapsed = time.perf_counter() - start
    assert response.status_code == 202, response.text
    return len(data) / MiB / elapsed


# ── (c) latency ─────────────────────────────────────────────────────────────────────────────
def measure_latency(stack: Stack, token: str, uploads: int, clients: int) -> list[float]:
    files = [text_block(100 * 1024, f"lat-{uuid.uuid4()}") for _ in range(uploads)]
    local = threading.local()

    def one(data: bytes) -> float:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=stack.url, timeout=60,
                                        headers={"Authorization": f"Bearer {token}"})
        start = time.perf_counter()
        response = local.client.post("/v1/ingest", files={"file": ("doc.txt", data)})
        elapsed = time.perf_counter() - start
        assert response.status_code == 202, response.text
        return elapsed * 1000

    with ThreadPoolExecutor(max_workers=clients) as pool:
        # Warm every client's connection (and the gateway's pool) outside the measurement.
        list(pool.map(one, [text_block(1024, f"warm-{uuid.uuid4()}") for _ in range(clients)]))
        return list(pool.map(one, files))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--big-mb", type=int, default=200)
    parser.add_argument("--uploads", type=int, default=500)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--keep", action="store_true", help="keep the temp folder")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra gateway environment, e.g. --env DB_POOL_MAX=20")
    args = parser.parse_args()
    folder = pathlib.Path(tempfile.mkdtemp(prefix="bench-upload-"))
    stack = Stack(folder, dict(item.split("=", 1) for item in args.env))
    results: list[tuple[str, bool]] = []
    try:
        token = stack.start()
        print(f"machine cpus={os.cpu_count()} load1={os.getloadavg()[0]:.1f} "
              f"gateway_pid={stack.gateway.pid} folder={folder} env={args.env}")
        size = args.big_mb * MiB
        with httpx.Client(base_url=stack.url, timeout=600,
                          headers={"Authorization": f"Bearer {token}"}) as client:
            # Warm-up: lazy imports and first connections are not what we measure.
            assert client.post("/v1/ingest", files={"file": ("w.txt", b"warm up\n")}).status_code == 202
            growth, idle, how = measure_rss(stack, client, size)
            print(f"gateway_idle_rss_mb {idle:.1f}")
            print(f"upload_rss_growth_mb {growth:.1f} (target < 32; {args.big_mb} MB streamed, {how})")
            results.append(("upload_rss_growth_mb", growth < 32))

            data = text_block(size, f"tp-{uuid.uuid4()}")
            base = statistics.median(baseline_mb_s(folder, data) for _ in range(3))
            runs = []
            for i in range(3):
                runs.append(upload_mb_s(client, data[:-1] + str(i).encode()))
            ours = statistics.median(runs)
            share = ours / base * 100
            print(f"baseline_sha256_write_mb_s {base:.0f}")
            print(f"upload_throughput_mb_s {ours:.0f} (runs {', '.join(f'{r:.0f}' for r in runs)})")
            print(f"upload_throughput_share_pct {share:.0f} (target >= 25)")
            results.append(("upload_throughput_share_pct", share >= 25))
            del data

        latencies = measure_latency(stack, token, args.uploads, args.clients)
        p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
        print(f"upload_latency_p50_ms {p50:.0f} ({args.uploads} x 100 KB, {args.clients} clients)")
        print(f"upload_latency_p95_ms {p95:.0f} (target < 150)")
        print(f"upload_latency_max_ms {max(latencies):.0f}")
        results.append(("upload_latency_p95_ms", p95 < 150))
    finally:
        stack.stop()
        if not args.keep:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
    for name, ok in results:
        print(f"{'PASS' if ok else 'MISS'} {name}")
    return 0 if all(ok for _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
