"""Measure liveness under the product's real default windows (nothing scaled).

    python bench/liveness.py              # one kill -9 and one SIGTERM
    python bench/liveness.py --repeat 3   # three of each

For each fault: a worker holds a small job at the embed stage (its test-only pause point), a
second worker polls the same queue, the fault hits the first, and the clock runs until the run
is `succeeded`. Prints the time from fault to takeover and to success, per fault, with the
windows in force. Targets (issue 10): SIGTERM under 10 s, kill -9 under 2 minutes, no operator.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import time
import uuid
from pathlib import Path

import common  # first: sets the environment before boto3 and the model load

from cli.embedded import EmbeddedPostgres, MotoServer  # noqa: E402
from shared import aws, db, queue  # noqa: E402
from shared.db import migrate  # noqa: E402
from shared.settings import WorkerSettings  # noqa: E402
from tests.support import documents, stack, submit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-liveness-") as tmp:
        root = Path(tmp)
        pg, moto = EmbeddedPostgres(root / "pg", disposable=True), MotoServer()
        pg.start()
        moto.start()
        try:
            _bench(root, pg, moto, args.repeat)
        finally:
            moto.stop()
            pg.stop("immediate")


def _bench(root: Path, pg: EmbeddedPostgres, moto: MotoServer, repeat: int) -> None:
    url = pg.ensure_database("bench")
    migrate.apply(url)
    sqs = aws.client("sqs", endpoint_url=moto.url, region="us-east-1")
    q_url, dlq_url = queue.ensure_queues(sqs, f"bench-{uuid.uuid4().hex[:6]}")
    jobs_queue = queue.Queue(sqs, q_url, dlq_url)
    flag = root / "hold-at-embed"
    # Only what the processes need to find each other: every window is the product's default.
    env = {"DATABASE_URL": url, "AWS_ENDPOINT_URL": moto.url, "SQS_QUEUE_URL": q_url,
           "SQS_DLQ_URL": dlq_url, "UPLOAD_STORE_URI": (root / "uploads").as_uri(),
           "ARTIFACT_STORE_URI": (root / "artifacts").as_uri(), "LOG_LEVEL": "INFO",
           **stack.MOTO_ENV, **stack.OFFLINE_ENV}  # workers start from a clean environment
    held = {**env, "WORKER_PAUSE_AT_STAGE": "embed", "WORKER_PAUSE_FILE": str(flag)}
    _windows()
    logs = root / "logs"
    results: list[tuple[str, float, float, int]] = []
    with db.connect(url, autocommit=True) as conn:
        user = common.BenchUser(conn)
        for round_ in range(repeat):
            for fault in ("SIGTERM", "kill -9"):
                results.append(_one(conn, jobs_queue, root, user, env, held, logs, flag,
                                    fault, round_))
    print("\nfault      fault→takeover  fault→succeeded  takeovers")
    for fault, takeover, done, count in results:
        print(f"{fault:<10} {takeover:>12.1f} s {done:>14.1f} s {count:>10}")
    print("targets: SIGTERM < 10 s, kill -9 < 120 s, no operator action")


def _windows() -> None:
    fields = WorkerSettings.model_fields
    names = ("sqs_visibility_timeout_s", "sqs_wait_time_s", "heartbeat_interval_s",
             "shutdown_grace_s", "running_stale_after_s")
    print("windows (defaults): " + ", ".join(f"{n}={fields[n].default}" for n in names))


def _start(env: dict[str, str], logs: Path, name: str) -> stack.Process:
    worker = stack.spawn(name, ["worker"], env, logs)
    stack.wait_for_log(worker, '"event":"worker started"', timeout=180)
    return worker


def _one(conn, jobs_queue, root: Path, user, env: dict[str, str], held: dict[str, str],  # type: ignore[no-untyped-def]
         logs: Path, flag: Path, fault: str, round_: int) -> tuple[str, float, float, int]:
    # The victim takes the job and is held at embed; only then does the other worker poll.
    flag.touch()
    tag = f"{fault.replace(' ', '')}-{round_}"
    victim = _start(held, logs, f"worker-victim-{tag}")
    other = None
    try:
        data = documents.make_markdown(3) + f"\n\nRound {round_} {fault}.\n".encode()
        job = submit.submit(conn, jobs_queue, root / "uploads", user, data)
        stack.wait_until(lambda: submit.run_row(conn, job.run_id)["stage"] == "embed",
                         timeout=120, message="job held at embed")
        other = _start(env, logs, f"worker-other-{tag}")  # not held: no pause settings
        return _fault(conn, job, victim, fault)
    finally:
        for worker in (victim, other):
            if worker is not None:
                worker.stop()


def _fault(conn, job, victim: stack.Process,  # type: ignore[no-untyped-def]
           fault: str) -> tuple[str, float, float, int]:
    # The victim stays held: with SIGTERM its job cannot finish in the grace period, as a
    # long job would not, so the run must be handed over.
    started = time.monotonic()
    victim.signal(signal.SIGKILL if fault == "kill -9" else signal.SIGTERM)
    victim.proc.wait(60)
    stack.wait_until(lambda: submit.run_row(conn, job.run_id)["takeover_count"] > 0,
                     timeout=600, interval=0.1, message="taken over")
    took = time.monotonic() - started
    stack.wait_until(lambda: submit.status(conn, job.run_id) == "succeeded", timeout=600,
                     interval=0.1, message="succeeded")
    done = time.monotonic() - started
    count = submit.run_row(conn, job.run_id)["takeover_count"]
    print(f"{fault}: taken over after {took:.1f} s, succeeded after {done:.1f} s", flush=True)
    return fault, took, done, count


if __name__ == "__main__":
    main()
