"""The test harness itself: what a spawned process inherits, where its logs go, what the log
scan reads. A harness that leaks or reuses output lets tests pass for the wrong reason."""

from __future__ import annotations

import os

import pytest

from tests.support import logscan, stack


def test_a_spawned_process_gets_only_the_machine_basics_and_its_settings(out_dir):
    # Given variables exported into the test process (as conftest does, or a developer's shell)
    assert os.environ.get("AWS_ACCESS_KEY_ID"), "conftest exports it for in-process clients"
    os.environ["UPLOAD_MAX_SIZE_MB"] = "0.001"
    try:
        # When a process is spawned with one setting
        process = stack.spawn("env-probe", ["--help"], {"LOG_LEVEL": "DEBUG"}, out_dir)
        assert process.proc.wait(60) == 0, process.logs()
        env = stack.clean_env({"LOG_LEVEL": "DEBUG"})
    finally:
        del os.environ["UPLOAD_MAX_SIZE_MB"]

    # Then its environment is the machine's basics plus that setting, nothing else
    assert set(env) <= set(stack.MACHINE_VARS) | {"LOG_LEVEL"}
    assert env["PATH"] == os.environ["PATH"] and env["LOG_LEVEL"] == "DEBUG"


def test_each_process_logs_to_a_fresh_file_and_waits_read_only_its_own(out_dir):
    # Given a process that logged an error and exited
    first = stack.spawn("cli", ["migrate"], {"DATABASE_URL": "postgresql://nobody@127.0.0.1:1/x"},
                        out_dir)
    assert first.proc.wait(60) != 0
    assert "error" in first.logs()

    # When another process of the same name runs in the same test
    second = stack.spawn("cli", ["--help"], {}, out_dir)
    assert second.proc.wait(60) == 0

    # Then it has a file of its own, and the first one's lines cannot satisfy a wait on it
    assert second.log_path != first.log_path and "error" not in second.logs()
    with pytest.raises(AssertionError, match="exited before logging"):
        stack.wait_for_log(second, '"level":"error"', timeout=5)


def test_the_log_scan_reads_a_recreated_log_from_its_start(tmp_path):
    # Given a long log seen before the session, then replaced by a short new file of that name
    log = tmp_path / "t" / "worker.log"
    log.parent.mkdir()
    log.write_text("x" * 500 + "\n")
    before = logscan._sizes(tmp_path)
    log.unlink()
    log.write_text('{"event": "for jane.doe@example.com"}\n' + "y" * 600 + "\n")

    # Then the scan finds what the new file holds from its first byte
    assert [f.kind for f in logscan.scan_since(tmp_path, before)] == ["email"]
