"""`ingest dev` (what `make run` starts): one command brings the whole stack up, Ctrl-C takes
every child down, and a second start reuses the data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from cli.embedded import free_port
from tests.support.stack import ROOT, wait_until

pytestmark = pytest.mark.slow


def _start(folder: Path, port: int, log: Path) -> subprocess.Popen:
    """Logs (JSON, stderr) go to ``log``; the banner for the person at the terminal (stdout),
    which by design shows the dev token, goes beside it and is not a log."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "AWS_ENDPOINT_URL", "SQS_QUEUE_URL", "SQS_DLQ_URL")}
    with open(log, "ab") as err, open(_console(log), "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cli.main", "dev", "--port", str(port), "--workers", "1"],
            cwd=folder, env={**env, "PYTHONPATH": str(ROOT)}, stdout=out, stderr=err)


def _console(log: Path) -> Path:
    return log.with_suffix(".console.txt")


def _wait_ready(proc: subprocess.Popen, url: str, log: Path) -> None:
    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"ingest dev exited:\n{log.read_text()[-3000:]}")
        try:
            return httpx.get(f"{url}/health/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(ready, timeout=180, interval=0.5, message="dev stack ready")


def _stop(proc: subprocess.Popen) -> list[psutil.Process]:
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(90) == 0
    return children


def test_dev_stack_starts_stops_cleanly_and_keeps_its_data(tmp_path, out_dir):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = out_dir / "ingest-dev.log"

    # Given a fresh folder, when `ingest dev` starts
    proc = _start(tmp_path, port, log)
    try:
        _wait_ready(proc, url, log)
        token = (tmp_path / ".ingest" / "dev-token").read_text().strip()
        assert token in _console(log).read_text(), "the token is printed"
        # Then the printed token works and an upload is processed by the stack's worker
        headers = {"Authorization": f"Bearer {token}"}
        response = httpx.post(f"{url}/v1/ingest", headers=headers, timeout=30,
                              files={"file": ("hello.md", b"# Hello\n\nDragonfly dev stack.")})
        assert response.status_code == 202, response.text
        run_url = f"{url}/v1/ingestion-runs/{response.json()['run_id']}"
        wait_until(lambda: httpx.get(run_url, headers=headers).json()["status"] == "succeeded",
                   timeout=180, interval=0.5, message="run succeeded in the dev stack")
    finally:
        # When Ctrl-C arrives, every child (Postgres, moto, gateway, worker) is gone
        children = _stop(proc) if proc.poll() is None else []
    assert children, "the stack had child processes"
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]

    # And a second start reuses the data: same token, same run
    proc = _start(tmp_path, port, log)
    try:
        _wait_ready(proc, url, log)
        again = (tmp_path / ".ingest" / "dev-token").read_text().strip()
        listed = httpx.get(f"{url}/v1/documents", headers={"Authorization": f"Bearer {again}"})
        assert listed.status_code == 200 and listed.json()["total"] == 1
        assert httpx.get(run_url, headers={"Authorization": f"Bearer {token}"}).status_code == 200
    finally:
        _stop(proc)
