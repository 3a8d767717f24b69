"""What the linear kernels (web_src/src/kernels/linear*.js) compute, in numpy: the MatMulNBits packing they read,
each path's numerics step by step, and their error against float64.

Two kinds of path (docs/kernels.md, "Linear layers"):

- float paths (`tiled`, `simple`, `f16-matrix`): y = x·W_qᵀ with W_q = (q - 8)·scale the 4-bit weights, summed in float32 (the
  f16 path first rounds W_q to float16). Only the order of the float32 sum differs from the model, so a kernel is
  checked against `float_linear` within the float32 summation bound (`float_bound`).
- int8 paths (`int8-dp4a`, `int8-matrix`): integers summed exactly, so a kernel must match `int8_linear` to the
  last bit wherever its float epilogue has one rounding. The model quantises exactly as the kernels do:
  * each row of x to int8 with one scale: s_x = max|x| · (1/127), q_x = clamp(round(x · (127 / max|x|)), ±127);
  * each weight row to int8 with one power-of-two scale s_w = 2^e, the smallest with max_b |scale_b| · 8/127 ≤ 2^e,
    and w8 = round((q - 8) · (scale_b / 2^e)), so |w8| ≤ 127 and every step is one exactly rounded float32
    operation (the division by 2^e is exact);
  * y = float32(Σ q_x·w8) · s_x · s_w, then the float32 epilogue.
  The power-of-two weight scale costs at most one bit of the weights' int8 range and buys a model the GPU can match
  bit for bit. round() is round-half-to-even in both numpy and WGSL.

Epilogues (kernels/linear_epilogue.js): `store` (y + bias), `gate_residual` (out + gate·(y + bias), the residual
in place), `swiglu` (silu(y_a + bias_a) · (y_b + bias_b)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

F32 = np.float32
# MatMulNBits' block (builder.convert.quantize.Q4_BLOCK_SIZE), kept here so the lab runs with numpy alone.
Q4_BLOCK_SIZE = 32


@dataclass(frozen=True)
class Q4Weight:
    """One MatMulNBits weight as the converter writes it: `packed` uint8 [N, K/32, 16] (two values a byte, low
    nibble first), `scales` float32 or float16 [N, K/32], zero point 8."""

    packed: np.ndarray
    scales: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        n, blocks, _ = self.packed.shape
        return n, blocks * Q4_BLOCK_SIZE


def pack_weight(weight: np.ndarray, *, scales: str = "f32") -> Q4Weight:
    """An [N, K] float32 weight (nn.Linear's layout: y = x·Wᵀ) packed as the converter packs it (the MatMul's B is
    Wᵀ). `scales`: "f32" (q4 graphs) or "f16" (q4f16 graphs, whose scales are rounded to float16)."""
    from builder.convert.quantize import quantize_blocks  # onnx comes with it: only tests pack weights

    n, k = weight.shape
    packed, block_scales = quantize_blocks(np.ascontiguousarray(weight, dtype=F32), Q4_BLOCK_SIZE)
    kept = block_scales.astype(np.float16) if scales == "f16" else block_scales
    return Q4Weight(packed.reshape(n, k // Q4_BLOCK_SIZE, Q4_BLOCK_SIZE // 2), kept)


def nibbles(weight: Q4Weight) -> np.ndarray:
    """The 4-bit values with the zero point taken off: int8 [N, K] in -8..7."""
    n, k = weight.shape
    flat = weight.packed.reshape(n, k // 2)
    q = np.empty((n, k), dtype=np.int8)
    q[:, 0::2] = (flat & 0x0F).astype(np.int8) - 8
    q[:, 1::2] = (flat >> 4).astype(np.int8) - 8
    return q


def dequantize(weight: Q4Weight) -> np.ndarray:
    """W_q = (q - 8)·scale in float32, each product rounded once, as the tiled kernel expands it: [N, K]."""
    scales = np.repeat(weight.scales.astype(F32), Q4_BLOCK_SIZE, axis=1)
    return (nibbles(weight).astype(F32) * scales).astype(F32)


def dequantize_as(weight: Q4Weight, *, f16_weights: bool) -> np.ndarray:
    """W_q as a float path stages it: float32, or rounded to float16 (the f16 subgroup-matrix path)."""
    w = dequantize(weight)
    return w.astype(np.float16).astype(F32) if f16_weights else w


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row of x (float32 [M, K]) to int8 with one scale, exactly as the kernels do: (q_x int8, s_x float32 [M])."""
    x = x.astype(F32)
    amax = np.max(np.abs(x), axis=1)
    safe = np.where(amax > 0, amax, F32(1))
    inverse = np.where(amax > 0, F32(127) / safe, F32(0)).astype(F32)
    q = np.clip(np.round(x * inverse[:, None]), -127, 127).astype(np.int8)
    return q, (amax * F32(1 / 127)).astype(F32)


