"""The bench's arithmetic: medians of timed runs, ratios, and the layer-chain extrapolation."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from builder.errors import BenchError


def median_ms(samples: Sequence[float]) -> float:
    if not samples:
        raise BenchError("No timing samples: every run failed or repeats was 0.")
    return float(statistics.median(samples))


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def extrapolate(points: Mapping[tuple[int, ...], float], full: tuple[int, ...]) -> tuple[float, list[float]]:
    """Solve time = fixed + sum(layers_i * per_layer_i) from chain measurements; return (time at `full`,
    [fixed, per_layer_0, ...]). Needs one more point than layer kinds, with independent layer counts."""
    import numpy as np

    keys = list(points)
    if not keys or any(len(k) != len(full) for k in keys):
        raise BenchError(f"Chain points {keys} do not match the layer kinds of {full}.")
    design = np.array([[1.0, *k] for k in keys])
    if len(keys) < len(full) + 1 or np.linalg.matrix_rank(design) < len(full) + 1:
        raise BenchError(f"Chain points {keys} cannot separate fixed and per-layer time; vary each layer kind.")
    coef, *_ = np.linalg.lstsq(design, np.array([points[k] for k in keys]), rcond=None)
    return float(coef[0] + np.dot(coef[1:], full)), [float(c) for c in coef]
