"""The worker's embed queue (docs/decisions/0230): the chunks of every document in flight share
forward passes, each document gets exactly its own vectors back, and one document's failure or
departure touches no other.

Most tests run a stand-in model whose vector for a sequence depends on that sequence's ids only,
so "its own vectors" is checkable exactly and a pass is instant; the last ones run the real model.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.embedding import batches
from shared.embedding import model as embedding
from worker.pipeline import embed

ROOT = Path(__file__).resolve().parents[2]
DIM = 4
POISON = 666


class StandInModel:
    """The parts of an Embedder the queue uses. A sequence's vector is a function of its ids;
    a pass holding the POISON id fails, as a real pass can (a CUDA OOM, a kernel error)."""

    def __init__(self, batch_tokens: int = 64, delay_s: float = 0.0) -> None:
        self.dim, self.max_seq_length, self.batch_tokens = DIM, 32, batch_tokens
        self.delay_s = delay_s
        self.passes: list[tuple[int, int]] = []  # (rows, padded width) of each pass that ran

    def check_ids(self, sequences):
        embedding.Embedder.check_ids(self, sequences)  # type: ignore[arg-type]

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        time.sleep(self.delay_s)
        if (ids == POISON).any():
            raise RuntimeError("kernel failed")
        self.passes.append(ids.shape)
        return np.stack([vector_of(row[m.astype(bool)]) for row, m in zip(ids, mask, strict=True)])

    def run(self, ids: np.ndarray, mask: np.ndarray, *, launched=None) -> np.ndarray:
        if launched is not None:
            launched()  # as a CPU backend: no wait without the GIL to keep free
        return self.forward(ids, mask)


def vector_of(ids) -> np.ndarray:
    ids = np.asarray(ids, dtype=np.float64)
    v = np.array([len(ids), ids.sum(), (ids ** 2).sum() % 97, ids[0]], dtype=np.float32) + 1
    return v / np.linalg.norm(v)


def document(seed: int, chunks: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[101, *rng.integers(1000, 2000, size=int(rng.integers(1, 30))).tolist(), 102]
            for _ in range(chunks)]


def expected(doc: list[list[int]]) -> np.ndarray:
    return np.stack([vector_of(ids) for ids in doc])


def embed_all(queue: embed.EmbedQueue, docs: list[list[list[int]]]) -> list:
    results: list = [None] * len(docs)

    def run(k: int) -> None:
        try:
            results[k] = queue.embed(docs[k])
        except Exception as exc:  # noqa: BLE001 - the test reads it
            results[k] = exc

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(docs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_documents_in_flight_share_passes_and_each_gets_its_own_vectors():
    # Given 8 small documents in flight at once
    model = StandInModel(batch_tokens=512, delay_s=0.02)
    queue = embed.EmbedQueue(model)  # type: ignore[arg-type]
    docs = [document(seed, chunks=2 + seed % 3) for seed in range(8)]

    # When each embeds its chunks through the one queue
    results = embed_all(queue, docs)

    # Then each got exactly its own vectors, in its own order, and passes held several documents
    for doc, got in zip(docs, results, strict=True):
        np.testing.assert_allclose(got, expected(doc), atol=1e-6)
    assert queue.stats.sequences == sum(len(d) for d in docs)
    assert queue.stats.documents > queue.stats.passes, "no pass held more than one document"
    queue.close()


def test_no_pass_exceeds_the_token_budget_and_passes_are_sorted_by_length():
    model = StandInModel(batch_tokens=64)
    queue = embed.EmbedQueue(model)  # type: ignore[arg-type]
    doc = document(1, chunks=60)

    np.testing.assert_allclose(queue.embed(doc), expected(doc), atol=1e-6)

    assert all(rows * width <= 64 for rows, width in model.passes), model.passes
    # Sorted: a window's passes pad to increasing widths, so padding stays short
    assert queue.stats.tokens / queue.stats.padded_tokens > 0.8
    queue.close()


def test_one_documents_failing_member_fails_that_document_only():
    # Given a document whose chunk breaks any pass it is in, among healthy ones in flight
    model = StandInModel(batch_tokens=512, delay_s=0.01)
    queue = embed.EmbedQueue(model)  # type: ignore[arg-type]
    docs = [document(seed, chunks=3) for seed in range(5)]
    docs[2][1] = [101, POISON, 102]

    # When all embed at once
    results = embed_all(queue, docs)

    # Then only that document failed, with the pass's error; the others got their vectors
    assert isinstance(results[2], RuntimeError)
    for k in (0, 1, 3, 4):
        np.testing.assert_allclose(results[k], expected(docs[k]), atol=1e-6)
    assert queue.stats.isolated_passes >= 1
    queue.close()


def test_a_document_that_stops_waiting_takes_its_ids_out():
    # Given a slow model and a big document in the queue
    model = StandInModel(batch_tokens=64, delay_s=0.05)
    queue = embed.EmbedQueue(model)  # type: ignore[arg-type]
    big = document(3, chunks=200)
    stop = threading.Event()

    def check() -> None:
        if stop.is_set():
            raise TimeoutError("lease lost")

    outcome: list = []
    worker = threading.Thread(target=lambda: outcome.append(_try(queue, big, check)))
    worker.start()
    time.sleep(0.3)

    # When its run is lost while it waits
    stop.set()
    worker.join(5)

    # Then it gets the error at once, the rest of its ids never run, and a new document is served
    assert isinstance(outcome[0], TimeoutError)
    ran = sum(rows for rows, _ in model.passes)
    small = document(4, chunks=2)
    np.testing.assert_allclose(queue.embed(small), expected(small), atol=1e-6)
    assert sum(rows for rows, _ in model.passes) - ran <= len(small) + 2 * 64
    assert ran < len(big)
    queue.close()


def _try(queue, doc, check):
    try:
        return queue.embed(doc, check=check)
    except Exception as exc:  # noqa: BLE001 - the test reads it
        return exc


def test_a_small_document_behind_a_big_one_is_served_long_before_it():
    # Given a big document already queued (a hundred passes' worth), in a queue sized for 32
    # documents in flight
    model = StandInModel(batch_tokens=64, delay_s=0.01)
    queue = embed.EmbedQueue(model, documents=32)  # type: ignore[arg-type]
    big, small = document(5, chunks=300), document(6, chunks=2)
    pending = queue.submit(big)
    _wait_for(lambda: model.passes)

    # When a small document arrives
    np.testing.assert_allclose(queue.embed(small), expected(small), atol=1e-6)

    # Then it waited for about a 32nd of the big one (its fair start), not for all of it
    assert not pending.done()
    assert len(model.passes) < 20, model.passes
    np.testing.assert_allclose(pending.result(30), expected(big), atol=1e-6)
    queue.close()


def test_a_document_is_woken_by_its_own_vectors_only():
    # Given many documents waiting on their futures, with no thread each
    model = StandInModel(batch_tokens=256, delay_s=0.005)
    queue = embed.EmbedQueue(model)  # type: ignore[arg-type]
    docs = [document(seed, chunks=1 + seed % 4) for seed in range(64)]
    woken: list[int] = []

    # When they are all submitted at once
    requests = [queue.submit(doc) for doc in docs]
    for k, request in enumerate(requests):
        request.add_done_callback(lambda _, k=k: woken.append(k))

    # Then each future completes exactly once, with its own vectors, and passes were shared
    for doc, request in zip(docs, requests, strict=True):
        np.testing.assert_allclose(request.result(30), expected(doc), atol=1e-6)
    assert sorted(woken) == list(range(len(docs)))
    assert queue.stats.documents > queue.stats.passes
    queue.close()


def test_a_cancelled_document_is_never_delivered_and_the_others_are():
    model = StandInModel(batch_tokens=64, delay_s=0.02)
    queue = embed.EmbedQueue(model)  # type: ignore[arg-type]
    docs = [document(seed, chunks=20) for seed in range(4)]
    requests = [queue.submit(doc) for doc in docs]

    queue.cancel(requests[1])

    assert requests[1].cancelled()
    for k in (0, 2, 3):
        np.testing.assert_allclose(requests[k].result(30), expected(docs[k]), atol=1e-6)
    assert queue.stats.sequences < sum(len(d) for d in docs)
    queue.close()


def test_slots_of_a_cancelled_document_taken_over_by_the_next_give_it_its_own_vectors():
    # Given a document whose ids are in the pass now running (a slow model)
    model = StandInModel(batch_tokens=64, delay_s=0.1)
    queue = embed.EmbedQueue(model)  # type: ignore[arg-type]
    first = document(11, chunks=6)
    request = queue.submit(first)
    _wait_for(lambda: queue._forward_idle is False)  # noqa: SLF001

    # When it is cancelled and new documents take its slots while that pass still runs
    queue.cancel(request)
    later = [document(12 + k, chunks=4) for k in range(3)]
    requests = [queue.submit(doc) for doc in later]

    # Then each new document gets exactly its own vectors, and the cancelled one nothing
    assert request.cancelled()
    for doc, each in zip(later, requests, strict=True):
        np.testing.assert_allclose(each.result(30), expected(doc), atol=1e-6)
    assert len(queue._pool.free) == len(queue._pool.queued)  # noqa: SLF001 - every slot free
    queue.close()


class LaunchingModel(StandInModel):
    """A GPU-like pass: ``launch_s`` of this thread's work (the kernel launches), then
    ``launched`` is called and ``wait_s`` passes with the GIL free (the synchronise)."""

    def __init__(self, launch_s: float, wait_s: float) -> None:
        super().__init__(batch_tokens=64)
        self.launch_s, self.wait_s = launch_s, wait_s
        self.launched_at: list[float] = []

    def run(self, ids: np.ndarray, mask: np.ndarray, *, launched=None) -> np.ndarray:
        time.sleep(self.launch_s)
        self.launched_at.append(time.perf_counter())
        if launched is not None:
            launched()
        time.sleep(self.wait_s)
        return self.forward(ids, mask) * 3  # not unit: the queue normalises


def test_a_pass_is_delivered_after_the_next_ones_launches_not_during_them():
    # Given two documents that fill a pass each, on a device whose passes launch for 80 ms
    model = LaunchingModel(launch_s=0.08, wait_s=0.08)
    queue = embed.EmbedQueue(model)  # type: ignore[arg-type]
    first, second = document(1, chunks=2), document(2, chunks=2)
    for doc in (first, second):
        for chunk in doc:
            chunk[1:-1] = (chunk[1:-1] * 32)[:30]  # 32 tokens each: a pass holds 2
    done_at: dict[int, float] = {}

    # When both are queued at once
    requests = [queue.submit(doc) for doc in (first, second)]
    for k, request in enumerate(requests):
        request.add_done_callback(lambda _, k=k: done_at.setdefault(k, time.perf_counter()))

    # Then each gets its own unit vectors, and the first only once the second pass's launches
    # were done: the delivering thread's work never competes with them for the GIL
    for doc, request in zip((first, second), requests, strict=True):
        np.testing.assert_allclose(request.result(10), expected(doc), atol=1e-6)
    assert len(model.launched_at) == 2, model.passes
    assert done_at[0] >= model.launched_at[1], "delivered while the next pass was launching"
    assert done_at[0] < done_at[1]
    queue.close()


def test_ids_submitted_during_a_passs_launches_reach_the_pool_only_after_them():
    # Given a pass launching for 200 ms (ADR 0370: packing ids holds the GIL, which the
    # launches need), and the times the pool is filled
    model = LaunchingModel(launch_s=0.2, wait_s=0.05)
    queue = embed.EmbedQueue(model)  # type: ignore[arg-type]
    put_at: list[float] = []
    pool = queue._pool  # noqa: SLF001
    name = "put_many" if hasattr(pool, "put_many") else "put"  # (main's was "put")
    put = getattr(pool, name)
    setattr(pool, name, lambda *a: (put_at.append(time.perf_counter()), put(*a)))
    first = queue.submit(document(1, chunks=1))
    _wait_for(lambda: not queue._forward_idle and not queue._quiet.is_set())  # noqa: SLF001
    filled = len(put_at)

    # When two documents are submitted meanwhile, and one of them stops waiting at once
    later, gone = document(2, chunks=3), document(3, chunks=3)
    request, cancelled = queue.submit(later), queue.submit(gone)
    listed_only = request.slots is None and cancelled.slots is None
    queue.cancel(cancelled)

    # Then the submits only listed them; their ids went in once the launches were done; the
    # one left gets its own vectors, the cancelled one nothing, and every slot is free again
    assert listed_only, "a submit put its ids in the pool during the launches"
    np.testing.assert_allclose(request.result(10), expected(later), atol=1e-6)
    first.result(10)
    assert put_at[filled] >= model.launched_at[0]
    assert cancelled.cancelled()
    _wait_for(lambda: len(queue._pool.free) == len(queue._pool.queued))  # noqa: SLF001
    queue.close()


def test_embedder_run_tells_a_backend_when_to_say_launched_and_says_it_for_one_that_cannot():
    calls: list[str] = []

    class Signalling:
        signals_launch = True

        def forward(self, ids, mask, *, launched=None):
            calls.append("launching")
            if launched is not None:
                launched()
            calls.append("waiting")
            return np.full((len(ids), 3), 2.0)

    class Plain:
        def forward(self, ids, mask):
            calls.append("plain")
            return np.full((len(ids), 3), 2.0)

    embedder = embedding.load_embedder(cache_dir="/nonexistent")
    ids = np.ones((2, 4), dtype=np.int64)
    for backend in (Signalling(), Plain()):
        embedder.use_backend(backend, "stand-in")  # type: ignore[arg-type]
        raw = embedder.run(ids, ids, launched=lambda: calls.append("launched"))
        assert raw.dtype == np.float32 and (raw == 2.0).all()  # not normalised by run
        np.testing.assert_allclose(np.linalg.norm(embedder.forward(ids, ids), axis=1), 1.0)
    assert calls == ["launching", "launched", "waiting", "launching", "waiting",
                     "launched", "plain", "plain"]


def test_passes_cut_from_a_pool_of_many_documents_pad_little():
    # Given 60 documents of mixed lengths queued behind a running pass
    model = StandInModel(batch_tokens=256, delay_s=0.01)
    queue = embed.EmbedQueue(model, documents=60)  # type: ignore[arg-type]
    docs = [document(100 + k, chunks=6) for k in range(60)]

    requests = [queue.submit(doc) for doc in docs]

    # Then passes were cut from the whole pool: sorted by length, they pad far less than the
    # documents' own lengths spread (1-30 ids: a pass of random members pads ~45 %)
    for doc, request in zip(docs, requests, strict=True):
        np.testing.assert_allclose(request.result(30), expected(doc), atol=1e-6)
    assert queue.stats.tokens / queue.stats.padded_tokens > 0.85, queue.stats
    queue.close()


class CountingQueue(embed.EmbedQueue):
    """Counts how often the prep thread woke to decide when to cut."""

    decisions = 0

    def _cut_in(self) -> float:
        self.decisions += 1
        return super()._cut_in()


def test_submits_behind_a_running_pass_do_not_each_wake_the_prep_thread():
    # Given a pass running (a slow model, whose last pass set when the next is due) and room
    # for HOLD passes of 2,048 padded tokens
    model = StandInModel(batch_tokens=2048, delay_s=0.3)
    queue = CountingQueue(model, documents=200)  # type: ignore[arg-type]
    queue.embed(document(1, chunks=1))
    first = queue.submit(document(2, chunks=2))
    _wait_for(lambda: queue._forward_idle is False)  # noqa: SLF001
    woken = queue.decisions

    # When 200 one-chunk documents (under ~6,400 tokens) are submitted while it runs
    docs = [document(200 + k, chunks=1) for k in range(200)]
    requests = [queue.submit(doc) for doc in docs]
    during = queue.decisions - woken

    # Then the prep thread decided a handful of times, not once per document (each wake-up
    # takes the GIL from a GPU's launching thread), and everyone got their own vectors
    assert during < 20, during
    first.result(30)
    for doc, request in zip(docs, requests, strict=True):
        np.testing.assert_allclose(request.result(30), expected(doc), atol=1e-6)
    queue.close()


def _brute_around(lengths: list[int], at: int, budget: int) -> int:
    """The most real tokens of any [a, b) holding ``at`` that fits the budget (or ``at``
    alone): the reference for ``cut_around``."""
    best = lengths[at]
    for a in range(at + 1):
        for b in range(at + 1, len(lengths) + 1):
            if (b - a) * lengths[b - 1] <= budget:
                best = max(best, sum(lengths[a:b]))
    return best


@given(st.lists(st.integers(1, 40), min_size=1, max_size=40), st.data(), st.integers(1, 300))
def test_a_pass_cut_around_an_id_holds_it_fits_and_holds_the_most_tokens(lengths, data, budget):
    lengths = sorted(lengths)
    at = data.draw(st.integers(0, len(lengths) - 1))

    a, b = batches.cut_around(np.asarray(lengths, dtype=np.int64), at, budget)

    assert a <= at < b
    assert (b - a) * lengths[b - 1] <= budget or (a, b) == (at, at + 1)
    assert sum(lengths[a:b]) == _brute_around(lengths, at, budget)


def _wait_for(predicate, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_ids_outside_the_models_limit_are_refused_before_they_queue():
    queue = embed.EmbedQueue(StandInModel())  # type: ignore[arg-type]

    with pytest.raises(ValueError, match="1 to 32 tokens"):
        queue.embed([[101, 102], list(range(40))])
    assert queue.embed([]).shape == (0, DIM)


@pytest.mark.slow
def test_the_real_model_through_the_queue_gives_encode_ids_vectors():
    # The queue changes how chunks are grouped, never what a chunk's vector is (torch, fp32).
    model = embedding.load_embedder(variant="torch", batch_tokens=16 * 256)
    texts = [f"Document {k}: " + " ".join(["river", "budget", "court"][k % 3] for _ in range(n))
             for k, n in enumerate((3, 40, 120, 7, 60, 200))]
    docs = [[e.ids for e in model.tokenizer.encode_batch(texts[k:k + 2])] for k in (0, 2, 4)]
    queue = embed.EmbedQueue(model)

    results = embed_all(queue, docs)

    for doc, got in zip(docs, results, strict=True):
        np.testing.assert_allclose(got, model.encode_ids(doc), atol=2e-5)
    queue.close()


def _plan_by_hand(lengths: list[int], budget: int) -> list[list[int]]:
    """The cut one sequence at a time, as ADR 0230 wrote it: the reference for the numpy one."""
    passes: list[list[int]] = []
    current: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if current and (len(current) + 1) * lengths[i] > budget:
            passes.append(current)
            current = []
        current.append(i)
    return passes + ([current] if current else [])


@given(st.lists(st.integers(1, 256), max_size=300), st.integers(1, 9000))
def test_passes_are_cut_as_one_sequence_at_a_time_would_cut_them(lengths, budget):
    assert batches.plan_batches(lengths, budget) == _plan_by_hand(lengths, budget)


@given(st.lists(st.lists(st.integers(1, 30000), min_size=1, max_size=40), min_size=1,
                max_size=20))
def test_packed_ids_are_the_sequences_right_padded(sequences):
    packed = batches.Packed(sequences)
    width = max(map(len, sequences))
    assert packed.ids.shape == (len(sequences), width)
    for row, seq in enumerate(sequences):
        assert packed.ids[row, :len(seq)].tolist() == seq
        assert not packed.ids[row, len(seq):].any()
        assert packed.mask()[row].tolist() == [1] * len(seq) + [0] * (width - len(seq))


class _NotIterable(np.ndarray):
    """An id array that refuses to be walked id by id: packing must copy it whole."""

    def __iter__(self):
        raise AssertionError("an id array was unboxed id by id")


def test_arrays_of_ids_are_packed_whole_and_embed_as_lists_do():
    # Given documents whose ids come as the chunker's int32 arrays (ADR 0410)
    docs = [document(seed, chunks=3) for seed in range(6)]
    arrays = [[np.asarray(ids, dtype=np.int32).view(_NotIterable) for ids in doc] for doc in docs]

    # When they are packed, and embedded through the queue beside the same ids as lists
    packed = batches.Packed(arrays[0], 32, dtype=np.int32)
    queue = embed.EmbedQueue(StandInModel(batch_tokens=512))  # type: ignore[arg-type]
    results = embed_all(queue, arrays)
    queue.close()

    # Then the arrays were copied whole (never walked id by id), and each document got the
    # vectors its lists would have
    assert packed.ids.tolist() == batches.Packed(docs[0], 32, dtype=np.int32).ids.tolist()
    for doc, got in zip(docs, results, strict=True):
        np.testing.assert_allclose(got, expected(doc), atol=1e-6)


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="Linux only")
def test_the_pool_is_the_processs_memory_before_any_pass_writes_it():
    # Given a pool sized for 4,096 ids of 256 tokens (~10 MB of arenas), made in a fresh process
    # (here, freed memory that other tests had touched could be handed out again)
    script = """
import numpy as np
from worker.pipeline import embed
def resident():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096
before = resident()
pool = embed._Pool(256, 384, capacity=4096)
assert not pool.vectors.any() and not pool.ids.any()
print(resident() - before)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})

    # Then its pages are already resident: a delivery's first write into fresh slots took
    # 12-64 ms of page faults (ADR 0450), so they are taken when the pool is made
    assert int(out.stdout) > 8 * 2**20


def test_finished_documents_get_vectors_of_their_own_not_views_of_one_pass():
    # Given documents finished by the same passes
    model = StandInModel(batch_tokens=512)
    queue = embed.EmbedQueue(model)  # type: ignore[arg-type]
    docs = [document(seed, chunks=3) for seed in range(6)]

    results = embed_all(queue, docs)

    # Then each got its own small array: a view of the pass's gathered rows kept every other
    # document's rows alive, and the gather into one fresh array cost page faults (ADR 0450)
    for doc, got in zip(docs, results, strict=True):
        np.testing.assert_allclose(got, expected(doc), atol=1e-6)
        assert got.base is None
    queue.close()
