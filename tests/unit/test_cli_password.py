"""`ingest users create` run from a script with no password and no terminal says how to give
one, instead of a critical 'uncaught exception' with getpass's EOFError traceback (found by
following the README's second-tenant steps from a shell script)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_no_password_and_no_terminal_says_how_to_give_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "INGEST_PASSWORD"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "users", "create", "--tenant", "acme",
         "--email", "a@acme.test", "--role", "admin"],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=60)
    assert done.returncode == 1
    assert "pass --password or set INGEST_PASSWORD" in done.stderr
    assert "Traceback" not in done.stderr and "EOFError" not in done.stderr
