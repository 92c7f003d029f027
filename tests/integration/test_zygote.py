"""The test zygote (tests/support/zygote.py, docs/decisions/0260) forks gateways that behave as
processes started from the command line: their own environment, log and exit code."""

from __future__ import annotations

import signal

from tests.support import stack, zygote


def _fork(tmp_path, args: list[str], env: dict[str, str]) -> zygote.ForkedProcess:
    server = zygote.get(stack.clean_env(stack.OFFLINE_ENV), stack.ROOT)
    log = tmp_path / "child.log"
    log.touch()
    return server.fork(args, stack.clean_env(env), stack.ROOT, log)


def test_a_forked_command_writes_its_own_log_and_reports_its_exit_code(tmp_path):
    child = _fork(tmp_path, ["no-such-command"], {})
    assert child.wait(60) == 2  # argparse refuses the command, as `ingest no-such-command` does
    assert "invalid choice: 'no-such-command'" in (tmp_path / "child.log").read_text()


def test_a_forked_gateway_reads_only_the_environment_it_was_given(tmp_path):
    # Given the settings the gateway requires are missing from what the test gave it (the
    # zygote's own environment has none either; the child must not fall back on anything)
    child = _fork(tmp_path, ["gateway", "--port", "1"], {"DATABASE_URL": "postgresql://x@h/db"})
    assert child.wait(60) != 0
    assert "jwt_secret" in (tmp_path / "child.log").read_text().lower()


def test_a_forked_gateway_serves_and_ends_by_signal_as_popen_reports(stack_env, out_dir):
    gateway = stack.start_gateway(stack_env, out_dir)  # forked, unless TEST_GATEWAY_FORK=0
    assert gateway.client().get("/health/live").status_code == 200
    # uvicorn ends gracefully on SIGTERM, then re-raises it: -15, as for the command
    assert gateway.stop() == -signal.SIGTERM

    second = stack.start_gateway(stack_env, out_dir)
    second.proc.kill()
    assert second.proc.wait(30) == -signal.SIGKILL
    assert second.proc.poll() == -signal.SIGKILL
    second.proc.kill()  # a no-op once it has ended, as Popen's
