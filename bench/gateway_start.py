"""How fast a gateway process starts, and what its start-up spends (docs/decisions/0324).

    python bench/gateway_start.py [--runs 5]

Each run starts `ingest gateway` as a new interpreter (the way `ingest dev` restarts one)
against a disposable Postgres and moto, and times, from the exec: the port listening, the
first `/health/live` answer, the first `/health/ready` 200 (query model loaded), and the CPU
seconds the process used until then. Beside it, the honest baseline: a bare Litestar app with
one route under uvicorn, what the framework and server cost before any of our code. Then the
imports of `gateway.app`, heaviest first (`python -X importtime`), so the next person sees
what start-up pays for.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import common  # noqa: I001 - sets the environment first
import httpx
import psutil

from cli.embedded import free_port

BARE_APP = """
from litestar import Litestar, get
import uvicorn, sys

@get("/health/live")
async def live() -> dict:
    return {"status": "ok"}

uvicorn.run(Litestar([live]), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _until(check, timeout: float = 120.0) -> float:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return time.monotonic()
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.01)
    raise TimeoutError("the gateway did not get there")


def _status(url: str) -> int:
    return httpx.get(url, timeout=2).status_code


def one_start(argv: list[str], env: dict[str, str], ready_path: str) -> dict[str, float]:
    """One start of ``argv`` + a free port."""
    port = free_port()
    started = time.monotonic()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([*argv, str(port)], env=env, cwd=common.ROOT, stdout=log,
                                stderr=log)
        try:
            me = psutil.Process(proc.pid)
            base = f"http://127.0.0.1:{port}"
            live = _until(lambda: _status(f"{base}/health/live") == 200) - started
            ready = _until(lambda: _status(f"{base}{ready_path}") == 200) - started
            cpu = sum(me.cpu_times()[:2])
        finally:
            proc.terminate()
            proc.wait(30)
    return {"live": live, "ready": ready, "cpu": cpu}


def _line(name: str, runs: list[dict[str, float]]) -> str:
    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    return (f"  {name:<34} live {med('live'):5.2f} s   ready {med('ready'):5.2f} s   "
            f"CPU until ready {med('cpu'):5.2f} s   (median of {len(runs)})")


def imports(top: int = 12) -> list[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import gateway.app"],
                          capture_output=True, text=True, cwd=common.ROOT,
                          env={**os.environ, "PYTHONPATH": str(common.ROOT)})
    rows = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    total = next((us for us, name in rows if name.strip() == "gateway.app"), 0)
    # Direct children of the project's packages and the big libraries, by cumulative time
    named = sorted(((us, name.strip()) for us, name in rows
                    if len(name) - len(name.lstrip()) <= 4 and name.strip() != "gateway.app"),
                   reverse=True)[:top]
    return [f"  import gateway.app: {total / 1e6:.2f} s in all"] + [
        f"    {us / 1e6:5.2f} s  {name}" for us, name in named]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(common.load_average())
    with common.stack("ingest-bench-start-") as (root, pg, moto):
        env = {**common.stack_env(root, pg.ensure_database("start"), moto),
               "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"),
               "PYTHONPATH": str(common.ROOT),
               "EMBEDDING_CACHE_DIR": str(common.ROOT / ".ingest" / "models")}
        from shared.db import migrate

        migrate.apply(env["DATABASE_URL"])
        ours = [sys.executable, "-m", "cli.main", "gateway", "--port"]
        bare = [sys.executable, "-c", BARE_APP]
        results = {"bare Litestar + uvicorn (baseline)": [], "ingest gateway": []}
        for _ in range(args.runs):  # interleaved: a load change hits both alike
            results["bare Litestar + uvicorn (baseline)"].append(
                one_start(bare, env, "/health/live"))
            results["ingest gateway"].append(one_start(ours, env, "/health/ready"))
        for name, runs in results.items():
            print(_line(name, runs))
    print("\n".join(imports()))
    print(common.load_average())


if __name__ == "__main__":
    main()
