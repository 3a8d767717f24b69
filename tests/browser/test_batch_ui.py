"""Batches through the page in headless Chromium (WebGPU on SwiftShader), on the tiny fp32 model.

One Generate with Images = N asks the worker for N images, one request after another: seeds s, s+1, ... (or random
after the first), each kept in history and shown in `#batch-strip`, whose `data-json` says per image its seed, state,
time and whether its input images came from the worker's cache. The page's CSP forbids eval, so every Playwright
predicate below is a function, never a bare expression string.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import LiveServer, start_server  # tests/ is on sys.path (rootdir-relative conftest import)
from PIL import Image

from builder import REPO_ROOT
from builder.check.driver.chromium import launch_persistent
from builder.pipeline import imaging

pytestmark = pytest.mark.browser

GENERATE_TIMEOUT_MS = 240_000  # one image; a batch of N gets N times this
POLL_MS = 100
PROMPT = "a lighthouse on a cliff at dusk, oil painting"
SEED = 4242
SCREENSHOT = REPO_ROOT / "docs" / "batch-strip.png"

# Records the message types the page posts to its worker: how many images a batch asked for.
RECORD_POSTS_JS = """
window.__posted = [];
const originalPost = Worker.prototype.postMessage;
Worker.prototype.postMessage = function (message, ...rest) {
    window.__posted.push(message && message.type);
    return originalPost.call(this, message, ...rest);
};
"""


@pytest.fixture(scope="module")
def server(
    dist_dir: Path, tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    live = start_server(dist_dir, tmp_path_factory.mktemp("batch-server"), models=tiny_models["fp32"])
    yield live
    live.stop()


@pytest.fixture(scope="module")
def context(profile_dir: Path, chromium_path: Path) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        ctx = launch_persistent(playwright, profile_dir, executable=chromium_path)
        ctx.add_init_script(RECORD_POSTS_JS)
        try:
            yield ctx
        finally:
            ctx.close()


def open_page(context: Any, url: str) -> Any:
    tab = context.new_page()
    tab.set_viewport_size({"width": 1280, "height": 900})
    tab.on("console", lambda m: print(f"[console.{m.type}] {m.text}") if m.type in ("error", "warning") else None)
    tab.on("pageerror", lambda error: print(f"[pageerror] {error}"))
    tab.goto(url)
    tab.wait_for_function("() => document.querySelector('#status').textContent.startsWith('Ready')", polling=POLL_MS)
    return tab


@pytest.fixture(scope="module")
def app(context: Any, server: LiveServer) -> Iterator[Any]:
    """One page for the generating tests, in order: its worker keeps the sessions, as between a person's batches."""
    tab = open_page(context, server.url("/"))
    yield tab
    tab.close()


@pytest.fixture
def page(context: Any, server: LiveServer) -> Iterator[Any]:
    tab = open_page(context, server.url("/"))
    yield tab
    tab.close()


def settings(page: Any, *, seed: int, steps: int, batch: int, seeds: str = "sequence") -> None:
    page.fill("#prompt", PROMPT)
    page.fill("#seed", str(seed))
    page.fill("#steps", str(steps))
    page.select_option("#size", "custom")
    page.fill("#width", "64")
    page.fill("#height", "64")
    page.fill("#batch", str(batch))
    if batch > 1:
        page.select_option("#batch-seeds", seeds)


def run(page: Any, *, images: int, expect: str = "done") -> None:
    page.click("#generate")
    page.wait_for_function(
        "() => ['done', 'error', 'idle'].includes(document.body.dataset.state)",
        timeout=images * GENERATE_TIMEOUT_MS,
        polling=POLL_MS,
    )
    final = page.evaluate("() => document.body.dataset.state")
    assert final == expect, f"the run ended {final}: {page.inner_text('#error')}"


def strip(page: Any) -> list[dict[str, Any]]:
    return list(json.loads(page.get_attribute("#batch-strip", "data-json") or "[]"))


def history_seeds(page: Any) -> list[str]:
    return [
        str(seed) for seed in page.eval_on_selector_all("#history .history-item", "bs => bs.map(b => b.dataset.seed)")
    ]


def generates_posted(page: Any) -> int:
    return int(page.evaluate("() => window.__posted.filter((type) => type === 'generate').length"))


def downloaded_png(page: Any, folder: Path) -> tuple[np.ndarray, dict[str, str]]:
    with page.expect_download() as info:
        page.click("#download")
    path = folder / info.value.suggested_filename
    info.value.save_as(path)
    return imaging.read_png(path)


