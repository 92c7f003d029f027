"""The README's quick start as a newcomer lives it: a fresh clone, `make run` with the machine's
own environment (none of the project's variables, no AWS keys), upload the README, Ctrl-C."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from cli.embedded import free_port
from tests.support import devstack
from tests.support.stack import ROOT, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _fresh_clone(dest: Path) -> Path:
    """The working tree as a clone would have it: tracked and untracked-but-not-ignored files
    (so uncommitted work is tested too), dates kept."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree, not yet committed
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    # The install itself is what CI's own `make test` on a fresh clone proves; here the clone
    # uses the project's installed venv (reinstalling would take minutes and rewrite it).
    (dest / ".venv").symlink_to((ROOT / ".venv").resolve(), target_is_directory=True)
    return dest


def test_fresh_clone_make_run_processes_the_readme_and_ctrl_c_stops_everything(
        stack_folder, out_dir):
    clone = _fresh_clone(stack_folder / "clone")
    port = free_port()
    env = devstack.newcomer_env(stack_folder / "home", PORT=str(port))
    (stack_folder / "home").mkdir()

    # Given the clone's Makefile accepts the installed venv as it is (no reinstall)
    planned = subprocess.run(["make", "-n", "run"], cwd=clone, env=env, capture_output=True,
                             text=True, timeout=60)
    assert "pip install" not in planned.stdout, (
        "the project's venv is out of date with pyproject.toml (run `make install`):\n"
        + planned.stdout)

    # When the newcomer runs `make run`
    stack = devstack.start(["make", "run"], clone, env, out_dir, port)
    try:
        token = stack.token()
        stack.wait_ready()
        # Then the README uploaded with the printed token is processed to the end
        headers = {"Authorization": f"Bearer {token}"}
        response = httpx.post(f"{stack.url}/v1/ingest", headers=headers, timeout=30, files={
            "file": ("README.md", (clone / "README.md").read_bytes(), "text/markdown")})
        assert response.status_code == 202, response.text
        run_url = f"{stack.url}/v1/ingestion-runs/{response.json()['run_id']}"

        def status() -> str | None:
            state = httpx.get(run_url, headers=headers, timeout=10).json()["status"]
            assert state != "failed", httpx.get(run_url, headers=headers).text
            return state if state == "succeeded" else None

        wait_until(status, timeout=300, interval=1, message="the README's run succeeded")

        # And Ctrl-C at the terminal stops make and every process of the stack
        children = stack.children()
        assert {"moto.server", "cli.main gateway", "cli.main worker", "postgres"} <= {
            marker for marker in ("moto.server", "cli.main gateway", "cli.main worker",
                                  "postgres")
            if any(marker in " ".join(c.cmdline()) for c in children)}
        stack.interrupt()
        devstack.assert_all_gone(children)
        # And all the stack wrote to its error stream is JSON lines, the spawned embedding
        # choice and ONNX export included, but the supervisor's last word
        stray = [line for line in stack.log.read_text(errors="replace").splitlines()
                 if line.strip() and not line.startswith("{") and line != "stopped"]
        assert not stray, stray[:5]
    finally:
        stack.kill()
