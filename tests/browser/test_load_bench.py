"""`klein-web load-bench` and the worker's `load` request, in headless Chromium on SwiftShader, on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.check.bench import load as load_bench
from builder.cli import main as cli
from builder.repo import manifest

pytestmark = pytest.mark.browser


def test_load_bench_creates_every_session_and_reports_what_it_fetched(
    tmp_path: Path, tiny_models: dict[str, Path], dist_dir: Path, chromium_path: Path
) -> None:
    repo_dir = tiny_models["q4"]
    rows = load_bench.main(
        tmp_path / "out",
        models_dir=repo_dir,
        log=lambda _msg: None,
        sizes=("256x256", "512x256"),
        dist_dir=dist_dir,
        browser_path=chromium_path,
        repeat=1,
    )

    assert [(r["component"], r["size"]) for r in rows] == [
        ("store", "256x256"),
        ("text_encoder", "256x256"),
        ("transformer", "256x256"),
        ("transformer", "512x256"),
        ("vae_decoder", "512x256"),
        ("transformer (again)", "256x256"),
    ]
    repo = manifest.load(repo_dir)
    store, *sessions = rows
    # The store row fetched the files of the graphs the app chose, and the tokenizer: at least every graph's bytes.
    first_graphs = [r for r in sessions[:-1] if r["component"] != "transformer" or r["size"] == "256x256"]
    assert store["bytes"] >= sum(r["bytes"] for r in first_graphs)
    # --repeat: the first size's transformer created once more (released in between, so created anew).
    assert sessions[-1]["graph"] == sessions[1]["graph"] and sessions[-1]["seconds"] > 0
    for row in sessions:
        path = row["graph"].split(" ")[0]
        assert path in {g.path for g in repo.graphs}, row
        assert row["seconds"] > 0, f"{row['component']}: a session was not created (no load time)"
        assert 0 <= row["read_seconds"] <= row["seconds"]
        assert row["bytes"] >= repo.files[path].size
        assert row["memory"]["rss_gib"].get("renderer", 0) > 0, "the renderer's memory was not sampled"
    assert any(r["wasm_heap_gib"] for r in sessions), "the wasm heap hook saw no onnxruntime heap"

    saved = json.loads((tmp_path / "out" / load_bench.JSON_NAME).read_text())
    assert saved["rows"] == rows and saved["environment"]["adapter"]
    table = (tmp_path / "out" / load_bench.MARKDOWN_NAME).read_text()
    assert "| transformer | 512x256 |" in table


def test_load_bench_refuses_a_variant_the_repo_lacks_before_starting_a_browser(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    result = CliRunner().invoke(
        cli, ["load-bench", "--models", str(tiny_models["fp32"]), "--precision", "q4f16", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2, result.output
    assert "has no transformer of that variant" in result.output
    assert not (tmp_path / load_bench.JSON_NAME).exists()
