"""builder/check/kernel_lab/linear_model.py: the numpy model of the linear kernels reads the converter's MatMulNBits
packing, and each path's quantisation keeps the properties the kernels rely on."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from builder.check.kernel_lab import linear_model as lm
from builder.convert.quantize import dequantize_blocks, quantize_matmul


def weights(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Random [n, k] weights whose blocks span a few octaves of scale, as trained weights' do."""
    octaves = np.exp(rng.uniform(-3, 1, (n, k // 32))).repeat(32, axis=1)
    return (rng.standard_normal((n, k)) * octaves).astype(np.float32)


def converter_packing(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The packed data and scales `convert` writes for a MatMul by weight.T (y = x·Wᵀ)."""
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="linear")
    graph = helper.make_graph([node], "g", [], [], [numpy_helper.from_array(weight.T.copy(), "w")])
    graph.initializer.clear()
    quantize_matmul(graph, node, weight.T.copy(), accuracy_level=4)
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    assert node.op_type == "MatMulNBits" and len(node.input) == 3, "symmetric blocks: no zero points"
    return inits[node.input[1]], inits[node.input[2]]


def test_pack_weight_is_the_converters_matmulnbits_layout() -> None:
    rng = np.random.default_rng(1)
    weight = weights(rng, 24, 96)
    packed, scales = converter_packing(weight)
    model = lm.pack_weight(weight)
    assert packed.shape == (24, 3, 16) and packed.dtype == np.uint8
    np.testing.assert_array_equal(model.packed, packed)
    np.testing.assert_array_equal(model.scales, scales.reshape(24, 3))
    assert model.shape == (24, 96)


def test_nibbles_and_dequantize_read_the_blocks_low_nibble_first() -> None:
    rng = np.random.default_rng(2)
    model = lm.pack_weight(weights(rng, 8, 64))
    flat = model.packed.reshape(8, 32)
    np.testing.assert_array_equal(lm.dequantize(model), dequantize_blocks(flat, model.scales, 32))
    q = lm.nibbles(model)
    assert q.min() >= -8 and q.max() <= 7
    assert q[3, 5] == int(flat[3, 2] >> 4) - 8 and q[3, 4] == int(flat[3, 2] & 15) - 8


def test_quantize_rows_uses_the_whole_int8_range_and_rounds_to_nearest() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 64)).astype(np.float32)
    x[1] = 0
    x[2, 7] = -40
    q, s = lm.quantize_rows(x)
    assert q.dtype == np.int8 and np.abs(q).max() == 127
    assert np.all(q[1] == 0) and s[1] == 0
    assert q[2, 7] == -127
    for row in (0, 2, 3, 4):
        assert np.abs(q[row]).max() == 127
        assert np.all(np.abs(x[row] - q[row] * np.float64(s[row])) <= s[row] * (0.5 + 1e-5))


def test_expand_weight_scales_are_powers_of_two_that_fit_int8() -> None:
    rng = np.random.default_rng(4)
    model = lm.pack_weight(weights(rng, 16, 128), scales="f16")
    w8, sw = lm.expand_weight(model)
    mantissa, _ = np.frexp(sw)
    assert np.all(mantissa == 0.5), "row scales are powers of two"
    assert np.abs(w8.astype(int)).max() <= 127
    ratio = np.abs(model.scales.astype(np.float32)).max(axis=1) / sw
    assert np.all((ratio > 127 / 16) & (ratio <= 127 / 8)), "the largest block uses between half and all the range"
    # w8 · s_w is W_q to within half a step of s_w.
    assert np.all(np.abs(w8 * sw[:, None].astype(np.float64) - lm.dequantize(model)) <= sw[:, None] / 2)


def test_int8_dots_is_the_exact_integer_product_scaled_once() -> None:
    rng = np.random.default_rng(5)
    model = lm.pack_weight(weights(rng, 12, 64))
    x = rng.standard_normal((7, 64)).astype(np.float32)
    qx, sx = lm.quantize_rows(x)
    w8, sw = lm.expand_weight(model)
    exact = np.array([[int(np.dot(qx[i].astype(int), w8[j].astype(int))) for j in range(12)] for i in range(7)])
    np.testing.assert_array_equal(lm.int8_dots(x, model), (exact.astype(np.float32) * sx[:, None]) * sw[None, :])


@pytest.mark.parametrize("scales", ["f32", "f16"])
def test_int8_fidelity_against_float64(scales: str) -> None:
    """Per-row int8 activations and int8-expanded weights add a few % RMS to x·W_qᵀ (more with outlier features,
    which widen their rows' int8 step), small beside the 4-bit weights' own error against the float weights."""
    rng = np.random.default_rng(6)
    weight = weights(rng, 64, 512)
    model = lm.pack_weight(weight, scales=scales)
    x = rng.standard_normal((32, 512)).astype(np.float32)
    plain = lm.fidelity(lm.int8_dots(x, model), x, model)
    outlying = x.copy()
    outlying[:, [3, 100]] *= 20
    outliers = lm.fidelity(lm.int8_dots(outlying, model), outlying, model)
    assert 0.005 < plain.relative_rms < 0.03
    assert plain.relative_rms < outliers.relative_rms < 0.08
    assert lm.fidelity(lm.float_linear(x, model, lm.Epilogue()), x, model).relative_rms < 1e-7
    exact = x.astype(np.float64) @ weight.astype(np.float64).T
    four_bit = np.sqrt(np.mean((lm.float_linear(x, model, lm.Epilogue()) - exact) ** 2))
    int8 = np.sqrt(np.mean((lm.int8_dots(x, model) - exact) ** 2))
    assert four_bit < int8 < 1.1 * four_bit


def test_epilogues_follow_the_transformer_blocks() -> None:
    rng = np.random.default_rng(7)
    model = lm.pack_weight(weights(rng, 16, 64))
    x = rng.standard_normal((6, 64)).astype(np.float32)
    y = x.astype(np.float64) @ lm.dequantize(model).astype(np.float64).T
    bias = rng.standard_normal(16).astype(np.float32)
    a, b = y[:, :8] + bias[:8], y[:, 8:] + bias[8:]
    swiglu = lm.float_linear(x, model, lm.Epilogue(kind="swiglu", bias=bias))
    np.testing.assert_allclose(swiglu, a / (1 + np.exp(-a)) * b, rtol=1e-5, atol=1e-5)
    gate = rng.standard_normal((2, 16)).astype(np.float32)
    residual = rng.standard_normal((6, 16)).astype(np.float32)
    gated = lm.float_linear(x, model, lm.Epilogue(kind="gate_residual", gate=gate, residual=residual, rows_per_batch=3))
    want = residual + np.repeat(gate, 3, axis=0) * y
    np.testing.assert_allclose(gated, want, rtol=1e-5, atol=1e-4)
    part = lm.float_linear(x, model, lm.Epilogue(row_a=4, columns=5))
    np.testing.assert_allclose(part, y[:, 4:9], rtol=1e-6, atol=1e-5)


def test_float_tolerance_catches_one_wrong_block() -> None:
    """The tolerance the lab checks float paths with is far below what a misread block changes."""
    rng = np.random.default_rng(8)
    model = lm.pack_weight(weights(rng, 8, 96))
    x = rng.standard_normal((4, 96)).astype(np.float32)
    tolerance = lm.float_tolerance(x, model, lm.Epilogue())
    good = lm.float_linear(x, model, lm.Epilogue()).astype(np.float32)
    assert np.all(np.abs(good - lm.float_linear(x, model, lm.Epilogue())) <= tolerance)
    broken = lm.Q4Weight(model.packed.copy(), model.scales.copy())
    broken.scales[2, 1] *= 1.01
    wrong = lm.float_linear(x, broken, lm.Epilogue())
    assert np.any(np.abs(wrong - good) > tolerance)


def test_the_models_block_is_the_converters() -> None:
    from builder.convert.quantize import Q4_BLOCK_SIZE

    assert lm.Q4_BLOCK_SIZE == Q4_BLOCK_SIZE
