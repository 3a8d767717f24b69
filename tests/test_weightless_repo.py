"""scripts/weightless_repo.py: a repo shipped as structure + weight statistics comes back with the same graphs,
the same file sizes, weights drawn to the same statistics and a manifest whose hashes match the new files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from builder import REPO_ROOT
from builder.pipeline import reference
from builder.repo import manifest, verify

SCRIPT = REPO_ROOT / "scripts" / "weightless_repo.py"


def run(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def weights(repo: Path, graph: str) -> dict[str, np.ndarray]:
    model = onnx.load(str(repo / graph))  # external data loaded from the files beside it
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


@pytest.mark.slow
def test_strip_then_fill_gives_the_same_repo_with_redrawn_weights(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    source, structure, refilled = tiny_models["q4"], tmp_path / "structure", tmp_path / "refilled"
    run("strip", str(source), str(structure))
    described = json.loads((structure / "weights.json").read_text())
    # The structure carries no weight file, and is far smaller than them.
    assert described and not any((structure / rel).exists() for rel in described)
    run("fill", str(structure), str(refilled), "--seed", "3")

    original, redrawn = manifest.load(source), manifest.load(refilled)
    assert sorted(original.files) == sorted(redrawn.files)
    assert all(original.files[rel].size == redrawn.files[rel].size for rel in original.files)
    verify.check_files(refilled, redrawn, log=print)  # the new hashes describe the new files
    assert any(original.files[rel].sha256 != redrawn.files[rel].sha256 for rel in described)

    graph = "transformer/transformer_q4.onnx"
    before, after = weights(source, graph), weights(refilled, graph)
    assert before.keys() == after.keys()
    changed = 0
    for name, values in before.items():
        assert after[name].dtype == values.dtype and after[name].shape == values.shape
        if values.nbytes <= 4096:
            continue
        # Redrawn: float weights and the packed 4-bit ones (uint8 pairs of nibbles) alike.
        changed += not np.array_equal(values, after[name])
        if not np.issubdtype(values.dtype, np.floating):
            continue
        # Redrawn with the original's statistics.
        # pytest.approx takes Python numbers as tolerances (numpy's float32 is refused): float() them.
        mean, std = float(values.astype(np.float64).mean()), float(values.astype(np.float64).std())
        assert float(after[name].astype(np.float64).mean()) == pytest.approx(mean, abs=0.2 * std + 1e-6)
        assert float(after[name].astype(np.float64).std()) == pytest.approx(std, rel=0.2)
    assert changed > 0

    # The refilled repo runs end to end.
    result = reference.generate(
        refilled, prompt="a red fox", seed=1, width=64, height=64, steps=2, log=lambda _message: None
    )
    assert np.isfinite(result.image_float).all() and result.image.std() > 0