def row_exponents(weight: Q4Weight) -> np.ndarray:
    """The exponent e of each weight row's int8 scale 2^e: the smallest with max_b |scale_b| · 8/127 ≤ 2^e."""
    target = (np.max(np.abs(weight.scales.astype(F32)), axis=1) * F32(8 / 127)).astype(F32)
    fraction, exponent = np.frexp(target)
    # frexp: target = fraction · 2^exponent with fraction in [0.5, 1); an exact power of two needs one less.
    exponents: np.ndarray = np.where(fraction == 0.5, exponent - 1, exponent).astype(np.int32)
    return exponents


def expand_weight(weight: Q4Weight) -> tuple[np.ndarray, np.ndarray]:
    """The weight as int8 rows with power-of-two scales, as the int8 kernels expand it: (w8 int8 [N, K], s_w float32
    [N])."""
    exponents = row_exponents(weight)
    ratio = np.ldexp(weight.scales.astype(F32), -exponents[:, None]).astype(F32)
    product = (nibbles(weight).astype(F32) * np.repeat(ratio, Q4_BLOCK_SIZE, axis=1)).astype(F32)
    return np.round(product).astype(np.int8), np.ldexp(F32(1), exponents).astype(F32)


@dataclass(frozen=True)
class Epilogue:
    """An epilogue and its inputs. `kind`: "store", "gate_residual" or "swiglu"; `bias` [N] (by weight row);
    `gate` [batch items, columns] and `residual` [M, columns] for gate_residual; `row_a`/`row_b`/`columns` as the
    kernel's binding (defaults: all rows; swiglu: the two halves)."""

    kind: str = "store"
    bias: np.ndarray | None = None
    gate: np.ndarray | None = None
    residual: np.ndarray | None = None
    rows_per_batch: int | None = None
    row_a: int = 0
    row_b: int | None = None
    columns: int | None = None

    def rows(self, n: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The weight rows of the output's columns: a, and for swiglu b."""
        swiglu = self.kind == "swiglu"
        columns = self.columns if self.columns is not None else (n // 2 if swiglu else n - self.row_a)
        a = np.arange(self.row_a, self.row_a + columns)
        if not swiglu:
            return a, None
        row_b = self.row_b if self.row_b is not None else n // 2
        return a, np.arange(row_b, row_b + columns)


def finish(y: np.ndarray, epilogue: Epilogue, n: int) -> np.ndarray:
    """The epilogue over the dot products y [M, N] (one per weight row), in float32 as the kernels compute it."""
    rows_a, rows_b = epilogue.rows(n)
    v = y[:, rows_a].astype(F32)
    if epilogue.bias is not None:
        v = (v + epilogue.bias.astype(F32)[rows_a]).astype(F32)
    if rows_b is not None:
        u = y[:, rows_b].astype(F32)
        if epilogue.bias is not None:
            u = (u + epilogue.bias.astype(F32)[rows_b]).astype(F32)
        with np.errstate(over="ignore"):
            v = (v / (F32(1) + np.exp(-v)) * u).astype(F32)
    if epilogue.kind == "gate_residual":
        assert epilogue.gate is not None and epilogue.residual is not None
        per_item = epilogue.rows_per_batch or len(y)
        gate = np.repeat(epilogue.gate.astype(F32), per_item, axis=0)[: len(y)]
        v = (epilogue.residual.astype(F32) + gate * v).astype(F32)
    return v


def float_linear(x: np.ndarray, weight: Q4Weight, epilogue: Epilogue, *, f16_weights: bool = False) -> np.ndarray:
    """A float path's output with exact sums (float64): the kernel differs only by its float32 summation order.
    `f16_weights`: W_q rounded to float16 first, as the f16 subgroup-matrix path stages it."""
    w = dequantize_as(weight, f16_weights=f16_weights)
    return finish(x.astype(np.float64) @ w.astype(np.float64).T, epilogue, weight.shape[0])


def float_bound(x: np.ndarray, weight: Q4Weight, *, f16_weights: bool = False) -> np.ndarray:
    """A bound on a float32 sum's error for each dot product of x·W_qᵀ: K·2⁻²³·Σ|x||w| (Higham's gamma_K, to first
    order), [M, N]. Epilogues add a few roundings of their own on top."""
    w = dequantize_as(weight, f16_weights=f16_weights)
    k = x.shape[1]
    bound: np.ndarray = (k * 2.0**-23) * (np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T)
    return bound


def float_tolerance(x: np.ndarray, weight: Q4Weight, epilogue: Epilogue, *, f16_weights: bool = False) -> np.ndarray:
    """How far a float path's output [M, columns] may lie from `float_linear`: the float32 summation bound carried
    through the epilogue."""
    exact = x.astype(np.float64) @ dequantize_as(weight, f16_weights=f16_weights).astype(np.float64).T
    return carried(exact, float_bound(x, weight, f16_weights=f16_weights), epilogue, len(x))


def near_ties(x: np.ndarray) -> np.ndarray:
    """Where x · (127 / max|x|) lies so close to a rounding boundary (k + 1/2) that a GPU's division, allowed a few
    ulp, may round it the other way: bool [M, K]."""
    amax = np.max(np.abs(x.astype(np.float64)), axis=1, keepdims=True)
    y = np.abs(x * (127 / np.where(amax > 0, amax, 1)))
    return np.abs(y - np.floor(y) - 0.5) <= 2.0**-20 * np.maximum(y, 1)


def int8_tolerance(x: np.ndarray, weight: Q4Weight, epilogue: Epilogue) -> np.ndarray:
    """How far an int8 path's output may lie from `int8_linear`: nothing but the epilogue's float roundings, except
    where an activation is a near tie (`near_ties`) and may be quantised one step the other way."""
    _, sx = quantize_rows(x)
    w8, sw = expand_weight(weight)
    ties = near_ties(x).astype(np.float64)
    bound = (ties @ np.abs(w8.astype(np.float64)).T) * sx[:, None] * sw[None, :]
    return carried(int8_dots(x, weight).astype(np.float64), bound, epilogue, len(x))


def carried(dots: np.ndarray, bound: np.ndarray, epilogue: Epilogue, m: int) -> np.ndarray:
    """A bound on the output's error [M, columns] from a bound on each dot product's (`bound`, around `dots`, both
    [M, N]): carried through the epilogue (silu's slope is below 1.1), plus a few float32 roundings of the epilogue
    itself (WGSL's exp is within 3 + 2|x| ulp)."""
    n = dots.shape[1]
    rows_a, rows_b = epilogue.rows(n)
    bias = np.zeros(n) if epilogue.bias is None else epilogue.bias.astype(np.float64)
    a, da = dots[:, rows_a] + bias[rows_a], bound[:, rows_a]
    ulp = 2.0**-23
    if rows_b is None:
        value, error = a, da + 2 * ulp * np.abs(a)
    else:
        b, db = dots[:, rows_b] + bias[rows_b], bound[:, rows_b]
        silu = a / (1 + np.exp(np.minimum(-a, 80.0)))
        value = silu * b
        error = 1.1 * np.abs(b) * da + np.abs(silu) * db + da * db + (8 + 2 * np.abs(a)) * ulp * np.abs(value)
    if epilogue.kind == "gate_residual":
        assert epilogue.gate is not None and epilogue.residual is not None
        per_item = epilogue.rows_per_batch or m
        gate = np.abs(np.repeat(epilogue.gate.astype(np.float64), per_item, axis=0)[:m])
        value = epilogue.residual.astype(np.float64) + gate * value
        error = gate * error
    total: np.ndarray = error + 4 * ulp * np.abs(value) + 1e-30
    return total


def int8_dots(x: np.ndarray, weight: Q4Weight) -> np.ndarray:
    """The int8 paths' dot products before the epilogue: float32(Σ q_x·w8) · s_x · s_w, [M, N] float32."""
    qx, sx = quantize_rows(x)
    w8, sw = expand_weight(weight)
    acc = qx.astype(np.int64) @ w8.astype(np.int64).T
    assert np.abs(acc).max(initial=0) < 2**31, "int32 accumulators overflow"
    dots: np.ndarray = (acc.astype(F32) * sx[:, None] * sw[None, :]).astype(F32)
    return dots


def int8_linear(x: np.ndarray, weight: Q4Weight, epilogue: Epilogue) -> np.ndarray:
    """What an int8 path computes, bit for bit up to its epilogue's float roundings: float32 [M, columns]."""
    return finish(int8_dots(x, weight), epilogue, weight.shape[0])


@dataclass(frozen=True)
class Fidelity:
    """A path's error against float64 x·W_qᵀ (the same 4-bit weights, exact arithmetic), relative to the
    reference's RMS: what the path itself adds to the 4-bit weights' own error."""

    max_abs: float
    rms: float
    reference_rms: float

    @property
    def relative_rms(self) -> float:
        return self.rms / self.reference_rms if self.reference_rms else 0.0

    @property
    def snr_db(self) -> float:
        return float(20 * np.log10(self.reference_rms / self.rms)) if self.rms else float("inf")


def fidelity(result: np.ndarray, x: np.ndarray, weight: Q4Weight) -> Fidelity:
    """`result` (dot products [M, N], no epilogue) against float64 x·W_qᵀ."""
    exact = x.astype(np.float64) @ dequantize(weight).astype(np.float64).T
    error = result.astype(np.float64) - exact
    return Fidelity(
        max_abs=float(np.abs(error).max()),
        rms=float(np.sqrt(np.mean(error**2))),
        reference_rms=float(np.sqrt(np.mean(exact**2))),
    )
