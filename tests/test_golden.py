"""The committed goldens of the JS unit tests (tests/golden/*.json) are what the libraries make: written afresh by
tests/golden/make_golden.py (torch, diffusers, transformers, numpy, Pillow at their pinned versions) and compared
value for value. The JS tests read the committed files, so they run without torch; this oracle is the full lane's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from builder import REPO_ROOT

pytestmark = pytest.mark.slow

GOLDEN_DIR = REPO_ROOT / "tests" / "golden"
MAKE_GOLDEN = GOLDEN_DIR / "make_golden.py"
COMMITTED = sorted(path.name for path in GOLDEN_DIR.glob("*.json"))
# Which torch and which CPU kernel made randn.json: recorded beside the numbers, not part of them.
PROVENANCE = ("torch", "cpu_capability")
# torch.randn's x86-64 kernel (AVX2, also used on AVX512) is what pipeline/rng.js ports; aarch64 differs in the last bits.
X86_KERNELS = ("AVX2", "AVX512")
REGENERATE = "python tests/golden/make_golden.py (then review and commit the changed files)"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory, node_modules: Path) -> Path:
    """Every golden made afresh (make_golden reads the Qwen3 tokenizer from node_modules)."""
    out = tmp_path_factory.mktemp("golden")
    result = subprocess.run(
        [sys.executable, str(MAKE_GOLDEN), str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, f"tests/golden/make_golden.py failed:\n{result.stdout}\n{result.stderr}"
    return out


def first_difference(made: Any, committed: Any, where: str = "") -> str | None:
    """Where two JSON values first differ (`cases[3].data`), or None."""
    if isinstance(made, dict) and isinstance(committed, dict):
        for key in sorted(made.keys() | committed.keys()):
            if key not in made or key not in committed:
                return f"{where}.{key} (only in {'the committed file' if key in committed else 'the made one'})"
            found = first_difference(made[key], committed[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(made, list) and isinstance(committed, list):
        if len(made) != len(committed):
            return f"{where} (length {len(made)} made, {len(committed)} committed)"
        for i, (a, b) in enumerate(zip(made, committed, strict=True)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if made == committed and type(made) is type(committed) else where or "(the whole file)"


def test_every_golden_make_golden_writes_is_committed(fresh: Path) -> None:
    assert sorted(path.name for path in fresh.glob("*.json")) == COMMITTED, f"regenerate: {REGENERATE}"


@pytest.mark.parametrize("name", COMMITTED)
def test_the_committed_golden_is_what_the_libraries_make(fresh: Path, name: str) -> None:
    made = json.loads((fresh / name).read_text(encoding="utf-8"))
    committed = json.loads((GOLDEN_DIR / name).read_text(encoding="utf-8"))
    if name == "randn.json" and made["cpu_capability"] not in X86_KERNELS:
        pytest.skip(f"torch.randn on {made['cpu_capability']} is not the x86-64 kernel the committed golden holds")
    for key in PROVENANCE:
        made.pop(key, None)
        committed.pop(key, None)
    difference = first_difference(made, committed)
    assert difference is None, f"tests/golden/{name} differs from what the libraries make at {difference}; {REGENERATE}"
