"""The site of every `klein-web build --host` in Chromium, served the way its host serves it (tests/host_server.py:
the headers read from `_headers`, `vercel.json` or the Space's front matter; GitHub Pages with no headers at all):
the page becomes `crossOriginIsolated`, starts its worker and generates with the tiny model, the same image on every
host. One browser, one page per host (each its own origin, so its own service worker and model store).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import generate_through_form
from host_server import serve_host  # tests/ is on sys.path

from builder.site import hosts
from builder.site.bundle import build

pytestmark = pytest.mark.browser

READY_MS = 120_000


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
            images[name] = generate_through_form(page, prompt="a lighthouse at dusk", seed=5)
            assert page.get_attribute("#model-source", "data-kind") == "local", name
            served = {path for method, path in site.requests if method == "GET"}
            assert "/models/manifest.json" in served, name
            page.close()
    reference = images["generic"]
    assert len(reference) == 64 * 64 * 4
    for name, image in images.items():
        assert image == reference, f"{name}: another image than the generic build's"
