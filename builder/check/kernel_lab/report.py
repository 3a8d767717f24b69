"""The lab's per-kernel table (stdout) and its JSON record."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from builder.check.kernel_lab.check import Checked


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[Checked]) -> str:
    """Markdown: ms, TFLOP/s, onnxruntime's, ours against it, the errors, the verdict."""
    lines = [
        "| case | dtype | variant | ms | TFLOP/s | onnxruntime ms | its TFLOP/s | ort / ours | max error | ort max error | check |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        speedup = row.ort_ms / row.ms if row.ort_ms and row.ms else None
        verdict = "ok" if row.passed else f"FAIL: {row.message}"
        lines.append(
            f"| {row.id} | {row.dtype} | {row.variant} | {_number(row.ms, '.3f')} | {_number(row.tflops, '.1f')} "
            f"| {_number(row.ort_ms, '.3f')} | {_number(row.ort_tflops, '.1f')} | {_number(speedup, '.2f')} "
            f"| {_number(row.max_error, '.2e')} | {_number(row.ort_max_error, '.2e')} | {verdict} |"
        )
    return "\n".join(lines)


def write_json(
    path: Path, *, env: dict[str, Any], rows: list[Checked], settings: dict[str, Any], error: str | None = None
) -> None:
    """Written whole or not at all (a temporary file renamed into place). `error`: why the run stopped early."""
    data = {
        "settings": settings,
        "error": error,
        "env": env,
        "results": [asdict(row) | {"tflops": row.tflops, "ort_tflops": row.ort_tflops} for row in rows],
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
    os.replace(handle.name, path)
