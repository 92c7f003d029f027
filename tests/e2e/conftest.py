"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

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
