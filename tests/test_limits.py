"""One input contract: every Python entry point (reference, regress, the CLI) refuses what the app would refuse, with
an error that says what to do (tests/test_twins.py holds builder/pipeline/limits.py equal to shared/limits.js)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from builder import REPO_ROOT
from builder.check.regress.cases import Case, load_cases
from builder.errors import InputError
from builder.pipeline import limits, reference

DEFAULTS = Case(
    name="case", prompt="a red fox", seed=42, width=64, height=64, steps=4, psnr_min=40.0, reference_from_cpu=True
)


def test_parse_size_accepts_wxh_and_rejects_non_multiples_of_16() -> None:
    assert limits.parse_size("80x64") == (80, 64)
    assert limits.parse_size(" 2048 X 64 ") == (2048, 64)
    with pytest.raises(InputError, match=r"--size 65x64.*multiples of 16.*try 64x64"):
        limits.parse_size("65x64")
    with pytest.raises(InputError, match="WIDTHxHEIGHT"):
        limits.parse_size("big")


@pytest.mark.parametrize(("size", "fix"), [("2064x512", "try 2048x512"), ("48x64", "try 64x64"), ("64x0", "try 64x64")])
def test_parse_size_refuses_sizes_outside_64_to_2048(size: str, fix: str) -> None:
    with pytest.raises(InputError, match=rf"--size {size}: .*from 64 to 2048.*{fix}"):
        limits.parse_size(size)


GOOD: dict[str, Any] = {"prompt": "a fox", "seed": 0, "width": 64, "height": 2048, "steps": 50}


def test_reference_accepts_the_edges_of_every_limit() -> None:
    reference.check_inputs(**GOOD)
    reference.check_inputs(**{**GOOD, "seed": 2**32 - 1, "width": 2048, "height": 64, "steps": 1})


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("steps", 51, r"`steps` 51 is outside 1\.\.50; klein is distilled for 4"),
        ("width", 2064, r"`width` must be a multiple of 16 from 64 to 2048 .*got 2064; try 2048"),
        ("height", 48, r"`height` must be a multiple of 16 from 64 to 2048 .*got 48; try 64"),
        ("seed", 2**32, r"`seed` 4294967296 is outside \[0, 2\^32\); pick a seed like 42"),
        ("seed", -1, r"`seed` -1 is outside \[0, 2\^32\)"),
        ("steps", 4.0, r"`steps` must be an integer, got 4\.0"),
    ],
)
def test_reference_refuses_what_the_app_refuses(tmp_path: Path, field: str, value: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        reference.check_inputs(**{**GOOD, field: value})
    # generate() checks its inputs before it looks at the model folder (which does not exist here).
    with pytest.raises(InputError, match=message):
        reference.generate(tmp_path / "no-model", **{**GOOD, field: value}, log=lambda _m: None)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"steps": 51}, r"case 1 \(01-seed42-64x64\): steps 51 is outside 1\.\.50"),
        ({"size": "2064x64"}, r"case 1: `size` 2064x64: .*from 64 to 2048.*try 2048x64"),
        ({"size": "48x64"}, r"case 1: `size` 48x64: .*from 64 to 2048.*try 64x64"),
        ({"seed": 2**32}, r"case 1 \(01-seed4294967296-64x64\): seed 4294967296 is outside \[0, 2\^32\)"),
    ],
)
def test_regress_cases_refuse_what_the_app_refuses(tmp_path: Path, entry: dict[str, object], message: str) -> None:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": [entry]}))
    with pytest.raises(InputError, match=message):
        load_cases(path, defaults=DEFAULTS)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        timeout=120,
        check=False,
    )


def test_cli_refuses_out_of_range_steps_and_sizes_before_any_work(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-model")
    out = str(tmp_path / "x.png")
    steps = run_cli("reference", missing, "--prompt", "a fox", "--steps", "51", "--out", out)
    assert steps.returncode == 2 and "51 is not in the range 1<=x<=50" in steps.stderr, steps.stderr
    size = run_cli("reference", missing, "--prompt", "a fox", "--size", "2064x2064", "--out", out)
    assert size.returncode == 1 and "--size 2064x2064" in size.stderr and "try 2048x2048" in size.stderr, size.stderr
    # regress: a could-not-run (exit 2) with the reason on one line, before it looks for a browser or a model.
    regress = run_cli("regress", "--models", missing, "--prompt", "a fox", "--steps", "80", "--reference-from-cpu")
    assert regress.returncode == 2 and "could not run: regress: steps 80 is outside 1..50" in regress.stderr, (
        regress.stderr
    )
    assert not Path(out).exists()
