"""The kernel lab (builder/check/kernel_lab, web_src/src/kernels, web_src/src/lab): its inputs are the same numbers
on both sides, its check fails on a wrong output, and on SwiftShader every kernel variant SwiftShader runs matches
numpy at small shapes (tails included), beside onnxruntime-web's equivalent graph."""

from __future__ import annotations

import base64
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from builder import REPO_ROOT
from builder.check.kernel_lab import adaln, attention, kernels, linear, prng, qk_norm_rope
from builder.check.kernel_lab.cases import Case, Tensor
from builder.check.kernel_lab.check import check
from builder.node import find_node

PRNG_SCRIPT = """
import { randomFloats, randomWords, toHalfBits } from './web_src/src/lab/prng.js';
const words = randomWords(7, 1000);
const floats = randomFloats(123456789, 1000, { scale: 4, offset: 0.5 });
console.log(JSON.stringify({ words: [...words], floats: [...floats], half: [...toHalfBits(randomFloats(3, 1000))] }));
"""


def test_the_page_and_numpy_make_the_same_inputs(node_modules: Path) -> None:
    result = subprocess.run(
        [str(find_node().node), "--input-type=module", "-e", PRNG_SCRIPT],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    page = json.loads(result.stdout)
    assert np.array_equal(np.array(page["words"], dtype=np.uint64), prng.random_words(7, 1000))
    floats = prng.random_floats(123456789, 1000, scale=4, offset=0.5)
    assert np.array_equal(np.array(page["floats"], dtype=np.float32), floats.astype(np.float32))
    assert len(np.unique(floats)) > 500  # values, not a constant
    half = prng.random_floats(3, 1000).astype(np.float16).view(np.uint16)
    assert np.array_equal(np.array(page["half"], dtype=np.uint16), half)


def small_case() -> Case:
    return kernels.all_cases("small", only=(attention.NAME,))[0]


def page_result(case: Case, rows: np.ndarray, dtype: str = "f32") -> dict[str, object]:
    numpy_type = np.float16 if dtype == "f16" else np.float32
    encoded = base64.b64encode(rows.astype(numpy_type).tobytes()).decode()
    return {
        "id": case.id,
        "kernel": case.kernel,
        "dtype": dtype,
        "variant": "plain",
        "out_type": dtype,
        "rows": encoded,
    }


def test_the_check_passes_the_reference_and_fails_a_wrong_output() -> None:
    case = small_case()
    want = attention.reference(case, "f32")
    assert check(case, page_result(case, want), references={}).passed
    wrong = want.copy()
    wrong[len(wrong) // 2, 5] += 0.01
    failed = check(case, page_result(case, wrong), references={})
    assert not failed.passed and "max error" in failed.message
    # Where it is wrong: the one changed row (its output row number) and column, in the first 16-column block.
    assert failed.wrong is not None
    assert failed.wrong["rows"] == 1 and failed.wrong["column_blocks"] == [0]
    assert failed.wrong["first"][0]["row"] == case.rows[len(wrong) // 2]
    assert failed.wrong["first"][0]["column"] == 5
    assert f"first row {case.rows[len(wrong) // 2]} column 5" in failed.message
    nan = want.copy()
    nan[0, 0] = np.nan
    assert not check(case, page_result(case, nan), references={}).passed


def test_the_reference_is_softmax_attention() -> None:
    """The float64 reference against a direct computation of one row, so a wrong reference cannot pass kernels."""
    case = small_case()
    tokens, dim = case.shape["tokens"], case.shape["headDim"]
    q, k, v = (case.input(name).values("f32") for name in ("q", "k", "v"))
    row = case.rows.index(tokens + 3)  # head 1, token 3
    scores = np.array([q[1, 3] @ k[1, j] / np.sqrt(dim) for j in range(tokens)])
    weights = np.exp(scores) / np.exp(scores).sum()
    assert np.allclose(attention.reference(case, "f32")[row], weights @ v[1], atol=1e-12)


def test_an_unknown_kernel_is_one_clean_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "builder", "kernel-lab", "--software", "--kernel", "nope", "--site", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "no kernel nope in the lab" in result.stderr and "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def lab_site(tmp_path_factory: pytest.TempPathFactory, node_modules: Path) -> Path:
    from builder.check.kernel_lab import site

    return site.build(tmp_path_factory.mktemp("kernel-lab") / "site", log=lambda _line: None)


def run_lab(cases: list[Case], site_dir: Path, chromium_path: Path) -> list:  # type: ignore[type-arg]
    from builder.check.kernel_lab.run import run_cases

    run = run_cases(cases, site_dir=site_dir, executable=chromium_path, gpu=False, timeout_s=240, log=print)
    assert run.error is None, run.error
    return run.rows


# The variants SwiftShader runs (subgroups of 4, packed int8 dot products, neither shader-f16 nor subgroup matrices),
# and how far onnxruntime's equivalent may be from float64 (its q4 linear quantises activations to int8 per block).
SOFTWARE_VARIANTS = {
    attention.NAME: {"subgroups", "plain"},
    linear.NAME: {"int8-dp4a", "tiled", "simple"},
    adaln.NAME: {"plain"},
    qk_norm_rope.NAME: {"plain"},
}
ORT_ERROR = {attention.NAME: 1e-4, linear.NAME: 2e-2}


@pytest.mark.browser
def test_every_variant_swiftshader_runs_matches_numpy(lab_site: Path, chromium_path: Path) -> None:
    cases = kernels.all_cases("small")
    rows = run_lab(cases, lab_site, chromium_path)
    failed = [f"{r.id} {r.dtype} {r.variant}: {r.message}" for r in rows if not r.passed]
    assert not failed, failed
    ran = {(r.id, r.dtype, r.variant) for r in rows}
    for case in cases:
        assert {(case.id, "f32", variant) for variant in SOFTWARE_VARIANTS[case.kernel]} <= ran
    # onnxruntime-web's graph ran on the same device and agrees with numpy too.
    compared = [r for r in rows if r.ort_max_error is not None]
    assert len(compared) == len([case for case in cases if case.ort]), [r.ort_message for r in rows]
    assert all(r.ort_max_error < ORT_ERROR[r.kernel] for r in compared)


@pytest.mark.browser
def test_a_wrong_kernel_is_caught(lab_site: Path, chromium_path: Path) -> None:
    """The kernel runs with another softmax scale than the one the check expects: every variant must fail."""
    case = small_case()
    wrong = dataclasses.replace(case, spec={"scale": 0.2}, ort=None, dtypes=("f32",))
    rows = run_lab([wrong], lab_site, chromium_path)
    assert len(rows) >= 2
    assert not any(r.passed for r in rows)
    assert all(r.max_error is not None and r.max_error > 1e-2 for r in rows)


@pytest.mark.browser
def test_a_wrong_linear_is_caught(lab_site: Path, chromium_path: Path) -> None:
    """The check expects the output to start one weight row later than the kernel computes it: every variant
    (the exact int8 ones and the float ones) must fail."""
    case = next(c for c in kernels.all_cases("small", only=(linear.NAME,)) if c.spec["epilogue"] == "store")
    columns = case.shape["columns"] - 1
    wrong = dataclasses.replace(case, expect={"rowA": 1, "columns": columns}, ort=None, dtypes=("f32",))
    rows = run_lab([wrong], lab_site, chromium_path)
    assert {r.variant for r in rows} >= SOFTWARE_VARIANTS[linear.NAME]
    assert not any(r.passed for r in rows)


def test_the_cases_name_real_shapes() -> None:
    real = {case.id: case for case in kernels.all_cases("real", only=(attention.NAME,))}
    assert {case.shape["tokens"] for case in real.values()} == {1536, 4608}
    assert all(case.shape["heads"] == 24 and case.shape["headDim"] == 128 for case in real.values())
    assert all(len(case.rows) == 48 and case.timing for case in real.values())
    assert all(isinstance(t, Tensor) for case in real.values() for t in case.inputs)
