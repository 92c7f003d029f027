"""Gateways, workers and `ingest` commands for tests, forked from one interpreter that has
already imported them, as `gunicorn --preload` forks its workers (docs/decisions/0260, 0330).

Starting `python -m cli.main gateway` costs ~2.5 s of CPU in imports alone (Litestar, boto3,
psycopg, pydantic, the bcrypt timing hash), and the suite starts ~600 gateways; a worker that
embeds pays ~3.5 s (worker.main, torch) and the suite starts ~60. Each process
forked here is still its own process: its own environment (exactly what the test gave,
`os.environ` replaced before anything reads it), working folder, log file, port, signals and
exit code, running the same `cli.main.main([...])` as the command. What it shares with its
siblings is only the imported code. `TEST_GATEWAY_FORK=0` starts every process as a new
interpreter instead, to rule this out of a failure.

The server is one thread (a fork of a threaded process can inherit a held lock): it accepts a
request on a Unix socket, forks, answers the child's pid, and reaps exited children, writing
each exit code to the file the request named (Popen's convention: -N for signal N).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import orjson

# What `cli.main gateway` imports, loaded once here instead of in every gateway.
PRELOAD = ("cli.main", "gateway.app", "gateway.edge.transport", "shared.settings", "uvicorn",
           "uvloop")
# What `cli.main worker` imports, and what it imports once it embeds (~3.5 s of CPU per
# process: worker.main ~1.5 s, torch ~1.8 s), paid once here. None of these starts a thread or
# reads a test's settings on import (the offline switches are set first, in serve). A name the
# product no longer uses is skipped.
PRELOAD_WORKER = ("worker.main", "torch", "safetensors.torch", "onnxruntime")


# ── the test side ─────────────────────────────────────────────────────────────────────────
class ForkedProcess:
    """The part of subprocess.Popen the tests use, for a gateway the zygote forked (not this
    process's child: its exit code comes from the zygote, through ``rc_path``)."""

    def __init__(self, pid: int, args: list[str], rc_path: Path) -> None:
        self.pid, self.args, self.rc_path = pid, args, rc_path
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self.rc_path.exists():
            self.returncode = int(self.rc_path.read_text())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.02)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """One per test process, started on first use and stopped at its exit."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="ingest-zygote-"))
        self.socket_path = self.folder / "zygote.sock"
        with open(self.folder / "zygote.log", "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.zygote", str(self.socket_path)],
                cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not self.socket_path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the test zygote did not start:\n"
                                   + (self.folder / "zygote.log").read_text(errors="replace"))
            time.sleep(0.02)
        self.count = 0

    def fork(self, args: list[str], env: dict[str, str], cwd: Path, log_path: Path, *,
             stderr_path: Path | None = None, stdin_path: Path | None = None) -> ForkedProcess:
        """``cli.main.main(args)`` in a new child: its output to ``log_path`` (its standard
        error to ``stderr_path`` where given), its input from ``stdin_path`` (or nothing)."""
        self.count += 1
        rc_path = self.folder / f"{self.count}.rc"
        request = {"args": args, "env": env, "cwd": str(cwd), "log": str(log_path),
                   "stderr": str(stderr_path or log_path),
                   "stdin": str(stdin_path) if stdin_path else os.devnull, "rc": str(rc_path)}
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.socket_path))
            s.sendall(orjson.dumps(request) + b"\n")
            answer = orjson.loads(_read_line(s))
        return ForkedProcess(answer["pid"], args, rc_path)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


_zygote: Zygote | None = None


def enabled() -> bool:
    return os.environ.get("TEST_GATEWAY_FORK", "1") != "0"


def get(env: dict[str, str], cwd: Path) -> Zygote:
    global _zygote
    if _zygote is None or _zygote.proc.poll() is not None:
        _zygote = Zygote(env, cwd)
        atexit.register(_zygote.stop)
    return _zygote


def _read_line(s: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("the test zygote closed the connection")
        data += chunk
    return data


# ── the zygote ────────────────────────────────────────────────────────────────────────────
def serve(socket_path: str) -> None:
    for module in PRELOAD:
        __import__(module)
    # The switches the product sets before it imports the embedding stack, which reads them
    # once, at import (no Hub, no progress bars in JSON logs): set here for the same reason.
    from shared.embedding import backends

    backends.offline()
    for module in PRELOAD_WORKER:
        with contextlib.suppress(ImportError):
            __import__(module)
    _warm()
    # Collect once, then freeze everything held here out of the collector (the prefork recipe
    # in the gc docs): each child's own start-up collection then walks only its own objects
    # (~0.25 s of CPU per fork before, over ~300k inherited objects) and never writes to the
    # inherited pages, which stay shared instead of being copied.
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(socket_path + ".tmp")
    os.rename(socket_path + ".tmp", socket_path)  # exists only once it listens
    listener.listen(16)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "request")
    selector.register(sys.stdin, selectors.EVENT_READ, "parent")  # EOF: the tests ended
    children: dict[int, str] = {}
    while True:
        for key, _ in selector.select(timeout=0.05):
            if key.data == "parent":
                return
            connection, _ = listener.accept()
            with connection:
                request = orjson.loads(_read_line(connection))
                pid = os.fork()
                if pid == 0:
                    _child(listener, connection, request)
                children[pid] = request["rc"]
                connection.sendall(orjson.dumps({"pid": pid}) + b"\n")
        _reap(children)


def _warm() -> None:
    """Build a gateway app and the two AWS clients once, so each fork starts with what the
    first build fills (Litestar's signature and schema work, lazy imports, botocore's service
    models): ~0.6 s of a first `create_app` against ~0.25 s later, ~0.13 s per pair of
    clients against ~0.01 s. Nothing here starts a thread or opens a connection; the warm
    settings name no real server, and the clients get explicit keys so that the default
    session never caches credentials a child's environment should decide."""
    from gateway.app import create_app
    from shared import aws
    from shared.settings import GatewaySettings

    nowhere = "http://127.0.0.1:9"
    create_app(GatewaySettings(database_url="postgresql://warm@127.0.0.1:9/warm",
                               sqs_queue_url=f"{nowhere}/q", jwt_secret="w" * 40,
                               metrics_token="w" * 40, search_model_at_start=False))
    for service in ("s3", "sqs"):
        aws.client(service, endpoint_url=nowhere, region="us-east-1", credentials=("w", "w"))


