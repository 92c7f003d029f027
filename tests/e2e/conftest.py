"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared import objectstore
from tests.support import browser


@pytest.fixture
def store_root(stack_env) -> Path:
    """The upload folder of this test's gateway and workers."""
    return objectstore.file_path(stack_env["UPLOAD_STORE_URI"])


@pytest.fixture(scope="module")
def chromium():
    """One browser per test module: starting Chromium is the slow part."""
    with browser.launch() as instance:
        yield instance


@pytest.fixture
def context(chromium):
    ctx = chromium.new_context(viewport=browser.LAPTOP)
    ctx.set_default_timeout(30_000)
    yield ctx
    ctx.close()


@pytest.fixture
def stack_folder() -> Iterator[Path]:
    """An empty folder for an `ingest dev` of this test, outside pytest's temp root: that root
    is shared by every pytest run of this user, and each new run resets it to 0700 and removes
    old runs' folders, which would lock the embedded Postgres (running as the unprivileged
    `pgserver` user under root) out of its own binaries and data mid-test."""
    folder = Path(tempfile.mkdtemp(prefix="ingest-dev-test-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
