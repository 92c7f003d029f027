"""The forward pass in a child process (docs/decisions/0303): the same vectors as in this
process, a failed pass fails alone, and a child that dies is replaced.

One spawned child serves the module (each costs a second of imports); the backend is a plain
numpy stand-in whose vector for a row depends on that row's ids only.
"""

from __future__ import annotations

import functools
import os
import signal

import numpy as np
import pytest

from shared.embedding import remote
from worker.pipeline import embed

POISON = 666
DIM = 3


class RowBackend:
    """A row's vector from its own ids (unnormalised, as a backend's); POISON fails the pass;
    ``pid`` in the first column tells which process ran it."""

    def __init__(self, fail_to_start: bool = False) -> None:
        if fail_to_start:
            raise RuntimeError("no such device")

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if (ids == POISON).any():
            raise ValueError("kernel failed")
        out = np.empty((len(ids), DIM), dtype=np.float32)
        out[:, 0] = os.getpid()
        out[:, 1] = (ids * mask).sum(axis=1)
        out[:, 2] = mask.sum(axis=1)
        return out


@pytest.fixture(scope="module")
def child():
    forward = remote.ForwardProcess(RowBackend, DIM)
    yield forward
    forward.close()


def _batch(rows: int, width: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, width + 1, size=rows)
    mask = (np.arange(width) < lengths[:, None]).astype(np.int64)
    return rng.integers(1000, 30000, size=(rows, width)) * mask, mask


def test_passes_of_any_shape_come_back_as_this_process_computes_them(child):
    # Shapes that grow the shared blocks, shrink, and grow again
    for k, (rows, width) in enumerate([(3, 8), (700, 256), (1, 1), (2000, 200)]):
        ids, mask = _batch(rows, width, seed=k)
        got = child.forward(ids, mask)
        want = RowBackend().forward(ids, mask)
        np.testing.assert_array_equal(got[:, 1:], want[:, 1:])
        assert (got[:, 0] != os.getpid()).all(), "ran in this process"


def test_a_failed_pass_fails_alone_and_the_child_carries_on(child):
    ids, mask = _batch(4, 6, seed=9)
    pid = int(child.forward(ids, mask)[0, 0])

    ids[2, 0] = POISON
    with pytest.raises(remote.RemoteError, match="ValueError: kernel failed"):
        child.forward(ids, mask)

    ids[2, 0] = 5
    assert int(child.forward(ids, mask)[0, 0]) == pid


def test_a_child_that_died_is_replaced_on_the_next_pass(child):
    ids, mask = _batch(5, 7, seed=3)
    pid = int(child.forward(ids, mask)[0, 0])

    os.kill(pid, signal.SIGKILL)
    child._child.join(10)  # noqa: SLF001 - the test waits for the death it caused

    again = child.forward(ids, mask)
    assert int(again[0, 0]) != pid
    np.testing.assert_array_equal(again[:, 1:], RowBackend().forward(ids, mask)[:, 1:])


def test_a_backend_that_cannot_start_says_why():
    forward = remote.ForwardProcess(functools.partial(RowBackend, fail_to_start=True), DIM)
    try:
        with pytest.raises(remote.RemoteError, match="could not start: RuntimeError: no such"):
            forward.forward(*_batch(2, 3, seed=1))
    finally:
        forward.close()


class _Embedder:
    """The parts of an Embedder the queue uses, its forward pass in the child."""

    dim, max_seq_length, batch_tokens, device = DIM, 32, 256, "cpu"

    def __init__(self, forward: remote.ForwardProcess) -> None:
        self._forward = forward

    def check_ids(self, sequences) -> None:
        assert all(0 < len(s) <= self.max_seq_length for s in sequences)

    def run(self, ids: np.ndarray, mask: np.ndarray, *, launched=None) -> np.ndarray:
        return self._forward.forward(ids, mask, launched=launched)


def test_documents_through_the_queue_get_their_own_rows_from_the_child(child):
    queue = embed.EmbedQueue(_Embedder(child))  # type: ignore[arg-type]
    rng = np.random.default_rng(4)
    docs = [[rng.integers(1000, 2000, size=int(rng.integers(1, 30))).tolist()
             for _ in range(int(rng.integers(1, 12)))] for _ in range(40)]
    docs[7][0] = [101, POISON, 102]

    requests = [queue.submit(doc) for doc in docs]

    for k, (doc, request) in enumerate(zip(docs, requests, strict=True)):
        if k == 7:
            assert isinstance(request.exception(30), remote.RemoteError)
            continue
        got = request.result(30)  # unit vectors: each row's sum over its length survives
        np.testing.assert_allclose(got[:, 1] / got[:, 2], [sum(s) / len(s) for s in doc],
                                   rtol=1e-5)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
    assert queue.stats.documents > queue.stats.passes
    queue.close()