def _reap(children: dict[int, str]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rc_path = children.pop(pid, None)
        if rc_path is not None:
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            Path(rc_path + ".tmp").write_text(str(code))
            os.rename(rc_path + ".tmp", rc_path)


def _child(listener: socket.socket, connection: socket.socket, request: dict) -> None:
    """Become the gateway the request describes; never returns."""
    code = 1
    try:
        listener.close()
        connection.close()
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        for fd, path, flags in ((0, request["stdin"], os.O_RDONLY),
                                (1, request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND),
                                (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        if request["args"][:1] == ["worker"]:
            # A worker collects as one started from the command line does. Frozen, the
            # zygote's objects leave the collector's count of long-lived ones, so full
            # collections came several times as often over the worker's own model and queue:
            # the 1,000-document fleet bench ran at 57 % of embedding alone, 68 % unforked.
            # A gateway freezes its own start-up objects anyway (ADR 0163).
            gc.unfreeze()
        from cli import main
        sys.argv = ["cli.main", *request["args"]]
        code = main.main(request["args"])
    except SystemExit as exit_:
        # As the interpreter does: None is 0, a message goes to standard error and is 1.
        code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
        if not isinstance(exit_.code, int | None):
            print(exit_.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - reported in the gateway's own log, as Python would
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    serve(sys.argv[1])
