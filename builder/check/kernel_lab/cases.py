"""What the lab's page is given: one Case per kernel and shape, as cases.json (web_src/src/lab/registry.js reads it).

The page runs each case in every dtype of `dtypes` the device has and every variant of the kernel the device runs,
and sends back the output's `rows` (rows of its last axis). `spec` goes to the kernel's factory; `expect` to the
numpy reference (normally both empty: a test makes them disagree to see the check fail).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from builder.check.kernel_lab import prng


@dataclass(frozen=True)
class Tensor:
    """An input (values from the page's PRNG) or the output. `type`: 'act' (the run's dtype), 'f16', 'f32', 'u32'."""

    name: str
    dims: tuple[int, ...]
    type: str = "act"
    seed: int = 0
    scale: float = 1.0
    offset: float = 0.0

    @property
    def count(self) -> int:
        return int(np.prod(self.dims))

    def values(self, dtype: str) -> np.ndarray:
        """The input as the page uploads it, in float64 (u32: the raw words), shaped `dims`."""
        kind = dtype if self.type == "act" else self.type
        if kind == "u32":
            return prng.random_words(self.seed, self.count).reshape(self.dims)
        values = prng.random_floats(self.seed, self.count, scale=self.scale, offset=self.offset)
        return prng.stored(values, kind).reshape(self.dims)


@dataclass(frozen=True)
class OrtGraph:
    """onnxruntime-web's equivalent: a graph file per dtype (site-relative), its input dims, its output name."""

    graphs: dict[str, str]
    feeds: dict[str, tuple[int, ...]]
    output: str
    runs: int = 3


@dataclass(frozen=True)
class Case:
    id: str
    kernel: str
    shape: dict[str, int]
    inputs: tuple[Tensor, ...]
    output: Tensor
    rows: tuple[int, ...]
    dtypes: tuple[str, ...] = ("f16", "f32")
    spec: dict[str, Any] = field(default_factory=dict)
    expect: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, float] | None = None
    ort: OrtGraph | None = None
    flops: float = 0.0  # the kernel's arithmetic (for TFLOP/s), from its module

    def input(self, name: str) -> Tensor:
        return next(t for t in self.inputs if t.name == name)

    def page_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("expect")
        data.pop("flops")
        return data


def sample_rows(total: int, *, limit: int, seed: int) -> tuple[int, ...]:
    """Every row when there are at most `limit`; else the first, the last and a seeded sample between."""
    if total <= limit:
        return tuple(range(total))
    rng = np.random.default_rng(seed)
    middle = rng.choice(np.arange(1, total - 1), size=limit - 2, replace=False)
    return tuple(int(r) for r in sorted({0, total - 1, *middle.tolist()}))


def timing(shape_set: str) -> dict[str, float] | None:
    """Timed on the GPU (median of 5 passes of ~60 ms each); SwiftShader's times mean nothing, so none there."""
    return {"passes": 5, "targetMs": 60} if shape_set == "real" else None
