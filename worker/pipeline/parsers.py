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
    A child about to OCR n pages says so first, and gets ``n * ocr_page_s`` more seconds:
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
    try:
        outcome = _wait(receiver, child, timeout_s, check, ocr_page_s)
    finally:
        receiver.close()
        if child.is_alive():
            child.kill()
        child.join(5)
    return _result(outcome, source_type, child.exitcode, timeout_s, memory_bytes)


def _wait(receiver: Connection, child: Any, timeout_s: float,
          check: Callable[[], None], ocr_page_s: float) -> tuple[str, Any] | None:
    """The child's answer; None if it died without one; "timeout" if it overran."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        check()
        if receiver.poll(_POLL_S):
            try:
                answer: tuple[str, Any] = receiver.recv()
            except (EOFError, OSError):
                return None  # died mid-answer or before one: a crash
            if answer[0] == "ocr":  # pages about to be OCR'd: their time on top
                deadline += int(answer[1]) * ocr_page_s
                continue
            return answer
    return ("timeout", None)


def _result(outcome: tuple[str, Any] | None, source_type: str, exitcode: int | None,
            timeout_s: float, memory_bytes: int) -> extract.Extracted:
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
        raise ParserTimedOut(
            f"extract: reading the {reader} took longer than {timeout_s:g} s; the file may be "
            "damaged or unusually complex. Re-save it or split it, and upload it again.")
    raise RuntimeError(f"the parser failed unexpectedly ({value})")


def _child(sender: Connection, path: str, source_type: str, limits: extract.Limits,
           memory_bytes: int, attachments_dir: str | None = None, depth: int = 0) -> None:
    """In the child: cap memory, extract, send one answer. Dies quietly on a signal."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker's Ctrl-C is for the worker
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    try:
        answer: tuple[str, Any] = (
            "ok", extract.extract(Path(path), source_type, limits=limits,
                                  on_ocr=lambda pages: sender.send(("ocr", pages)),
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
