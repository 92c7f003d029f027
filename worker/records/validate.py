"""Validate a file's rows, in this process or in a pool of processes, in file order
(docs/decisions/0184).

``contracts.validate_row`` is most of a records import's CPU: pure Python, one row at a time,
about 15,000 rows/s on one core. For a large file the parse process only reads rows and
stages them, and VALIDATE_PROCESSES processes validate blocks of rows meanwhile, each row
exactly as ``stage.validate`` does in this process (the same contract code, the same header
match), so every row gets the same values and the same codes whichever path it took. Blocks
come back in file order, and at most two per process are in flight, so memory stays flat
whatever the file's size.

The pool is a ``forkserver`` pool, started on the first large file and kept for the worker's
life: forked from a server that has imported the contracts, never from the worker itself (whose
threads may hold locks a fork would copy held), and sharing those pages copy-on-write.
"""

from __future__ import annotations

import atexit
import functools
import multiprocessing
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from shared import contracts
from shared.contracts import ad_metrics
from worker.records.parse import BatchRejected
from worker.records.stage import Encoded, validate

# Rows per block sent to a process: large enough that pickling two lists is small beside
# validating them, small enough that the first chunk is not kept waiting.
BLOCK_ROWS = 1_000
# A file this large is validated in the pool (when there is one); a smaller file is done
# before the pool's processes would have started.
POOL_MIN_BYTES = 4 << 20

Row = tuple[int, Any, Mapping[str, Any]]


def contract_for(name: str, platform: str | None) -> contracts.Contract:
    """The batch's contract: an ad-metrics batch reads its platform's export headers."""
    if name == "ad_metrics":
        if platform is None:
            raise BatchRejected("The ad-metrics batch names no platform.", stage="parse",
                                code="batch_missing")
        return ad_metrics.for_platform(platform)
    return contracts.get(name)


@dataclass(frozen=True)
class Pool:
    executor: ProcessPoolExecutor
    processes: int


def encoded(rows: Iterable[Row], contract: contracts.Contract, ref: tuple[str, str | None],
            match: Callable[[], contracts.HeaderMatch | None],
            pool: Pool | None, header: Callable[[], Sequence[str] | None] = lambda: None,
            ) -> Iterator[Encoded]:
    """Each row validated and encoded for the stage, in order. ``ref`` names the contract for
    another process (contracts hold functions: they are rebuilt there, not pickled);
    ``match`` is the file's header match, known once the first row was read, and ``header``
    its header, by which a row's raw mapping that is just header → cell travels as nothing."""
    if pool is None:
        for number, cells, raw in rows:
            yield validate(contract, match(), number, cells, raw)
        return
    window: deque[Future[list[tuple[Any, ...]]]] = deque()
    for block in _blocks(rows, header):
        window.append(pool.executor.submit(_validate_block, ref, match(), header(), block))
        while len(window) >= 2 * pool.processes:
            yield from (Encoded(*row) for row in window.popleft().result())
    while window:
        yield from (Encoded(*row) for row in window.popleft().result())


def _blocks(rows: Iterable[Row], header: Callable[[], Sequence[str] | None],
            ) -> Iterator[list[Row]]:
    """Blocks of rows to send; a raw mapping the header and the cells give again is dropped
    (pickling it cost as much as validating a third of the row)."""
    block: list[Row] = []
    for number, cells, raw in rows:
        names = header()
        if names is not None and raw == dict(zip(names, cells, strict=False)):
            raw = None  # type: ignore[assignment]
        block.append((number, cells, raw))
        if len(block) >= BLOCK_ROWS:
            yield block
            block = []
    if block:
        yield block


@functools.lru_cache(maxsize=16)
def _contract(ref: tuple[str, str | None]) -> contracts.Contract:
    return contract_for(*ref)


def _validate_block(ref: tuple[str, str | None], match: contracts.HeaderMatch | None,
                    header: Sequence[str] | None, block: Sequence[Row]) -> list[tuple[Any, ...]]:
    """In a pool process: the block's rows, as ``stage.validate`` makes them (as plain
    tuples: a dataclass pickles several times slower)."""
    contract = _contract(ref)
    out = []
    for number, cells, raw in block:
        if raw is None and header is not None:
            raw = dict(zip(header, cells, strict=False))
        row = validate(contract, match, number, cells, raw)
        out.append((row.row, row.staged, row.issues))
    return out


# ── the worker's pool ───────────────────────────────────────────────────────────────────────
_lock = threading.Lock()
_pools: dict[int, Pool] = {}


def pool(processes: int, size: int) -> Pool | None:
    """The worker's validation pool of ``processes`` processes for a file of ``size`` bytes,
    or None (validate here): one process or fewer asked for, or a small file."""
    if processes < 2 or size < POOL_MIN_BYTES:
        return None
    with _lock:
        if processes not in _pools:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([__name__])
            _pools[processes] = Pool(ProcessPoolExecutor(processes, mp_context=context),
                                     processes)
        return _pools[processes]


@atexit.register
def shutdown() -> None:
    """Stop the pools' processes now. The worker leaves with os._exit (cli/main.py), which
    runs no atexit hook, and a pool process whose parent is gone waits on its queue forever:
    after `make run`'s Ctrl-C, a forkserver and two pool processes outlived the worker."""
    with _lock:
        for each in _pools.values():
            # Read before shutdown, which forgets them; terminated, as a block being validated
            # belongs to a job that was already abandoned or finished.
            processes = list((getattr(each.executor, "_processes", None) or {}).values())
            each.executor.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()
            for process in processes:
                process.join(5)
        _pools.clear()
