"""Headless Debian chromium for the displays' tests, with the network blocked: every request
that is not the page's own file is aborted and recorded, and console errors are kept."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@contextmanager
def chromium() -> Iterator[object]:
    executable = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(executable).exists():
        pytest.fail("chromium is not installed: apt-get install -y chromium (.ci/run does this)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=executable, args=ARGS)
        try:
            yield instance
        finally:
            instance.close()


class Offline:
    """A page opened with no network: ``errors`` (console and page errors), ``blocked``
    (requests that tried to leave the page)."""

    def __init__(self, browser: object, page_file: Path, width: int = 1280) -> None:
        self.errors: list[str] = []
        self.blocked: list[str] = []
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.errors.append("dialog " + d.message), d.dismiss()))
        self.page.goto(page_file.resolve().as_uri())

    def _route(self, route: object) -> None:
        if route.request.url.startswith(("file:", "data:")):
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort()

    def tooltip(self) -> str:
        tip = self.page.locator(".hl-tooltip")
        tip.wait_for(state="visible")
        return tip.inner_text()

    def shot(self, name: str, selector: str | None = None) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        target = self.page.locator(selector) if selector else self.page
        kwargs = {} if selector else {"full_page": True}
        target.screenshot(path=str(ARTIFACTS / name), **kwargs)

    def assert_clean(self) -> None:
        assert self.errors == []
        assert self.blocked == []
        assert self.page.locator(".hl-error").count() == 0

    def close(self) -> None:
        self.context.close()
