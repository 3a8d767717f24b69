"""A folder in the seed layout without manifest.json (what `hf download ... --local-dir DIR` gives) works in
`reference`, `regress` and `serve --models` like a folder with a manifest; a folder of neither layout is refused."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from builder.check.driver.serving import check_models
from builder.check.regress import run as regress
from builder.cli import main
from builder.errors import ModelRepoError
from builder.pipeline import reference
from builder.repo import local, manifest
from builder.site.server import check_models_dir, create_app, serve_in_thread


@pytest.fixture
def seed_folder(tiny_models: dict[str, Path], tmp_path: Path) -> Path:
    dest = tmp_path / "klein"
    shutil.copytree(tiny_models["q4"], dest)
    (dest / manifest.MANIFEST_NAME).unlink()
    (dest / "README.md").write_text("# model card\n")
    return dest


def test_reference_runs_on_a_seed_folder_like_on_the_manifest_folder(
    tiny_models: dict[str, Path], seed_folder: Path
) -> None:
    lines: list[str] = []
    from_seed = reference.generate(seed_folder, prompt="a fox", seed=5, width=64, height=64, steps=2, log=lines.append)
    from_manifest = reference.generate(
        tiny_models["q4"], prompt="a fox", seed=5, width=64, height=64, steps=2, log=lambda _m: None
    )
    assert np.array_equal(from_seed.image, from_manifest.image)
    assert f"no manifest.json: sizes and hashes taken from the files in {seed_folder}" in lines
    assert from_seed.variants == from_manifest.variants


def test_regress_accepts_a_seed_folder(seed_folder: Path) -> None:
    folder, repo = check_models(seed_folder, log=lambda _m: None)
    assert folder == seed_folder
    assert {g.component for g in repo.graphs} == {*manifest.COMPONENTS, *manifest.OPTIONAL_COMPONENTS}
    assert "README.md" not in repo.files and "tokenizer/tokenizer.json" in repo.files
    assert manifest.PREVIEW_MAP_FILE in repo.files  # the step previews' map travels with the folder


def test_serve_gives_the_app_a_manifest_for_a_seed_folder(seed_folder: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "index.html").write_text("<!doctype html>")
    lines: list[str] = []
    repo = check_models_dir(seed_folder, log=lines.append)
    assert any("no manifest.json" in line for line in lines)
    with serve_in_thread(create_app(dist, seed_folder, models_manifest=repo)) as port:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/models/manifest.json") as reply:
            body = reply.read()
            assert reply.headers["content-type"] == "application/json"
        served = manifest.parse(body, "served manifest")
        for rel, entry in served.files.items():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/models/{rel}") as reply:
                assert len(reply.read()) == entry.size
    assert not (seed_folder / manifest.MANIFEST_NAME).exists()  # nothing written into the user's folder
    assert json.loads(body)["graphs"]


def test_a_folder_of_neither_layout_is_refused(tmp_path: Path) -> None:
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "notes.txt").write_text("hello")
    with pytest.raises(ModelRepoError, match="not a model folder"):
        local.open_folder(tmp_path / "stuff", log=lambda _m: None)
    result = CliRunner().invoke(
        main, ["serve", "--models", str(tmp_path / "stuff"), "--dist", str(tmp_path), "--port", "0"]
    )
    assert result.exit_code == 1 and "not a model folder" in result.output and "Traceback" not in result.output


def test_a_corrupt_file_in_a_manifest_folder_stops_serve(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "q4"
    shutil.copytree(tiny_models["q4"], folder)
    data = folder / "vae_decoder" / "vae_decoder_fp16.onnx_data"
    raw = bytearray(data.read_bytes())
    raw[10:20] = bytes(10) if raw[10:20] != bytes(10) else b"\1" * 10
    data.write_bytes(bytes(raw))
    result = CliRunner().invoke(main, ["serve", "--models", str(folder), "--dist", str(tmp_path), "--port", "0"])
    assert result.exit_code == 1 and "sha256" in result.output and str(data) in result.output


@pytest.mark.browser
@pytest.mark.slow
def test_the_app_runs_from_a_served_seed_folder(tiny_models: dict[str, Path], dist_dir: Path, tmp_path: Path) -> None:
    """The real app in Chromium loads a seed-layout folder through the served manifest, not from the Hub."""
    from builder.check.regress.cases import RegressOptions

    folder = tmp_path / "fp32-seed"
    shutil.copytree(tiny_models["fp32"], folder)
    (folder / manifest.MANIFEST_NAME).unlink()
    report = tmp_path / "report"
    options = RegressOptions(
        models_dir=folder,
        prompt="a red fox in the snow",
        size="64x64",
        reference_from_cpu=True,
        report_dir=report,
        dist_dir=dist_dir,
        precision="fp32",
    )
    assert regress.main(options, log=lambda _m: None) == 0
    data = json.loads((report / "report.json").read_text())
    assert data["verdict"] == "pass" and {graph["variant"] for graph in data["graphs"].values()} == {"fp32"}


def test_an_incomplete_folder_is_served_with_a_warning(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "q4"
    shutil.copytree(tiny_models["q4"], folder)
    (folder / "transformer" / "transformer_q4.onnx_data_1").unlink()  # still downloading
    lines: list[str] = []
    check_models_dir(folder, log=lines.append)
    assert any(line.startswith("warning: 1 file(s)") and "transformer_q4.onnx_data_1" in line for line in lines)
