"""`ingest dev`'s supervisor (cli/supervisor.py) with real child processes: a child that exits
is started again after a growing, capped delay; nothing is restarted while stopping."""

from __future__ import annotations

import subprocess
import sys
import time

from cli import supervisor
from tests.support.stack import wait_until


def _crashing() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])


def _sleeping() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_backoff_doubles_from_the_base_up_to_the_cap():
    delays = [supervisor.backoff_s(n, 1.0, 30.0) for n in range(1, 8)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_a_crash_loop_is_restarted_with_growing_delays_and_its_hook_runs():
    # Given a child that exits at once, every time
    hooks: list[float] = []
    sup = supervisor.Supervisor(backoff_s=0.2, backoff_max_s=0.8)
    child = sup.add("crasher", _crashing, after_restart=lambda: hooks.append(time.monotonic()))

    # When the supervisor watches it for a while
    wait_until(lambda: sup.check() or len(hooks) >= 4, timeout=30, interval=0.02,
               message="four restarts")

    # Then each restart ran the hook, and the gaps grew (0.2, 0.4, 0.8, 0.8 s)
    gaps = [b - a for a, b in zip(hooks, hooks[1:], strict=False)]
    assert gaps[0] >= 0.35 and gaps[1] >= 0.7 and gaps[2] >= 0.7, gaps
    assert child.failures >= 4
    sup.stop_all(grace_s=5)


def test_nothing_is_restarted_while_stopping():
    # Given a healthy child
    sup = supervisor.Supervisor(backoff_s=0.05, backoff_max_s=0.1)
    child = sup.add("sleeper", _sleeping)
    first = child.proc

    # When the stack stops (Ctrl-C) and the child exits
    sup.stop_all(grace_s=10)
    assert first.poll() is not None
    for _ in range(5):
        sup.check()
        time.sleep(0.1)

    # Then it was not started again
    assert child.proc is first and child.restart_at is None


def test_the_state_file_names_each_childs_pid_through_a_restart(tmp_path):
    # Given a supervisor that keeps its children's state in a file (bench/soak reads it)
    import json
    import os
    import signal

    state = tmp_path / "children.json"
    sup = supervisor.Supervisor(backoff_s=0.05, backoff_max_s=0.1, state_path=state)
    child = sup.add("sleeper", _sleeping)
    try:
        first = child.proc.pid
        assert json.loads(state.read_text()) == {
            "children": {"sleeper": {"pid": first, "up": True, "restarts": 0}}}

        # When the child is killed, Then the file says it is down, then names the new pid
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: sup.check() or json.loads(state.read_text())["children"]["sleeper"]
                   ["restarts"] == 1, timeout=30, interval=0.02, message="restarted")
        now = json.loads(state.read_text())["children"]["sleeper"]
        assert now == {"pid": child.proc.pid, "up": True, "restarts": 1}
        assert now["pid"] != first
        assert [p.name for p in tmp_path.iterdir()] == ["children.json"]  # no .tmp left
    finally:
        sup.stop_all(grace_s=5)