def test_a_batch_of_three_runs_the_next_seeds_and_each_is_a_single_runs_image(app: Any, tmp_path: Path) -> None:
    settings(app, seed=SEED, steps=2, batch=3)
    before = history_seeds(app)
    run(app, images=3)
    items = strip(app)
    assert [(item["seed"], item["state"]) for item in items] == [(SEED + i, "done") for i in range(3)]
    assert all(item["totalMs"] > 0 for item in items)
    assert generates_posted(app) == 3, "one request per image"
    assert app.inner_text("#status").startswith("Done: 3 images in ")
    # Each image is in history under its own seed, newest first.
    app.wait_for_function(
        "(n) => document.querySelectorAll('#history .history-item').length === n", arg=len(before) + 3, polling=POLL_MS
    )
    assert history_seeds(app)[:3] == [str(SEED + 2), str(SEED + 1), str(SEED)]
    # The timings panel: each image's time, and the batch's total.
    batch_timings = app.inner_text("#batch-timings")
    for i in range(3):
        assert f"Image {i + 1} · seed {SEED + i}" in batch_timings, batch_timings
    assert "Batch total" in batch_timings

    # The last image is shown large; a click on a thumbnail shows that one, with its own caption and PNG.
    thumbnails = app.locator("#batch-strip .batch-item")
    assert thumbnails.count() == 3
    assert app.get_attribute("#batch-strip li:nth-child(3) button", "aria-pressed") == "true"
    pixels = {}
    for i in range(3):
        thumbnails.nth(i).click()
        assert f"Seed {SEED + i} ·" in app.inner_text("#result-caption")
        pixels[i], text = downloaded_png(app, tmp_path)
        assert text["seed"] == str(SEED + i) and text["prompt"] == PROMPT and text["size"] == "64x64"
    assert not np.array_equal(pixels[0], pixels[1]), "different seeds, different images"
    if os.environ.get("KLEIN_WEB_UPDATE_SCREENSHOTS") == "1":
        thumbnails.nth(1).click()
        app.locator("#output").screenshot(path=str(tmp_path / "batch-strip.png"))
        # The tiny model's images are noise, which PNG cannot compress: 128 colours keep the docs app light.
        with Image.open(tmp_path / "batch-strip.png") as shot:
            shot.convert("RGB").quantize(colors=128).save(SCREENSHOT, optimize=True)

    # A single run of the second seed gives the batch's second image, bit for bit.
    settings(app, seed=SEED + 1, steps=2, batch=1)
    run(app, images=1)
    assert app.is_hidden("#batch-strip") and app.is_hidden("#batch-timings")
    single, text = downloaded_png(app, tmp_path)
    assert text["seed"] == str(SEED + 1)
    assert np.array_equal(single, pixels[1])


def test_cancel_during_the_second_image_keeps_the_first_and_starts_no_more(app: Any) -> None:
    settings(app, seed=77, steps=10, batch=3)
    before = len(history_seeds(app))
    posted = generates_posted(app)
    app.click("#generate")
    # The second image is denoising: the first is done and in the strip.
    app.wait_for_function(
        """() => {
            const bar = document.querySelector('#progress');
            return document.querySelector('#status').textContent.startsWith('Image 2 of 3')
                && bar.max === 10 && bar.value >= 1;
        }""",
        timeout=2 * GENERATE_TIMEOUT_MS,
        polling=20,
    )
    app.click("#cancel")
    app.wait_for_function("() => document.body.dataset.state !== 'running'", timeout=60_000, polling=POLL_MS)
    assert app.evaluate("() => document.body.dataset.state") == "idle", app.inner_text("#error")
    assert app.inner_text("#status") == "Cancelled after 1 of 3 images."
    assert [item["state"] for item in strip(app)] == ["done", "cancelled", "skipped"]
    app.wait_for_timeout(1500)  # a third request would have been posted by now
    assert generates_posted(app) - posted == 2
    assert len(history_seeds(app)) == before + 1 and history_seeds(app)[0] == "77"
    assert "Seed 77 ·" in app.inner_text("#result-caption"), "the first image stays on show"
    assert app.is_enabled("#generate") and app.is_disabled("#cancel")


def test_random_seeds_and_an_editing_batch_encode_the_reference_once(app: Any, tmp_path: Path) -> None:
    reference = tmp_path / "fox.png"
    y, x = np.mgrid[0:64, 0:80]
    picture = np.stack([x * 3 % 256, y * 4 % 256, (x + y) % 256], axis=-1).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(picture).save(out, format="PNG")
    reference.write_bytes(out.getvalue())
    app.click("label[for=mode-edit]")
    app.set_input_files("#reference-files", str(reference))
    app.wait_for_function("() => document.querySelectorAll('#references li').length === 1", polling=POLL_MS)
    app.fill("#prompt", "the fox at sea")
    app.fill("#seed", "5")
    app.fill("#steps", "2")
    app.fill("#batch", "3")
    app.select_option("#batch-seeds", "random")
    run(app, images=3)
    items = strip(app)
    seeds = [item["seed"] for item in items]
    assert seeds[0] == 5 and len(set(seeds)) == 3, seeds
    # The reference is encoded for the first image only; the others take its latents from the worker's cache.
    assert [item["imagesCached"] for item in items] == [[False], [True], [True]]
    assert "(input images cached)" in app.inner_text("#batch-timings")
    for i, seed in enumerate(seeds):
        app.locator("#batch-strip .batch-item").nth(i).click()
        _, text = downloaded_png(app, tmp_path)
        assert text["seed"] == str(seed) and text["mode"] == "edit" and text["images"].endswith(" fox.png")


def test_the_count_is_kept_set_by_the_link_and_checked(server: LiveServer, page: Any) -> None:
    page.fill("#batch", "4")
    page.select_option("#batch-seeds", "random")
    page.reload()
    assert page.input_value("#batch") == "4" and page.input_value("#batch-seeds") == "random"
    page.goto(server.url("/?batch=2"))
    assert page.input_value("#batch") == "2"
    page.goto(server.url("/?batch=9"))
    page.wait_for_selector("#error:not(:empty)")
    assert "?batch= must be a whole number from 1 to 8" in page.inner_text("#error")
    page.fill("#batch", "0")
    posted = generates_posted(page)
    page.click("#generate")
    page.wait_for_function(
        "() => document.querySelector('#error').textContent.includes('Images must be')", polling=POLL_MS
    )
    assert page.get_attribute("#batch", "aria-invalid") == "true"
    assert generates_posted(page) == posted, "a bad count sends nothing"
    page.fill("#batch", "1")
