"""The served page in headless Chromium: cross-origin isolated, a WebGPU adapter, and the coi-sw.js fallback."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.browser import launch_persistent

pytestmark = pytest.mark.browser


@pytest.fixture
def browser_context(tmp_path: Path, chromium_path: Path) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = launch_persistent(playwright, tmp_path / "profile", executable=chromium_path)
        try:
            yield context
        finally:
            context.close()


def test_served_page_is_isolated_and_has_webgpu(live_server_factory: object, dist_dir: Path,
                                                 browser_context: object) -> None:
    server = live_server_factory(dist_dir)  # type: ignore[operator]
    page = browser_context.pages[0] if browser_context.pages else browser_context.new_page()  # type: ignore[attr-defined]
    csp_violations: list[str] = []
    page.on("console", lambda msg: csp_violations.append(msg.text) if "Content Security Policy" in msg.text else None)
    page.goto(server.url("/"), wait_until="load")
    facts = page.evaluate("""async () => {
        const adapter = navigator.gpu ? await navigator.gpu.requestAdapter() : null;
        return {
            isolated: self.crossOriginIsolated,
            sharedArrayBuffer: typeof SharedArrayBuffer === 'function',
            adapter: adapter !== null,
            // The headers made it isolated, so the fallback service worker must not have been installed.
            serviceWorkers: (await navigator.serviceWorker.getRegistrations()).length,
        };
    }""")
    assert facts == {"isolated": True, "sharedArrayBuffer": True, "adapter": True, "serviceWorkers": 0}, (
        f"{facts}\nserver log:\n{server.output()}"
    )
    assert csp_violations == [], csp_violations


def test_coi_service_worker_isolates_a_host_without_headers(dist_dir: Path, browser_context: object,
                                                             tmp_path: Path) -> None:
    """On a plain static host (python's http.server: no COOP/COEP), coi-sw.js adds them after one reload."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = open(tmp_path / "http.log", "wb")
    plain = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                              "--directory", str(dist_dir)], stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).close()
                break
            except (urllib.error.URLError, OSError):
                assert time.monotonic() < deadline, "http.server did not start"
                time.sleep(0.1)
        headers = urllib.request.urlopen(url, timeout=5).headers
        assert headers.get("Cross-Origin-Embedder-Policy") is None  # the premise: this host sends none
        page = browser_context.new_page()  # type: ignore[attr-defined]
        page.goto(url, wait_until="load")
        page.wait_for_function("self.crossOriginIsolated === true", timeout=20_000)
        controlled = page.evaluate("navigator.serviceWorker.controller && navigator.serviceWorker.controller.scriptURL")
        assert controlled == url + "coi-sw.js"
        assert page.evaluate("sessionStorage.getItem('klein-coi-reloaded')") == "1"  # reloaded exactly once
    finally:
        plain.terminate()
        plain.wait(10)
        log.close()
