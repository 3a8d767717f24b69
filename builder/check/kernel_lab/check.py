"""A page's result against the kernel's float64 reference: the largest absolute error of the sampled rows, ours and
onnxruntime's, and whether ours is within the dtype's bound."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

from builder.check.kernel_lab import kernels
from builder.check.kernel_lab.cases import Case

# Largest absolute error allowed, per unit of the reference's largest magnitude (at least 1). fp16: the output's
# rounding (2^-11 relative) plus fp16 probabilities on the matrix units; fp32: accumulation order over 4608 keys.
TOLERANCE = {"f16": 4e-3, "f32": 1e-4}
NUMPY_TYPES = {"f16": np.float16, "f32": np.float32, "u32": np.uint32}


@dataclass
class Checked:
    """One row of the lab's table."""

    id: str
    kernel: str
    dtype: str
    variant: str
    passed: bool
    message: str = ""
    max_error: float | None = None
    ms: float | None = None
    dispatches: int | None = None
    flops: float = 0.0
    ort_ms: float | None = None
    ort_kernels: int | None = None
    ort_max_error: float | None = None
    ort_message: str = ""
    ort_programs: dict[str, float] | None = None
    passes_ms: list[float] | None = None
    wrong: dict[str, Any] | None = None  # where a failed output is wrong: see where_wrong

    @property
    def tflops(self) -> float | None:
        return self.flops / self.ms / 1e9 if self.ms and self.flops else None

    @property
    def ort_tflops(self) -> float | None:
        return self.flops / self.ort_ms / 1e9 if self.ort_ms and self.flops else None


def rows_of(encoded: str, out_type: str, case: Case) -> np.ndarray:
    width = case.output.dims[-1]
    values = np.frombuffer(base64.b64decode(encoded), dtype=NUMPY_TYPES[out_type])
    return values.reshape(len(case.rows), width).astype(np.float64)


def max_error(got: np.ndarray, want: np.ndarray) -> float:
    """The largest absolute difference; inf where the output has a NaN or an infinity."""
    if not np.isfinite(got).all():
        return float("inf")
    return float(np.abs(got - want).max())


def where_wrong(case: Case, got: np.ndarray, want: np.ndarray, bound: float) -> dict[str, Any]:
    """Where the output is out of bound, cheap enough to keep for every failure: how many sampled rows are wrong, the
    first ones (output row, its first wrong column, that value and the reference's), and which 16-wide column blocks
    hold errors, so a tiling fault shows its pattern (one fragment's columns, one subgroup's rows) in the record."""
    bad = ~np.isfinite(got) | (np.abs(got - want) > bound)
    rows = np.flatnonzero(bad.any(axis=1))
    first = []
    for index in rows[:12]:
        column = int(np.flatnonzero(bad[index])[0])
        first.append(
            {
                "row": int(case.rows[index]),
                "column": column,
                "got": float(got[index, column]),
                "want": float(want[index, column]),
                "wrong_columns": int(bad[index].sum()),
            }
        )
    blocks = sorted({int(c) // 16 for c in np.flatnonzero(bad.any(axis=0))})
    return {"rows": len(rows), "of": len(case.rows), "column_blocks": blocks, "first": first}


def describe(wrong: dict[str, Any]) -> str:
    """One line of where_wrong's result for the lab's log."""
    head = wrong["first"][0] if wrong["first"] else None
    first = (
        f"; first row {head['row']} column {head['column']}: {head['got']:.4g}, want {head['want']:.4g}" if head else ""
    )
    return f"{wrong['rows']} of {wrong['of']} rows wrong, in 16-column blocks {wrong['column_blocks']}{first}"


def check(case: Case, result: dict[str, Any], *, references: dict[tuple[str, str], np.ndarray]) -> Checked:
    """`references` caches each (case, dtype)'s float64 rows: every variant of a case is checked against one."""
    dtype, variant = str(result.get("dtype", "?")), str(result.get("variant", "?"))
    row = Checked(id=case.id, kernel=case.kernel, dtype=dtype, variant=variant, passed=False, flops=case.flops)
    ort = result.get("ort") or {}
    if ort.get("error"):
        row.ort_message = str(ort["error"])
    if result.get("error"):
        row.message = str(result["error"])
        return row
    key = (case.id, dtype)
    if key not in references:
        references[key] = kernels.MODULES[case.kernel].reference(case, dtype)
    want = references[key]
    got = rows_of(result["rows"], result["out_type"], case)
    row.max_error = max_error(got, want)
    verdict = getattr(kernels.MODULES[case.kernel], "verdict", None)
    if verdict is not None:
        # The kernel's own check of what this variant computes (e.g. the exact int8 numerics of the linear
        # layers, which sit a known distance from float64); max_error still says how far from float64 it is.
        problem = verdict(case, dtype, variant, got)
        row.passed, row.message = problem is None, problem or ""
    else:
        bound = TOLERANCE[dtype] * max(1.0, float(np.abs(want).max()))
        row.passed = row.max_error <= bound
        if not row.passed:
            row.wrong = where_wrong(case, got, want, bound)
            row.message = f"max error {row.max_error:.3g} > {bound:.3g}: {describe(row.wrong)}"
    timing = result.get("timing") or {}
    row.ms, row.dispatches, row.passes_ms = timing.get("ms"), timing.get("dispatches"), timing.get("passes")
    if ort.get("rows"):
        row.ort_max_error = max_error(rows_of(ort["rows"], result["out_type"], case), want)
        row.ort_ms, row.ort_kernels, row.ort_programs = ort.get("ms"), ort.get("kernels"), ort.get("programs")
    return row
