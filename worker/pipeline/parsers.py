"""Run the extract stage in a child process, so no document can take the worker down.

PDFium is not thread-safe (three PDFs in three threads crash a process) and any parser can be
made to crash, hang or swallow memory by a crafted file. Each extraction therefore runs in a
child process of its own, under an address-space limit (RLIMIT_AS) and a time limit; a child
that dies, overruns or runs out of memory fails that document's run with a reason and an error
code, and the worker carries on. One child per document is the pool recycled after every
document: forked from a forkserver that has the parsers imported and nothing else (never the
embedding model), a child costs a few milliseconds (docs/decisions/0077-parser-isolation.md).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import resource
import signal
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from shared import errors
from worker.pipeline import extract

# forkserver: children fork from a small server process that imported only the parsers, so the
# worker's model and threads are never copied into them (fork from the worker would copy both).
_CONTEXT = multiprocessing.get_context("forkserver")


def _preload() -> list[str]:
    """What the forkserver imports once: the parsers, and what the parent's main module imports.

    Each child runs the parent's main module again before its target (multiprocessing's set-up
    for `spawn`-like starts): the `ingest` script, or `cli.main` under `python -m`. Its imports
    already done in the server, that costs a millisecond instead of re-importing the CLI in
    every child (~90 ms of a small document's extraction, issue 27). Taken at the first
    extraction, when the main module has done its imports. A `package.__main__` is never
    preloaded itself: importing it would run it."""
    main = sys.modules.get("__main__")
    names = set()
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    if spec_name:
        names.add(spec_name)
    for value in vars(main).values() if main is not None else ():
        if isinstance(value, types.ModuleType):
            names.add(value.__name__)
        elif callable(value) and isinstance(getattr(value, "__module__", None), str):
            names.add(value.__module__)
    keep = sorted(n for n in names if not n.startswith("_") and not n.endswith("__main__"))
    return [*keep, "worker.pipeline.parsers", "worker.pipeline.extract"]


def _ensure_preload() -> None:
    with _PRELOAD_LOCK:
        if not _PRELOADED:
            _CONTEXT.set_forkserver_preload(_preload())  # no effect once the server runs
            _PRELOADED.append(True)


# Imported in the forkserver too (preloaded), so its children inherit this: under `python -m`,
# their set-up re-runs the main module the server already imported, which runpy would report
# once per document on stderr. Harmless by construction; silenced by its exact message.
warnings.filterwarnings("ignore", category=RuntimeWarning,
                        message=r"'[\w.]+' found in sys\.modules after import of package")
_PRELOAD_LOCK = threading.Lock()
_PRELOADED: list[bool] = []
_POLL_S = 0.2
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# A child whose processor time does not move for this long is stuck, not slow: even at load
# 25 on two cores a running child gets a tick every second.
_STALL_S = 60.0
# Nothing runs longer than this many times its processor budget in wall time.
_WALL_FACTOR = 20
_READERS = {"pdf": "PDF", "docx": "DOCX", "html": "HTML", "txt": "text", "md": "Markdown",
            "pptx": "PPTX", "xlsx": "XLSX", "xls": "XLS", "csv": "CSV", "eml": "e-mail",
            "msg": "Outlook message", "epub": "EPUB", "odt": "ODT", "rtf": "RTF",
            "json": "JSON", "png": "PNG", "jpeg": "JPEG", "tiff": "TIFF", "webp": "WebP"}


class ParserCrashed(errors.ExtractionError):
    """The file crashed its parser; the file may be damaged."""

    code = "parser_crashed"


class ParserTimedOut(errors.ExtractionError):
    """Reading the file took too long; the file may be damaged or unusually complex."""

    code = "parser_timeout"


class ParserOutOfMemory(errors.ExtractionError):
    """Reading the file needed more memory than a document may use."""

    code = "parser_out_of_memory"


def extract_isolated(path: Path, source_type: str, *, max_uncompressed_bytes: int,
                     timeout_s: float, memory_bytes: int,
                     check: Callable[[], None] = lambda: None,
                     limits: extract.Limits | None = None,
                     ocr_page_s: float = 20.0, attachments_dir: Path | None = None,
                     depth: int = 0) -> extract.Extracted:
    """extract.extract(path, source_type) in a child process; raises its BadDocument as is.

    ``check`` is called while waiting (lease lost, shutdown): whatever it raises ends the child.
    ``timeout_s`` is processor time (see _Budget), so a busy machine slows a child without
    killing it. A child about to OCR n pages says so first, and gets ``n * ocr_page_s`` more:
    a scanned book needs minutes where a born-digital file that takes that long is stuck.
    ``attachments_dir`` and ``depth``: as extract.extract (an e-mail's attachments are written
    there by the child, so their bytes never travel through the pipe).
    """
    if limits is None:
        limits = extract.Limits(max_uncompressed_bytes=max_uncompressed_bytes)
    _ensure_preload()
    receiver, sender = _CONTEXT.Pipe(duplex=False)
    child = _CONTEXT.Process(
        target=_child, args=(sender, str(path), source_type, limits, memory_bytes,
                             str(attachments_dir) if attachments_dir else None, depth),
        name="extract", daemon=True)
    child.start()
    sender.close()  # ours; the child holds its own end, so EOF means the child is gone
    budget = _Budget(child.pid, timeout_s, ocr_page_s)
    try:
        outcome = _wait(receiver, child, budget, check)
    finally:
        receiver.close()
        if child.is_alive():
            child.kill()
        child.join(5)
    return _result(outcome, source_type, child.exitcode, budget, memory_bytes)


class _Budget:
    """How much longer the child may run, in its own processor time.

    Wall time is the wrong clock on a shared machine: at load 25 on two cores a child gets a
    tenth of a core, and a 4-page scan that needs 35 s of processor time took over 200 s of
    wall time and was killed as "damaged" (issue 33). So the budget is the child's CPU seconds
    (Linux /proc; wall seconds where the OS does not say): ``timeout_s`` for reading, plus
    ``ocr_page_s`` per page it announces it will OCR. A child that is stuck without burning
    processor time (a deadlock) is caught by the stall limit, and nothing runs past a wall
    ceiling of _WALL_FACTOR times its budget.
    """

    def __init__(self, pid: int | None, timeout_s: float, ocr_page_s: float) -> None:
        self.pid = pid
        self.seconds = timeout_s
        self.ocr_page_s = ocr_page_s
        self.ocr_pages = 0  # announced
        self.ocr_done = 0  # finished
        self.started = time.monotonic()
        self.last_cpu = -1.0
        self.last_change = self.started

    def hear(self, message: tuple[str, Any]) -> None:
        if message[0] == "ocr":  # pages about to be OCR'd: their time on top
            self.ocr_pages += int(message[1])
            self.seconds += int(message[1]) * self.ocr_page_s
        elif message[0] == "ocr_page":
            self.ocr_done += 1

    def spent(self) -> str | None:
        """None while the child may go on; else how it overran ("cpu", "stalled", "wall")."""
        now = time.monotonic()
        cpu = _cpu_seconds(self.pid)
        if cpu is None:  # no /proc: the wall clock is all there is
            return "cpu" if now - self.started > self.seconds else None
        if cpu > self.seconds:
            return "cpu"
        if cpu != self.last_cpu:
            self.last_cpu, self.last_change = cpu, now
        elif now - self.last_change > _STALL_S:
            return "stalled"
        return "wall" if now - self.started > self.seconds * _WALL_FACTOR else None


def _cpu_seconds(pid: int | None) -> float | None:
    """The processor time (user + system) process ``pid`` has used, or None if unknown."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    fields = stat[stat.rindex(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _wait(receiver: Connection, child: Any, budget: _Budget,
          check: Callable[[], None]) -> tuple[str, Any] | None:
    """The child's answer; None if it died without one; ("timeout", how) if it overran."""
    while (overrun := budget.spent()) is None:
        check()
        if receiver.poll(_POLL_S):
            try:
                answer: tuple[str, Any] = receiver.recv()
            except (EOFError, OSError):
                return None  # died mid-answer or before one: a crash
            if answer[0] in ("ocr", "ocr_page"):
                budget.hear(answer)
                continue
            return answer
    return ("timeout", overrun)


