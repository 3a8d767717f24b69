"""The page weighs a browser against the model it serves, from the model's manifest (the worker's modelInfo answer;
shared/browser_needs.js modelNeeds), not against klein-4B's figures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import new_page  # tests/browser is on sys.path (rootdir-relative import mode)

pytestmark = pytest.mark.browser


def test_the_page_weighs_the_browser_against_the_models_own_largest_weight(
    fresh_context: Any, dist_dir: Path, live_server_factory: Any, tiny_models_9b: dict[str, Path], tmp_path: Path
) -> None:
    """The page reads the model's needs from its manifest (the worker's modelInfo answer), not klein-4B's figures: a
    repository whose text encoder binds a weight larger than SwiftShader's 1 GiB buffers is refused before any
    download, with the figure, and Generate is blocked; klein-4B's 185 MiB would have passed."""
    repo = tmp_path / "repo"
    shutil.copytree(tiny_models_9b["q4"], repo)
    manifest_file = repo / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    for graph in manifest["graphs"]:
        if graph["component"] == "text_encoder":
            assert graph["largest_weight_bytes"] == 151936 * 64 // 2  # the tiny's 4-bit token embedding
            graph["largest_weight_bytes"] = 2 * 2**30
    manifest_file.write_text(json.dumps(manifest))
    server = live_server_factory(dist_dir, models=repo)
    page = new_page(fresh_context)
    try:
        page.goto(server.url("/"))
        page.wait_for_function(
            "() => document.querySelector('#browser-note').textContent.includes('cannot run')",
            timeout=120_000,
            polling=100,
        )
        note = page.inner_text("#browser-note")
        assert "GPU buffers of 2 GiB" in note and "per buffer" in note, note
        assert not page.is_enabled("#generate")
    finally:
        page.close()
