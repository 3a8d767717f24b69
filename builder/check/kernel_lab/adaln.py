"""AdaLN (web_src/src/kernels/adaln.js): out = LayerNorm(x) · (1 + scale) + shift, rows before `split` modulated by
vectors A and the rest by B (a double block's text and image rows), and its float64 reference. Its onnxruntime
equivalent is a chain of small ops (LayerNormalization, Add, Mul, Add on each stream), not timed beside it here: the
transformer step's table (docs/kernels.md) compares the whole step."""

from __future__ import annotations

import numpy as np

from builder.check.kernel_lab import shapes
from builder.check.kernel_lab.cases import Case, Tensor, sample_rows, timing

NAME = "adaln"
EPS = 1e-6


def _shapes(shape_set: str) -> list[tuple[int, int, int]]:
    """(rows, width, split) of each case: klein-4B's joint stream at `real`, odd sizes at `small`."""
    if shape_set == "real":
        return [(tokens, shapes.HIDDEN, shapes.TEXT_TOKENS) for tokens in shapes.ATTENTION_TOKENS.values()]
    # A split inside the rows, one at the end (all rows take A), a width that is no multiple of the workgroup.
    return [(77, 96, 30), (20, 200, 20)]


def cases(shape_set: str, *, seed: int = 11) -> list[Case]:
    out = []
    for index, (rows, width, split) in enumerate(_shapes(shape_set)):
        out.append(
            Case(
                id=f"{NAME}/r{rows}xw{width}s{split}",
                kernel=NAME,
                shape={"rows": rows, "width": width, "split": split},
                # x is the float32 residual stream in every graph; the modulation: shift A, scale A, shift B, scale B.
                inputs=(
                    Tensor("x", (rows, width), type="f32", seed=seed + 2 * index, scale=4.0, offset=0.5),
                    Tensor("mods", (4, width), type="f32", seed=seed + 2 * index + 1),
                ),
                output=Tensor("out", (rows, width)),
                rows=sample_rows(rows, limit=48 if shape_set == "real" else 1024, seed=seed + index),
                timing=timing(shape_set),
                flops=8.0 * rows * width,
            )
        )
    return out


def reference(case: Case, dtype: str) -> np.ndarray:
    x = case.input("x").values(dtype)
    shift_a, scale_a, shift_b, scale_b = case.input("mods").values(dtype)
    rows = np.asarray(case.rows)
    picked = x[rows]
    normed = (picked - picked.mean(axis=1, keepdims=True)) / np.sqrt(picked.var(axis=1, keepdims=True) + EPS)
    first = (rows < case.shape["split"])[:, None]
    out: np.ndarray = np.where(first, normed * (1 + scale_a) + shift_a, normed * (1 + scale_b) + shift_b)
    return out


def graphs(_case: Case) -> dict[str, object]:
    return {}
