"""The consumer against a real SQS endpoint (moto) with a handler that needs no database: jobs
that finish together are deleted together, several messages come per receive, and every message
is still deleted only after its handler said Ack (docs/decisions/0232); a job that goes on
without its thread (Pending) frees its slot but keeps its message until its outcome comes
(docs/decisions/0301)."""

from __future__ import annotations

import concurrent.futures
import threading
import time

from worker.consumer import Consumer
from worker.handler import Ack, Leave, Pending


def test_jobs_that_finish_together_are_received_and_deleted_together(queues):
    # Given eight messages and a handler that finishes its jobs in two waves of four
    q = queues.queue
    for k in range(8):
        q.send(f"job {k}")
    wave = threading.Barrier(4)
    receives, deletes = _count(q, "receive"), _count(q, "delete_batch")
    seen: list[str] = []

    def handler(body: str, *, abort=None):
        seen.append(body)
        wave.wait(timeout=10)
        return Ack("done")

    # When a consumer with four slots drains the queue
    consumer = Consumer(q, handler, slots=4, wait_s=1, visibility_s=30, heartbeat_s=5, grace_s=1)
    consumer.run(once=True)

    # Then every message was handled once and deleted, in fewer receives and deletes than
    # messages: each wave came in one receive and left in one delete call
    assert sorted(seen) == [f"job {k}" for k in range(8)]
    assert q.depth() == {"visible": 0, "in_flight": 0}
    assert deletes["calls"] < 8 and deletes["items"] == 8
    assert receives["items"] == 8 and receives["calls"] < 8


def test_a_message_left_by_its_handler_is_not_deleted_with_its_neighbours(queues):
    # Given three messages; the handler leaves one for a second later, then acks it
    q = queues.queue
    for body in ("keep", "ack 1", "ack 2"):
        q.send(body)
    deletes = _count(q, "delete_batch")
    deleted_before_return: list[int] = []

    def handler(body: str, *, abort=None):
        if body == "keep" and not deleted_before_return:
            deleted_before_return.append(-1)
            return Leave("not now", visible_after_s=1)
        if body == "keep":
            deleted_before_return[0] = deletes["items"]
        return Ack("done")

    # When a consumer drains the queue
    Consumer(q, handler, slots=3, wait_s=1, visibility_s=30, heartbeat_s=5,
             grace_s=1).run(once=True)

    # Then the left message was still there when it came back (only its neighbours had been
    # deleted), and it was deleted after its own Ack
    assert deleted_before_return == [2]
    assert deletes["items"] == 3
    assert q.depth() == {"visible": 0, "in_flight": 0}


def test_pending_jobs_free_their_slots_and_keep_their_messages_until_they_end(queues):
    # Given six messages and a handler that answers Pending for each, ending none on its own
    q = queues.queue
    for k in range(6):
        q.send(f"doc {k}")
    futures: dict[str, concurrent.futures.Future] = {}
    all_pending = threading.Event()

    def handler(body: str, *, abort=None):
        futures[body] = concurrent.futures.Future()
        if len(futures) == 6:
            all_pending.set()
        return Pending(futures[body])

    # When a consumer with one slot and room for six messages runs
    consumer = Consumer(q, handler, slots=1, wait_s=1, visibility_s=30, heartbeat_s=5,
                        grace_s=5, in_flight=6)
    runner = threading.Thread(target=consumer.run, kwargs={"once": True})
    runner.start()

    # Then one slot took all six (none held it while pending), and none was deleted yet
    assert all_pending.wait(20), sorted(futures)
    assert q.depth()["in_flight"] == 6
    # and when they end (four acked, one left, one ending with an error), only the acked go
    for k in range(4):
        futures[f"doc {k}"].set_result(Ack("done"))
    futures["doc 4"].set_result(Leave("later", visible_after_s=30))
    futures["doc 5"].set_exception(RuntimeError("no outcome"))
    deadline = time.monotonic() + 10
    while consumer.processed < 6:
        assert time.monotonic() < deadline, consumer.processed
        time.sleep(0.02)
    consumer.stop()
    runner.join(20)
    assert not runner.is_alive()
    assert q.depth()["visible"] + q.depth()["in_flight"] == 2


def _count(q, method: str) -> dict[str, int]:
    """Counts calls of a queue method and the messages they carried (a spy; SQS is real)."""
    counts = {"calls": 0, "items": 0}
    real = getattr(q, method)

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        counts["calls"] += 1
        counts["items"] += len(args[0]) if method == "delete_batch" else len(result)
        return result

    setattr(q, method, spy)
    return counts
