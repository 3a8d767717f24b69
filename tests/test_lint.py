"""ruff and mypy with the rules in pyproject.toml: the test command fails, with their report, when either finds anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
LINTED = ("builder", "tests", "scripts", "setup.py")


def run(*args: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_ruff_finds_nothing() -> None:
    result = run("ruff", "check", "--no-cache", *LINTED)
    assert result.returncode == 0, f"ruff check {' '.join(LINTED)}:\n{result.stdout}{result.stderr}"


def test_ruff_rules_catch_a_violation(tmp_path: Path) -> None:
    """The project's configuration, not ruff's defaults: bugbear and isort rules fire on a bad file."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import sys\nimport os\n\n\ndef pairs(a: list[int], b: list[int]) -> list[tuple[int, int]]:\n"
        "    return list(zip(a, b))\n",
        encoding="utf-8",
    )
    result = run("ruff", "check", "--no-cache", "--config", str(PYPROJECT), str(bad), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    for code in ("F401", "I001", "B905"):
        assert code in result.stdout, result.stdout


@pytest.mark.slow
def test_mypy_finds_nothing() -> None:
    result = run("mypy")
    assert result.returncode == 0, f"mypy (files and flags from pyproject.toml):\n{result.stdout}{result.stderr}"


@pytest.mark.slow
def test_mypy_flags_catch_an_untyped_function(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def double(x):\n    return x * 2\n\n\ncount: int = 'three'\n", encoding="utf-8")
    result = run("mypy", "--config-file", str(PYPROJECT), "--no-incremental", str(bad), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[no-untyped-def]" in result.stdout and "[assignment]" in result.stdout, result.stdout
