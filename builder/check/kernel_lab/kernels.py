"""The kernels the lab knows, by the name the page's registry (web_src/src/lab/registry.js) uses.

A kernel module has NAME, `cases(shape_set) -> [Case]`, `reference(case, dtype) -> float64 rows` and
`graphs(case) -> {site path: onnx ModelProto}` (onnxruntime's equivalent graphs, written when the lab is built);
optionally `verdict(case, dtype, variant, rows) -> None | what is wrong`, its own check of a variant's output.
docs/kernels.md says how to add one.
"""

from __future__ import annotations

from types import ModuleType

from builder.check.kernel_lab import adaln, attention, linear, qk_norm_rope
from builder.check.kernel_lab.cases import Case
from builder.errors import KernelLabError

MODULES: dict[str, ModuleType] = {module.NAME: module for module in (attention, linear, adaln, qk_norm_rope)}


def all_cases(shape_set: str, *, only: tuple[str, ...] = ()) -> list[Case]:
    """Every kernel's cases at `shape_set` ('small' or 'real'), or only those of the kernels named in `only`."""
    unknown = set(only) - set(MODULES)
    if unknown:
        raise KernelLabError(f"no kernel {', '.join(sorted(unknown))} in the lab; it has {', '.join(sorted(MODULES))}")
    return [case for name, module in MODULES.items() if not only or name in only for case in module.cases(shape_set)]
