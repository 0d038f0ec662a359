"""A real browser for tests: Debian's Chromium driven by Playwright (from PyPI).

Use the fixtures by importing them into a test module::

    from tests.browser import browser_fixture, page_fixture  # noqa: F401 - fixtures

(the fixtures are named ``browser`` and ``page``; the imported names differ so that
a test's ``page`` argument does not shadow an import).

``page`` records console errors and uncaught exceptions in ``page_errors(page)``.
Playwright's own browser download is never used (``playwright install`` needs a
host this machine cannot reach): the executable is ``MEDIAFLOW_CHROMIUM`` or
``/usr/bin/chromium``. Without it, or without the ``playwright`` package, the
tests that use these fixtures are skipped with the reason; CI installs both
(``apt-get install chromium``, ``pip install playwright``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

CHROMIUM_FLAGS = [
    "--no-sandbox",  # tests run as root in CI
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]
_ERRORS: dict[int, list[str]] = {}


def chromium_path() -> str | None:
    explicit = os.environ.get("MEDIAFLOW_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for candidate in ("/usr/bin/chromium", shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def missing_reason() -> str | None:
    """Why a browser test cannot run here, or None if it can."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install playwright; never `playwright install`)"
    if chromium_path() is None:
        return "Chromium not found (apt-get install chromium, or set MEDIAFLOW_CHROMIUM)"
    return None


@pytest.fixture(name="browser")
async def browser_fixture() -> AsyncIterator[Browser]:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture(name="page")
async def page_fixture(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context()
    opened = await context.new_page()
    errors = _ERRORS.setdefault(id(opened), [])
    opened.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    opened.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    try:
        yield opened
    finally:
        _ERRORS.pop(id(opened), None)
        await context.close()


def page_errors(opened: Page) -> list[str]:
    """Console errors and uncaught exceptions the page has shown so far."""
    return list(_ERRORS.get(id(opened), []))
