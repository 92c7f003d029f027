"""Under CI=true a missing browser fails the web UI tests and `make test`; elsewhere it skips."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support import browser, stack


def test_a_missing_chromium_fails_under_ci_and_skips_elsewhere(monkeypatch, tmp_path):
    monkeypatch.setenv("CHROMIUM_PATH", str(tmp_path / "no-such-chromium"))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        browser.executable()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        browser.executable()


def test_make_browser_fails_under_ci_when_chromium_cannot_be_had(tmp_path):
    # A PATH with neither chromium nor apt-get: nothing can install it
    env = stack.clean_env({"PATH": str(tmp_path), "CI": "true"})
    make = shutil.which("make")
    assert make, "make is needed to test the Makefile"
    failed = subprocess.run([make, "-s", "browser"], cwd=stack.ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert failed.returncode != 0, failed.stdout + failed.stderr
    assert "CI=true" in failed.stdout + failed.stderr

    env["CI"] = "false"
    tolerated = subprocess.run([make, "-s", "browser"], cwd=stack.ROOT, env=env,
                               capture_output=True, text=True, timeout=60)
    assert tolerated.returncode == 0, tolerated.stdout + tolerated.stderr
