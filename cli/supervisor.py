"""Keep `ingest dev`'s children running: a child that exits is started again, with backoff.

A child is a name and a function that starts it and returns its process (the gateway, a
worker, moto, Postgres). When one exits the supervisor logs it, waits (1 s, 2 s, 4 s …
capped; the count resets once a child has stayed up for the cap), starts it again and runs its
``after_restart`` hook (moto's re-creates the queues and republishes lost jobs). While stopping,
nothing is restarted. See docs/decisions/0041-dev-stack-supervision.md.

With a ``state_path`` it keeps a JSON file of every child's pid, whether it is up and how often
it was restarted, rewritten at each change: what a person (or bench/soak.py) reads to find the
process to look at, or to kill, without scanning the process table (docs/decisions/0240).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger("cli.supervisor")


def backoff_s(failures: int, base_s: float, cap_s: float) -> float:
    """Delay before the ``failures``-th restart in a row: doubling from base, at most cap."""
    return min(cap_s, base_s * 2 ** max(0, failures - 1))


class Process(Protocol):
    """What the supervisor needs of a child: subprocess.Popen's calls (Postgres, which pg_ctl
    detaches, is watched through cli/embedded.Postmaster)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...
    def send_signal(self, sig: int) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...


@dataclass
class Child:
    name: str
    start: Callable[[], Process]
    after_restart: Callable[[], None] | None = None
    proc: Process | None = None
    started_at: float = 0.0
    failures: int = 0
    restart_at: float | None = None
    restarts: int = 0
    # Infrastructure (moto) stops after the others: a stopping worker still releases messages.
    stop_last: bool = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None


class Supervisor:
    def __init__(self, *, backoff_s: float, backoff_max_s: float,
                 state_path: Path | None = None) -> None:
        self.base_s = backoff_s
        self.cap_s = backoff_max_s
        self.children: list[Child] = []
        self.stopping = False
        self.state_path = state_path

    def add(self, name: str, start: Callable[[], Process],
            after_restart: Callable[[], None] | None = None, *, stop_last: bool = False,
            running: Process | None = None) -> Child:
        """Watch a child: ``running`` if already started, else started now (a failure here is
        the caller's: the stack cannot come up). ``start`` is called again for each restart."""
        child = Child(name, start, after_restart, running or start(), time.monotonic(),
                      stop_last=stop_last)
        self.children.append(child)
        self._write_state()
        return child

    def run(self, interval_s: float = 0.5) -> None:
        """Watch the children until ``stopping`` is set (by a signal handler)."""
        while not self.stopping:
            self.check()
            time.sleep(interval_s)

    def check(self) -> None:
        now = time.monotonic()
        for child in self.children:
            if self.stopping:
                return
            if child.restart_at is None and child.proc is not None \
                    and child.proc.poll() is not None:
                self._exited(child, now)
            if child.restart_at is not None and now >= child.restart_at:
                self._restart(child)

    def _exited(self, child: Child, now: float) -> None:
        # A child that stayed up a while is not crash-looping: start counting afresh.
        if now - child.started_at >= self.cap_s:
            child.failures = 0
        child.failures += 1
        delay = backoff_s(child.failures, self.base_s, self.cap_s)
        child.restart_at = now + delay
        assert child.proc is not None
        log.warning("child exited; restarting it", extra={
            "child": child.name, "pid": child.proc.pid, "returncode": child.proc.returncode,
            "restart_in_s": delay, "restarts_in_a_row": child.failures})
        self._write_state()

    def _restart(self, child: Child) -> None:
        child.restart_at = None
        child.started_at = time.monotonic()
        try:
            child.proc = child.start()
            if child.after_restart is not None:
                child.after_restart()
        except Exception as exc:  # noqa: BLE001 — any failure to start is retried the same way
            log.error("child could not be restarted; trying again",
                      extra={"child": child.name, "error": f"{type(exc).__name__}: {exc}"})
            child.failures += 1
            child.restart_at = time.monotonic() + backoff_s(child.failures, self.base_s,
                                                             self.cap_s)
            return
        child.restarts += 1
        log.warning("child restarted", extra={"child": child.name, "pid": child.proc.pid})
        self._write_state()

    def _write_state(self) -> None:
        """The children's pids (null while one waits for its restart), whole or not at all: a
        reader never sees half a file."""
        if self.state_path is None:
            return
        state = {c.name: {"pid": c.pid if c.restart_at is None else None,
                          "up": c.restart_at is None, "restarts": c.restarts}
                 for c in self.children}
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        try:
            tmp.write_text(json.dumps({"children": state}, indent=1))
            os.replace(tmp, self.state_path)
        except OSError as exc:  # a full disk must not stop the supervision itself
            log.warning("children state not written", extra={"error": str(exc)})
            with contextlib.suppress(OSError):
                tmp.unlink()

    def stop_all(self, grace_s: float = 30) -> None:
        """SIGTERM the children (``stop_last`` ones after the others), each tier waited for
        up to ``grace_s`` and then killed."""
        self.stopping = True
        for last in (False, True):
            _terminate([c.proc for c in self.children
                        if c.proc is not None and c.stop_last == last], grace_s)


def _terminate(procs: list[Process], grace_s: float) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
