"""A headless Chromium for the admin's pictures and browser tests: Debian's ``/usr/bin/chromium``
(or the first ``chromium`` on the PATH), driven by Playwright. docs/screenshots.py and the
``browser`` fixture of tests/admin/conftest.py both launch it here.

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1366, "height": 900})
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


class BrowserMissing(RuntimeError):
    """Chromium or Playwright is not installed; the message says how to install it."""


def chromium_path() -> str:
    found = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if not found:
        raise BrowserMissing(
            "chromium is not installed; the admin's browser pages need Debian's chromium: "
            "apt-get update && apt-get install -y chromium"
        )
    return found


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched browser (a Playwright ``Browser``), closed on exit. Playwright's sync API runs
    an event loop in this thread meanwhile: Django's ORM needs DJANGO_ALLOW_ASYNC_UNSAFE."""
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        raise BrowserMissing(
            "playwright is not installed: pip install playwright (the dev dependency group has it)"
        ) from error
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