def _result(outcome: tuple[str, Any] | None, source_type: str, exitcode: int | None,
            budget: _Budget, memory_bytes: int) -> extract.Extracted:
    reader = _READERS.get(source_type, "file")
    if outcome is None:
        how = f"signal {-exitcode}" if exitcode and exitcode < 0 else f"exit code {exitcode}"
        raise ParserCrashed(
            f"extract: the {reader} crashed the {reader} reader ({how}); the file may be "
            "damaged. Re-save it (for example with Print to PDF) and upload it again.")
    kind, value = outcome
    if kind == "ok":
        result: extract.Extracted = value
        return result
    if kind == "bad":
        cls, detail, stage = value
        raise cls(detail, stage=stage)
    if kind == "memory":
        raise ParserOutOfMemory(
            f"extract: reading the {reader} needed more than {memory_bytes >> 20} MB of memory; "
            "the file may be damaged or a decompression bomb. Re-save it and upload it again.")
    if kind == "timeout":
        raise ParserTimedOut(_overran(reader, budget, value))
    raise RuntimeError(f"the parser failed unexpectedly ({value})")


def _overran(reader: str, budget: _Budget, how: str) -> str:
    """One sentence on what ran out of time, and what the user can do."""
    clock = "processor time" if how == "cpu" else "time"
    if how == "stalled":
        return (f"extract: reading the {reader} stopped making progress for {_STALL_S:g} s; "
                "retry the run, and if it stalls again re-save the file and upload it again.")
    if budget.ocr_pages:
        return (f"extract: OCR of the {reader}'s {budget.ocr_pages} scanned page(s) did not "
                f"finish within its {budget.seconds:g} s of {clock} (it had read "
                f"{budget.ocr_done}); split the scan into smaller files, or raise "
                "EXTRACT_OCR_PAGE_S, and upload them again.")
    return (f"extract: reading the {reader} did not finish within {budget.seconds:g} s of "
            f"{clock}; the file is unusually complex or malformed. Re-save it or split it, "
            "and upload it again.")


