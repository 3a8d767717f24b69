"""The step preview on the page (page/ui/step_preview.js), in headless Chromium on the tiny fp32 model: the frame
shows each step until the image arrives, "Show each step" is kept in this browser and `?preview=` sets it, the PNG
is the same byte for byte with the preview on or off, and the screenshot in docs/preview.md.

The server, browser profile and page helpers are test_ui.py's.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

# context, playwright and server are test_ui.py's fixtures, for this module (the tests take them as arguments).
from test_ui import POLL_MS, context, fill_custom_size, open_page, playwright, server, wait_state  # noqa: F401

from builder import REPO_ROOT

pytestmark = pytest.mark.browser

SCREENSHOT = REPO_ROOT / "docs" / "preview.png"
PROMPT = "a lighthouse on a cliff at dusk, oil painting"

# Installed before the page's scripts run: every step the preview canvas shows, in order.
RECORD_STEPS_JS = """() => {
    window.__previewSteps = [];
    const canvas = document.querySelector('#step-preview');
    new MutationObserver(() => {
        if (canvas.dataset.step) window.__previewSteps.push(Number(canvas.dataset.step));
    }).observe(canvas, {attributes: true, attributeFilter: ['data-step']});
}"""


def png_bytes(page: Any, folder: Path) -> bytes:
    """The PNG the Download button saves (the page's CSP keeps scripts from fetching its blob: URL)."""
    with page.expect_download() as info:
        page.click("#download")
    path: Path = folder / info.value.suggested_filename
    info.value.save_as(path)
    return path.read_bytes()


def generate(page: Any, *, seed: int, steps: int = 4, size: int = 64) -> list[int]:
    """One image through the form (on a page that is ready, or done with the image before); returns the steps the
    preview showed."""
    page.wait_for_function(
        "() => document.body.dataset.state === 'done' || document.querySelector('#status').textContent.startsWith('Ready')",
        polling=POLL_MS,
    )
    page.fill("#prompt", PROMPT)
    page.fill("#seed", str(seed))
    page.fill("#steps", str(steps))
    fill_custom_size(page, size, size)
    page.evaluate(RECORD_STEPS_JS)
    page.click("#generate")
    assert wait_state(page, "done", "error") == "done", page.inner_text("#error")
    assert page.is_hidden("#step-preview") and page.is_visible("#result-image")
    return list(page.evaluate("() => window.__previewSteps"))


def test_the_frame_shows_each_step_and_the_png_is_the_same_without_it(
    context: Any,  # noqa: F811
    server: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    page = open_page(context, server.url("/"))
    try:
        assert page.is_checked("#preview"), "on by default"
        assert generate(page, seed=7, steps=2) == [1, 2]
        with_preview = png_bytes(page, tmp_path / "on")

        # Off: no frame, the same PNG (the same worker, so the prompt's embedding is reused; the steps run again).
        page.uncheck("#preview")
        assert generate(page, seed=7, steps=2) == []
        assert png_bytes(page, tmp_path / "off") == with_preview
        # Kept off across a reload.
        page.reload()
        assert not page.is_checked("#preview")

        # The address overrides what is kept; a value that is not one is said and changes nothing.
        page.goto(server.url("/?preview=on"))
        assert page.is_checked("#preview")
        page.goto(server.url("/?preview=sometimes"))
        assert page.is_checked("#preview")
        page.wait_for_function(
            "() => document.querySelector('#error').textContent.includes('?preview=sometimes')", polling=POLL_MS
        )
        page.goto(server.url("/?preview=off"))
        assert not page.is_checked("#preview")
    finally:
        page.evaluate("() => localStorage.removeItem('klein-web:preview')")
        page.close()


def test_screenshot_of_the_preview(context: Any, server: Any, tmp_path: Path) -> None:  # noqa: F811
    page = open_page(context, server.url("/?preview=on"), viewport=(1280, 900))
    try:
        page.wait_for_function(
            "() => document.querySelector('#status').textContent.startsWith('Ready')", polling=POLL_MS
        )
        page.fill("#prompt", PROMPT)
        page.fill("#seed", "3")
        page.fill("#steps", "50")  # long enough to be caught mid-run
        fill_custom_size(page, 256, 256)
        page.click("#generate")
        still_running = (
            "() => { const c = document.querySelector('#step-preview');"
            " return !c.hidden && Number(c.dataset.step) >= 2 && Number(c.dataset.step) < 50; }"
        )
        page.wait_for_function(still_running, timeout=600_000, polling=POLL_MS)
        page.evaluate("() => window.scrollTo(0, 0)")
        shot = tmp_path / "preview.png"
        page.locator("#output").screenshot(path=str(shot))
        assert page.evaluate(still_running), "the run ended before the screenshot: it shows no preview"
        if os.environ.get("KLEIN_WEB_UPDATE_SCREENSHOTS") == "1":
            shutil.copyfile(shot, SCREENSHOT)
        page.click("#cancel")
        assert wait_state(page, "idle", "done", "error", timeout_ms=300_000) == "idle"
        assert page.is_hidden("#step-preview")
    finally:
        page.close()
