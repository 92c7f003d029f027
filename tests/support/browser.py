"""A real browser for the web UI tests: Playwright driving Debian's Chromium.

Playwright's own browser downloads are never used (they need the network); `make test` installs
Debian's `chromium` where apt-get exists. Without a browser the tests skip and say why, except
under CI=true, where a missing browser is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEST_PASSWORD, tenant_of

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
# Headless and quiet: no GPU, no QUIC, no calls home, no sync, no component updates.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LAPTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true needs a browser for the web UI tests: {reason}")
    pytest.skip(f"no browser for the web UI tests: {reason}")


def executable() -> str:
    explicit = os.environ.get("CHROMIUM_PATH")
    found = explicit or next((p for p in map(shutil.which, CANDIDATES) if p), None)
    if not found or not Path(found).exists():
        _unavailable("install Debian's chromium (make test does it where apt-get exists) "
                     "or set CHROMIUM_PATH")
    return str(found)


@contextmanager
def launch() -> Iterator[Any]:
    """One headless Chromium; Playwright gives each launch a fresh, temporary profile."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is missing (pip install -e '.[dev]')")
    path = executable()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def sign_in(page: Any, base_url: str, email: str, password: str = TEST_PASSWORD, *,
            next_path: str | None = None) -> None:
    """Fill the sign-in form (opening it unless it is already shown) and wait to land."""
    if "/login" not in page.url:
        page.goto(f"{base_url}/login" + (f"?next={next_path}" if next_path else ""))
    page.get_by_label("Tenant").fill(tenant_of(email))
    page.get_by_label("E-mail").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(re.escape(next_path or "/upload") + "$"))


def shot(page: Any, out_dir: Path, name: str, *, full_page: bool = True) -> Path:
    """A screenshot for reviewers, under the test's output folder."""
    path = out_dir / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def nav(page, name: str):
    """The main navigation's link called ``name``."""
    return page.get_by_role("navigation", name="Main").get_by_role("link", name=name, exact=True)