def _child(sender: Connection, path: str, source_type: str, limits: extract.Limits,
           memory_bytes: int, attachments_dir: str | None = None, depth: int = 0) -> None:
    """In the child: cap memory, extract, send one answer. Dies quietly on a signal."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker's Ctrl-C is for the worker
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    try:
        answer: tuple[str, Any] = (
            "ok", extract.extract(Path(path), source_type, limits=limits,
                                  on_ocr=lambda pages: sender.send(("ocr", pages)),
                                  on_ocr_page=lambda: sender.send(("ocr_page", None)),
                                  attachments_dir=Path(attachments_dir) if attachments_dir
                                  else None, depth=depth))
    except errors.BadDocument as exc:
        answer = ("bad", (type(exc), exc.detail, exc.stage))
    except MemoryError:
        answer = ("memory", None)
    except Exception as exc:  # noqa: BLE001 - reported to the worker by type, never by text
        answer = ("error", type(exc).__name__)
    # OSError: the worker is gone (SIGTERM, kill -9) and closed its end; nobody to answer, and a
    # traceback here would reach the stack's stderr raw, past the JSON logs (chaos soak, issue 24).
    with contextlib.suppress(MemoryError, OSError):
        sender.send(answer)
    with contextlib.suppress(OSError):
        sender.close()
