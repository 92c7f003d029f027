"""The embedded infrastructure of `ingest dev` and of the tests: Postgres 16 + pgvector from the
pgserver wheel's binaries, and an SQS/S3 endpoint from moto in server mode.

We drive pgserver's binaries ourselves rather than through ``pgserver.get_server``: that one
listens on a Unix socket only and stops with the last Python handle, while we want a TCP port
(the same DATABASE_URL shape as real infrastructure) and a server that tests can stop and start
to simulate an outage. See docs/decisions/0002-embedded-stack.md.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psycopg


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


class EmbeddedPostgres:
    """A Postgres cluster in ``data_dir`` listening on 127.0.0.1:port."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        from pgserver import _commands

        self.data_dir = data_dir.resolve()
        self.port = port or free_port()
        self.bin = Path(_commands.POSTGRES_BIN_PATH)
        # Postgres refuses to run as root; pgserver's own helper creates an unprivileged user.
        self.run_as = "pgserver" if os.geteuid() == 0 else None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 60) -> None:
        subprocess.run([str(self.bin / args[0]), *args[1:]], check=True, timeout=timeout,
                       user=self.run_as, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def _prepare_dirs(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.run_as is None:
            return
        from pgserver import utils

        utils.ensure_user_exists(self.run_as)
        utils.ensure_prefix_permissions(self.data_dir)
        utils.ensure_prefix_permissions(self.bin)
        user = pwd.getpwnam(self.run_as)
        os.chown(self.data_dir, user.pw_uid, user.pw_gid)

    def start(self) -> str:
        self._prepare_dirs()
        if not (self.data_dir / "PG_VERSION").exists():
            self._run("initdb", "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
                      "--encoding=utf8", "--locale=C")
        self._run("pg_ctl", "-D", str(self.data_dir), "-w", "-t", "60",
                  "-l", str(self.data_dir / "server.log"),
                  # TCP only: a Unix socket path under a deep folder can exceed 107 bytes.
                  "-o", f"-h 127.0.0.1 -p {self.port} -k '' -c max_connections=300 "
                        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off",
                  "start")
        return self.url()

    def stop(self, mode: str = "fast") -> None:
        if (self.data_dir / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                self._run("pg_ctl", "-D", str(self.data_dir), "-w", "-m", mode, "stop", timeout=60)

    def ensure_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


class MotoServer:
    """moto in server mode: SQS and S3 over real HTTP on a loopback port."""

    def __init__(self, port: int | None = None, log_path: Path | None = None) -> None:
        self.port = port or free_port()
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log, stderr=log, start_new_session=True)
        wait_for_port(self.port, timeout=60, proc=self.proc)
        # The port opens before the app is importable; wait for a real answer.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{self.url}/moto-api/", timeout=2).read()
                return self.url
            time.sleep(0.1)
        raise TimeoutError("moto server did not answer")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
