"""One input contract: builder/pipeline/limits.py equals web_src/src/shared/limits.js, and every Python entry point
(reference, regress, the CLI) refuses what the app would refuse, with an error that says what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from builder import REPO_ROOT, WEB_SRC
from builder.check.regress_cases import Case, load_cases
from builder.errors import InputError
from builder.pipeline import limits, reference
from builder.site.node import find_node

LIMITS_JS = WEB_SRC / "src" / "shared" / "limits.js"
DEFAULTS = Case(name="case", prompt="a red fox", seed=42, width=64, height=64, steps=4, psnr_min=40.0,
                reference_from_cpu=True)


def camel_case(name: str) -> str:
    """STEPS_MAX -> stepsMax: the JS spelling of a Python constant's name."""
    first, *rest = name.lower().split("_")
    return first + "".join(word.title() for word in rest)


def python_limits() -> dict[str, int | float]:
    return {camel_case(name): value for name, value in vars(limits).items()
            if name.isupper() and isinstance(value, int | float) and not isinstance(value, bool)}


def test_python_and_js_limits_are_the_same_numbers() -> None:
    script = (f"import {{ LIMITS }} from {json.dumps(LIMITS_JS.as_uri())};"
              "console.log(JSON.stringify({ limits: LIMITS, frozen: Object.isFrozen(LIMITS) }));")
    result = subprocess.run([str(find_node().node), "--input-type=module", "-e", script], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    js = json.loads(result.stdout)
    assert js["frozen"], "LIMITS must be Object.freeze'd"
    assert js["limits"] == python_limits()
    assert python_limits() == {"stepsMin": 1, "stepsMax": 50, "sizeMin": 64, "sizeMax": 2048, "sizeMultiple": 16,
                               "seedMax": 2**32, "referencesMax": 4, "imageSideMin": 64, "imageAspectMax": 8,
                               "imageAreaMax": 1024**2, "imageFileBytesMax": 64 * 2**20,
                               "imagePixelsMax": 8192**2, "strengthDefault": 0.8}


@pytest.mark.parametrize("size", [(512, 512), (1024, 1024), (1025, 1024), (4032, 3024), (3000, 375), (97, 1000),
                                  (1500, 700), (64, 64), (12345, 1600)])
def test_input_image_size_is_the_same_in_python_and_js(size: tuple[int, int]) -> None:
    script = (f"import {{ inputImageSize }} from {json.dumps(LIMITS_JS.as_uri())};"
              f"console.log(JSON.stringify(inputImageSize({size[0]}, {size[1]})));")
    result = subprocess.run([str(find_node().node), "--input-type=module", "-e", script], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    used = limits.input_image_size(*size)
    assert json.loads(result.stdout) == {"width": used[0], "height": used[1],
                                         "tokens": limits.input_image_tokens(*size)}
    assert used[0] % 16 == 0 and used[1] % 16 == 0 and used[0] * used[1] <= max(1024**2, size[0] * size[1])


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


@pytest.mark.parametrize(("field", "value", "message"), [
    ("steps", 51, r"`steps` 51 is outside 1\.\.50; klein is distilled for 4"),
    ("width", 2064, r"`width` must be a multiple of 16 from 64 to 2048 .*got 2064; try 2048"),
    ("height", 48, r"`height` must be a multiple of 16 from 64 to 2048 .*got 48; try 64"),
    ("seed", 2**32, r"`seed` 4294967296 is outside \[0, 2\^32\); pick a seed like 42"),
    ("seed", -1, r"`seed` -1 is outside \[0, 2\^32\)"),
    ("steps", 4.0, r"`steps` must be an integer, got 4\.0"),
])
def test_reference_refuses_what_the_app_refuses(tmp_path: Path, field: str, value: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        reference.check_inputs(**{**GOOD, field: value})
    # generate() checks its inputs before it looks at the model folder (which does not exist here).
    with pytest.raises(InputError, match=message):
        reference.generate(tmp_path / "no-model", **{**GOOD, field: value}, log=lambda _m: None)


@pytest.mark.parametrize(("entry", "message"), [
    ({"steps": 51}, r"case 1 \(01-seed42-64x64\): steps 51 is outside 1\.\.50"),
    ({"size": "2064x64"}, r"case 1: `size` 2064x64: .*from 64 to 2048.*try 2048x64"),
    ({"size": "48x64"}, r"case 1: `size` 48x64: .*from 64 to 2048.*try 64x64"),
    ({"seed": 2**32}, r"case 1 \(01-seed4294967296-64x64\): seed 4294967296 is outside \[0, 2\^32\)"),
])
def test_regress_cases_refuse_what_the_app_refuses(tmp_path: Path, entry: dict[str, object], message: str) -> None:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": [entry]}))
    with pytest.raises(InputError, match=message):
        load_cases(path, defaults=DEFAULTS)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "builder", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=120, check=False)


def test_cli_refuses_out_of_range_steps_and_sizes_before_any_work(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-model")
    out = str(tmp_path / "x.png")
    steps = run_cli("reference", missing, "--prompt", "a fox", "--steps", "51", "--out", out)
    assert steps.returncode == 2 and "51 is not in the range 1<=x<=50" in steps.stderr, steps.stderr
    size = run_cli("reference", missing, "--prompt", "a fox", "--size", "2064x2064", "--out", out)
    assert size.returncode == 1 and "--size 2064x2064" in size.stderr and "try 2048x2048" in size.stderr, size.stderr
    # regress: a could-not-run (exit 2) with the reason on one line, before it looks for a browser or a model.
    regress = run_cli("regress", "--models", missing, "--prompt", "a fox", "--steps", "80", "--reference-from-cpu")
    assert regress.returncode == 2 and "could not run: regress: steps 80 is outside 1..50" in regress.stderr, \
        regress.stderr
    assert not Path(out).exists()
