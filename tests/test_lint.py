"""ruff, mypy and the formatters (scripts/format.py: ruff format, prettier) with the project's rules: each test fails,
with the tool's report, when the tool finds anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
LINTED = ("builder", "tests", "scripts", "setup.py")
FORMAT = ROOT / "scripts" / "format.py"


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


def formatter(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`python scripts/format.py ARGS`, the one command that formats the tree."""
    return subprocess.run(
        [sys.executable, str(FORMAT), *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )


def test_ruff_format_finds_nothing() -> None:
    result = formatter("--check", "--only", "python")
    assert result.returncode == 0, f"Fix: python scripts/format.py\n{result.stdout}{result.stderr}"


def test_prettier_finds_nothing() -> None:
    result = formatter("--check", "--only", "javascript")
    assert result.returncode == 0, f"Fix: python scripts/format.py\n{result.stdout}{result.stderr}"


# A call of 99 characters: one line at the project's width (120), split at ruff's and prettier's defaults (88, 80).
LONG_CALL = "describe(first_argument_of_the_call, second_argument_of_the_call, third_argument_of_the_call, four)"


@pytest.mark.parametrize(
    ("suffix", "good", "bad"),
    [
        (".py", f"{LONG_CALL}\n", "pairs = {'a':1,\n         'b':2}\n"),
        (
            ".mjs",
            f"{LONG_CALL};\nif (good) {{\n    say('four spaces, single quotes');\n}}\n",
            'if (bad) {\n  say("two spaces, double quotes")\n}\n',
        ),
    ],
    ids=["ruff format", "prettier"],
)
def test_the_check_catches_a_badly_formatted_file(tmp_path: Path, suffix: str, good: str, bad: str) -> None:
    """The project's settings, not the formatter's defaults: the good file passes, the bad one is named."""
    (tmp_path / f"good{suffix}").write_text(good, encoding="utf-8")
    (tmp_path / f"bad{suffix}").write_text(bad, encoding="utf-8")
    assert formatter("--check", f"good{suffix}", cwd=tmp_path).returncode == 0
    result = formatter("--check", f"good{suffix}", f"bad{suffix}", cwd=tmp_path)
    report = result.stdout + result.stderr
    assert result.returncode == 1 and f"bad{suffix}" in report and f"good{suffix}" not in report, report


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
