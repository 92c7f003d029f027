"""The stack under soak: `ingest dev` in a folder of its own, started as `make run` starts it,
plus what the faults need around it and nothing inside it.

- The object store (`.ingest/uploads`, `.ingest/artifacts`) lives on two small tmpfs mounts
  where this machine lets us mount (root with CAP_SYS_ADMIN), so the disk-full fault can fill
  them; elsewhere the fault is left out and the report says why.
- The gateway and workers reach moto through a TCP proxy the soak owns (`DEV_AWS_ENDPOINT_URL`,
  ADR 0240): closing it is a queue outage, with moto and its messages intact.
- The customer's S3 bucket of the source is another moto, the soak's: a real bucket does not
  lose its objects when the platform's queue dies, so a moto kill must not empty it either.
- `.ingest/children.json` (written by cli/supervisor.py) names every child's pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from cli import embedded
from cli.embedded import MotoServer, free_port
from tests.support import devstack
from tests.support.tcpproxy import TcpProxy

ROOT = Path(__file__).resolve().parents[2]
STORE_DIRS = ("uploads", "artifacts")
STORE_MB = 512


@dataclass
class Stack:
    folder: Path
    out: Path
    workers: int
    gateways: int = 2  # processes on the one port, as `make run` (ADR 0324)
    overrides: dict[str, str] = field(default_factory=dict)  # product settings over the defaults
    port: int = 0
    proc: subprocess.Popen | None = None
    proxy: TcpProxy | None = None
    customer: MotoServer | None = None
    mounts: list[Path] = field(default_factory=list)
    no_disk_fault: str | None = None  # why the disk-full fault cannot run here
    log: Path = Path()
    console: Path = Path()

    # ── start and stop ──────────────────────────────────────────────────────────────────────
    def start(self, timeout_s: float = 300) -> None:
        state = self.folder / ".ingest"
        state.mkdir(parents=True, mode=0o700, exist_ok=True)
        (self.folder / "home").mkdir(exist_ok=True)
        self._mount_store(state)
        moto_port = free_port()
        (state / "moto-port").write_text(str(moto_port))  # `ingest dev` reuses a saved port
        self.proxy = TcpProxy(moto_port).start()
        self.customer = MotoServer(log_path=self.out / "customer-s3.log")
        self.customer.start()
        self.port = free_port()
        env = devstack.newcomer_env(
            self.folder / "home", PYTHONPATH=str(ROOT), DEV_AWS_ENDPOINT_URL=self.proxy.url,
            # The ONNX export is made once per machine, not once per soak (ADR 0111).
            EMBEDDING_CACHE_DIR=str(ROOT / ".ingest" / "models"),
            DEV_GATEWAY_PROCESSES=str(self.gateways), **self.overrides)
        self.out.mkdir(parents=True, exist_ok=True)
        self.console, self.log = self.out / "ingest-dev.console.txt", self.out / "ingest-dev.log"
        with open(self.console, "wb") as out, open(self.log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "dev", "--port", str(self.port),
                 "--workers", str(self.workers)],
                cwd=self.folder, env=env, stdout=out, stderr=err, start_new_session=True)
        self.wait_ready(timeout_s)

    def _mount_store(self, state: Path) -> None:
        if os.geteuid() != 0:
            self.no_disk_fault = "not root: no tmpfs can be mounted for the object store"
            return
        for name in STORE_DIRS:
            target = state / name
            target.mkdir(exist_ok=True)
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={STORE_MB}m,mode=0755",
                                   "tmpfs", str(target)], capture_output=True, text=True)
            if done.returncode != 0:
                self.no_disk_fault = f"mount of a tmpfs refused: {done.stderr.strip()}"
                self._unmount()
                return
            self.mounts.append(target)

    def _unmount(self) -> None:
        for target in self.mounts:
            subprocess.run(["umount", "-l", str(target)], capture_output=True)
        self.mounts = []

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.alive_or_raise()
            with contextlib.suppress(httpx.HTTPError, OSError):
                if httpx.get(f"{self.url}/health/ready", timeout=3).status_code == 200 \
                        and (self.state / "dev-token").exists():
                    return
            time.sleep(1)
        raise TimeoutError(f"ingest dev not ready after {timeout_s}s; see {self.log}")

    def alive_or_raise(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"ingest dev exited with {self.proc.returncode}:\n"
                               f"{self.log.read_text(errors='replace')[-3000:]}")

    def stop(self) -> int | None:
        """Ctrl-C as a terminal sends it, then whatever is left is killed; mounts go last."""
        code = None
        try:
            if self.proc is not None and self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGINT)
                try:
                    code = self.proc.wait(150)
                except subprocess.TimeoutExpired:
                    self._kill_everything()
            elif self.proc is not None:
                code = self.proc.returncode
        finally:
            if self.proxy is not None:
                self.proxy.stop()
            if self.customer is not None:
                self.customer.stop()
            self._unmount()
        return code

    def _kill_everything(self) -> None:
        import psutil

        assert self.proc is not None
        procs = psutil.Process(self.proc.pid).children(recursive=True)
        pid = self.children().get("postgres")
        if pid:
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(pid))
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
        self.proc.kill()
        self.proc.wait(10)

    # ── what the soak reads ─────────────────────────────────────────────────────────────────
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def state(self) -> Path:
        return self.folder / ".ingest"

    def token(self) -> str:
        return (self.state / "dev-token").read_text().strip()

    def settings(self) -> dict[str, str]:
        lines = (self.state / "dev.env").read_text().splitlines()
        return dict(line.split("=", 1) for line in lines if "=" in line)

    @property
    def database_url(self) -> str:
        return self.settings()["DATABASE_URL"]

    def children(self) -> dict[str, int | None]:
        """Each supervised child's pid, None while it waits to be restarted."""
        return {name: c["pid"] for name, c in self._supervised().items()}

    def restarts(self) -> dict[str, int]:
        return {name: c["restarts"] for name, c in self._supervised().items()}

    def _supervised(self) -> dict[str, dict]:
        """The supervisor's .ingest/children.json (empty while it is being written)."""
        try:
            return dict(json.loads((self.state / "children.json").read_text())["children"])
        except (OSError, ValueError, KeyError):
            return {}

    def wait_child(self, name: str, timeout_s: float = 60) -> int | None:
        """The child's pid once it is up (it may be restarting after an earlier fault)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pid = self.children().get(name)
            if pid and embedded.alive(pid):
                return pid
            time.sleep(0.5)
        return None

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health/ready", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def server_logs(self) -> list[Path]:
        """Every log the stack's processes wrote: ours (stderr of `ingest dev` and its
        children), Postgres's own, moto's."""
        return [p for p in (self.log, self.state / "pgdata" / "server.log",
                            self.state / "moto.log") if p.exists()]


def alive(pid: int | None) -> bool:
    return bool(pid) and embedded.alive(pid)  # type: ignore[arg-type]
