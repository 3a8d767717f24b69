"""The linear layers' part of the kernel lab (builder/check/kernel_lab/linear.py): its cases read the inputs the page
uploads as the converter's MatMulNBits layout, its check tells each path's numbers from a wrong output, and
onnxruntime's equivalent graph computes the same layer (run here on onnxruntime's CPU kernels)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from builder.check.kernel_lab import kernels, linear
from builder.check.kernel_lab import linear_model as lm
from builder.check.kernel_lab.cases import Case


def small(name: str) -> Case:
    return next(c for c in kernels.all_cases("small", only=(linear.NAME,)) if c.id.startswith(f"{linear.NAME}/{name}-"))


@pytest.mark.parametrize("name", ["store", "swiglu", "gate", "slice"])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_each_path_passes_its_own_numbers_and_fails_a_wrong_one(name: str, dtype: str) -> None:
    case = small(name)
    x, weight, extra = linear._inputs(case, dtype)
    epilogue = linear._epilogue(case, extra)
    float_rows = linear._place(case, lm.float_linear(x, weight, epilogue), extra)
    int8_rows = linear._place(case, lm.int8_linear(x, weight, epilogue).astype(np.float64), extra)
    assert linear.verdict(case, dtype, "tiled", float_rows) is None
    assert linear.verdict(case, dtype, "int8-dp4a", int8_rows) is None
    # The int8 numbers are not the float ones: each check is tight enough to tell the paths apart.
    assert linear.verdict(case, dtype, "tiled", int8_rows) is not None
    assert linear.verdict(case, dtype, "int8-matrix", float_rows) is not None
    at = case.shape["outOffset"]
    for rows, variant in ((float_rows, "tiled"), (int8_rows, "int8-matrix")):
        wrong = rows.copy()
        wrong[len(wrong) // 2, at + 3] *= 1.001
        assert "column" in str(linear.verdict(case, dtype, variant, wrong))
    if case.shape["outStride"] > case.shape["columns"]:
        stray = float_rows.copy()
        stray[0, at + case.shape["columns"]] = 1e-3  # a write past the binding's columns
        assert linear.verdict(case, dtype, "tiled", stray) is not None


def test_the_cases_read_the_uploaded_words_as_matmulnbits_blocks() -> None:
    """The page uploads the packed weight as u32 words; the reference reads their bytes as [n, k/32, 16] blocks,
    low nibble first."""
    case = small("store")
    _, weight, _ = linear._inputs(case, "f32")
    words = case.input("packed").values("f32").astype(np.uint32)
    q = lm.nibbles(weight)
    assert q[5, 9] == ((int(words[5, 1]) >> 4) & 15) - 8  # value 9 = word 1, value 1
    assert q.shape == (case.shape["n"], case.shape["k"])
    assert weight.scales.dtype == np.float32 and linear._inputs(case, "f16")[1].scales.dtype == np.float16


def test_the_inputs_hold_no_int8_rounding_ties() -> None:
    """x is odd multiples of 1/1024, so no activation sits near a rounding boundary of the int8 quantiser: the int8
    paths are checked to the epilogue's last roundings, not within a tie's step."""
    for case in kernels.all_cases("small", only=(linear.NAME,)):
        for dtype in ("f32", "f16"):
            x, _, _ = linear._inputs(case, dtype)
            assert not lm.near_ties(x).any()
    even = np.arange(-254, 255)[None] / 512  # max|x| = 254/512: x·127/max|x| = j/2, a tie for every odd j
    assert lm.near_ties(even.astype(np.float32)).sum() == 254


def test_a_case_whose_check_expects_other_rows_fails() -> None:
    case = small("store")
    right = linear.reference(case, "f32")
    shifted = dataclasses.replace(case, expect={"rowA": 1, "columns": case.shape["columns"] - 1})
    assert linear.verdict(shifted, "f32", "tiled", right) is not None


@pytest.mark.parametrize("name", ["store", "swiglu"])
def test_onnxruntimes_graph_is_the_same_layer(name: str) -> None:
    import onnxruntime

    case = small(name)
    graph = linear.ort_graph(case, "f32")
    session = onnxruntime.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {}
    for tensor in case.inputs:
        values = tensor.values("f32")
        feeds[tensor.name] = (
            values.astype(np.uint32).view(np.uint8).reshape(case.ort.feeds["packed"])  # type: ignore[union-attr]
            if tensor.name == "packed"
            else values.astype(np.float32).reshape(case.ort.feeds[tensor.name])  # type: ignore[union-attr]
        )
    (out,) = session.run(None, feeds)
    want = linear.reference(case, "f32")
    # accuracy_level 4: onnxruntime quantises the activations to int8 per block of 32.
    assert np.abs(out[list(case.rows)] - want).max() <= 2e-2 * np.abs(want).max()


def test_the_real_cases_are_klein_4bs_linears() -> None:
    real = kernels.all_cases("real", only=(linear.NAME,))
    assert {c.shape["m"] for c in real} == {1536, 4608}
    layers = {(c.shape["n"], c.shape["k"], c.spec["epilogue"]) for c in real}
    assert layers == {
        (9216, 3072, "store"),
        (18432, 3072, "swiglu"),
        (3072, 3072, "gate_residual"),
        (3072, 9216, "gate_residual"),
        (3072, 12288, "gate_residual"),
    }
    assert all(len(c.rows) == 48 and c.timing and c.ort for c in real)
