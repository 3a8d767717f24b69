"""The bench's arithmetic: medians of timed runs, ratios, and the layer-chain extrapolation with its soundness rule."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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


@dataclass(frozen=True)
class ChainFit:
    """The chain extrapolation of one graph: the time at the real layer counts, [fixed, per_layer_0, ...], and
    `refused`: why the fit is not a measurement (None when it is sound)."""

    total_ms: float
    coef: list[float]
    refused: str | None


def fit_chains(
    samples: Mapping[tuple[int, ...], Sequence[float]], full: tuple[int, ...], *, kinds: Sequence[str] | None = None
) -> ChainFit:
    """extrapolate() on the chains' medians, refused unless every layer kind adds time above the noise.

    A fit is sound when each per-layer time is positive and the time it puts between the shortest and the longest
    chain of that kind is wider than the spread (max - min) of every chain's samples. A
    chain that times noisier than its layers cost gives a slope that is noise: it can come out negative, and
    multiplied by 27 layers it prints a meaningless figure."""
    if not samples or any(not values for values in samples.values()):
        raise BenchError(f"Chain samples {dict(samples)}: every chain needs timing samples.")
    total, coef = extrapolate({chain: median_ms(values) for chain, values in samples.items()}, full)
    spread = max(max(values) - min(values) for values in samples.values())
    names = list(kinds) if kinds is not None else [f"layer kind {i}" for i in range(len(full))]
    problems = []
    for i, per_layer in enumerate(coef[1:]):
        counts = [chain[i] for chain in samples]
        between = per_layer * (max(counts) - min(counts))
        if per_layer <= 0:
            problems.append(f"per-{names[i]} time {per_layer:.2f} ms is not positive")
        elif between <= spread:
            problems.append(
                f"the {names[i]}s add {between:.2f} ms between the chains, within the samples' "
                f"spread of {spread:.2f} ms"
            )
    return ChainFit(total, coef, "; ".join(problems) or None)
