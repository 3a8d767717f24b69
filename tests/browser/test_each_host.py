"""The site of every `klein-web build --host` in Chromium, served the way its host serves it (tests/host_server.py:
the headers read from `_headers`, `vercel.json` or the Space's front matter; GitHub Pages with no headers at all):
the page becomes `crossOriginIsolated`, starts its worker and generates with the tiny model, the same image on every
host. One browser, one page per host (each its own origin, so its own service worker and model store).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from host_server import serve_host  # tests/ is on sys.path

from builder.site import hosts
from builder.site.bundle import build

pytestmark = pytest.mark.browser

READY_MS = 120_000
GENERATE_TIMEOUT_MS = 300_000
RESULT_PIXELS_JS = """() => {
    const image = document.querySelector('#result-image');
    const canvas = document.createElement('canvas');
    canvas.width = image.naturalWidth;
    canvas.height = image.naturalHeight;
    const context = canvas.getContext('2d');
    context.drawImage(image, 0, 0);
    return Array.from(context.getImageData(0, 0, canvas.width, canvas.height).data);
}"""


def generate(page: Any) -> list[int]:
    """One 64x64, 2-step text-to-image run through the form; the image's RGBA pixels."""
    page.wait_for_function(
        "() => document.querySelector('#status').textContent.startsWith('Ready')", timeout=READY_MS, polling=100
    )
    page.fill("#prompt", "a lighthouse at dusk")
    page.fill("#seed", "5")
    page.fill("#steps", "2")
    page.select_option("#size", "custom")
    page.fill("#width", "64")
    page.fill("#height", "64")
    page.click("#generate")
    page.wait_for_function(
        "() => ['done', 'error'].includes(document.body.dataset.state)", timeout=GENERATE_TIMEOUT_MS, polling=200
    )
    assert page.evaluate("() => document.body.dataset.state") == "done", page.inner_text("#error")
    return list(page.evaluate(RESULT_PIXELS_JS))


def test_every_host_isolates_the_page_and_generates(
    fresh_context: Any, tiny_models: dict[str, Path], tmp_path: Path, node_modules: Path
) -> None:
    images: dict[str, list[int]] = {}
    for name in hosts.HOSTS:
        site_dir = build(tmp_path / name, host=name).out_dir
        with serve_host(name, site_dir, models=tiny_models["fp32"]) as (base, site):
            page = fresh_context.new_page()
            page.on("pageerror", lambda error, name=name: print(f"[{name} pageerror] {error}"))
            page.goto(base)
            page.wait_for_function("() => self.crossOriginIsolated === true", timeout=READY_MS, polling=100)
            if name == "github-pages":
                # No headers: the service worker isolates the page, after one reload.
                assert page.evaluate("() => sessionStorage.getItem('klein-coi-reloaded')") == "1"
            images[name] = generate(page)
            assert page.get_attribute("#model-source", "data-kind") == "local", name
            served = {path for method, path in site.requests if method == "GET"}
            assert "/models/manifest.json" in served, name
            page.close()
    reference = images["generic"]
    assert len(reference) == 64 * 64 * 4
    for name, image in images.items():
        assert image == reference, f"{name}: another image than the generic build's"
