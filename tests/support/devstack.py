"""`ingest dev` / `make run` started the way a newcomer starts them: in a folder of their own,
with the machine's environment minus every variable the project or its tests read or set."""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
from pydantic_settings import BaseSettings

from shared import settings as settings_module
from tests.support.stack import wait_until

# Families the project, boto3, huggingface and pytest read besides the settings' own fields;
# MAKE* because `make test` would hand its flags down to a `make run` under test.
PREFIXES = ("AWS_", "SQS_", "HF_", "TRANSFORMERS_", "SENTENCE_TRANSFORMERS_", "PYTEST",
            "INGEST_", "MAKE", "MFLAGS")
# Read by the CLI or the tests themselves, not by a settings class.
OTHERS = {"CHROMIUM_PATH", "PYTHONPATH", "VIRTUAL_ENV", "BOTO_CONFIG", "CI"}


def project_variables() -> set[str]:
    """Every environment variable a pydantic settings class of shared/settings.py reads."""
    names: set[str] = set()
    for cls in vars(settings_module).values():
        if inspect.isclass(cls) and issubclass(cls, BaseSettings) and cls is not BaseSettings:
            names |= {name.upper() for name in cls.model_fields}
    return names


def newcomer_env(home: Path, **settings: str) -> dict[str, str]:
    """The machine's environment minus what the project or its tests read, plus ``settings``.

    HOME is an empty folder (a newcomer has no ~/.aws), and instance metadata is off, so a cloud
    machine's role cannot stand in for the keys the stack must bring itself."""
    banned = project_variables() | OTHERS
    env = {k: v for k, v in os.environ.items()
           if k.upper() not in banned and not k.upper().startswith(PREFIXES)}
    return {**env, "HOME": str(home), "AWS_EC2_METADATA_DISABLED": "true", **settings}


@dataclass
class DevStack:
    folder: Path
    proc: subprocess.Popen
    console: Path   # stdout: the banner for the person at the terminal, token included
    log: Path       # stderr: the stack's JSON logs
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def state(self) -> Path:
        return self.folder / ".ingest"

    def token(self) -> str:
        found = wait_until(lambda: self._alive() and re.search(
            r"Token:\s+(\S+)", self.console.read_text(errors="replace")),
            timeout=240, interval=0.5, message="ingest dev printed its token")
        return found.group(1)

    def wait_ready(self, timeout: float = 240) -> None:
        def ready() -> bool:
            self._alive()
            try:
                return httpx.get(f"{self.url}/health/ready", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout=timeout, interval=0.5, message="dev stack ready")

    def _alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"ingest dev exited with {self.proc.returncode}:\n"
                                 f"{self.log.read_text(errors='replace')[-4000:]}")
        return True

    def settings(self) -> dict[str, str]:
        """What `ingest dev` handed its children (.ingest/dev.env)."""
        lines = (self.state / "dev.env").read_text().splitlines()
        return dict(line.split("=", 1) for line in lines if "=" in line)

    def children(self) -> list[psutil.Process]:
        """Every process of the stack: descendants, and Postgres (pg_ctl detaches it)."""
        procs = psutil.Process(self.proc.pid).children(recursive=True)
        pidfile = self.state / "pgdata" / "postmaster.pid"
        with contextlib.suppress(OSError, psutil.Error, ValueError, IndexError):
            postmaster = psutil.Process(int(pidfile.read_text().splitlines()[0]))
            procs += [postmaster, *postmaster.children(recursive=True)]
        return procs

    def child(self, marker: str) -> psutil.Process:
        """The one live descendant whose command line contains ``marker``."""
        def find() -> psutil.Process | None:
            for p in psutil.Process(self.proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if marker in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                        return p
            return None

        return wait_until(find, timeout=60, interval=0.2, message=f"a child running {marker!r}")

    def interrupt(self) -> int:
        """Ctrl-C as a terminal sends it: SIGINT to the whole foreground process group."""
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(120)

    def kill(self) -> None:
        """Last resort after a failed test: nothing of the stack may outlive it."""
        procs = self.children() if self.proc.poll() is None else []
        for p in [*procs, psutil.Process(self.proc.pid)] if self.proc.poll() is None else procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


def start(argv: list[str], folder: Path, env: dict[str, str], log_dir: Path, port: int,
          name: str = "ingest-dev") -> DevStack:
    """Start ``argv`` in ``folder`` as the leader of a new process group (like a shell job)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    console, log = log_dir / f"{name}.console.txt", log_dir / f"{name}.log"
    n = 1
    while log.exists():
        n += 1
        console, log = log_dir / f"{name}-{n}.console.txt", log_dir / f"{name}-{n}.log"
    with open(console, "xb") as out, open(log, "xb") as err:
        proc = subprocess.Popen(argv, cwd=folder, env=env, stdout=out, stderr=err,
                                start_new_session=True)
    return DevStack(folder, proc, console, log, port)


def assert_all_gone(procs: list[psutil.Process]) -> None:
    def gone() -> bool:
        return not [p for p in procs if _running(p)]

    wait_until(gone, timeout=60, interval=0.5,
               message=f"processes left behind: {[_describe(p) for p in procs if _running(p)]}")


def _running(p: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    return False


def _describe(p: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return f"{p.pid} {' '.join(p.cmdline())[:120]}"
    return str(p.pid)
