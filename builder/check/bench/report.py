"""What `klein-web bench` writes: the results table, bench.md with its method, bench.json, and the environment."""

from __future__ import annotations

import datetime
import json
import platform
import subprocess
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from builder.check.bench.graphs import plain_label
from builder.check.bench.ort_timing import onnxruntime_version
from builder.check.bench.stats import ratio
from builder.repo.files import atomic_write_bytes


def _fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


TABLE_HEADER = (
    "| component | size | ONNX variant | WebGPU EP ms | PyTorch bf16 ms | WebGPU / PyTorch | "
    "WebGPU peak GiB | PyTorch peak GiB | method |"
)


def table_rows(
    rows: Sequence[Mapping[str, Any]], *, ort_label: str = "WebGPU EP", torch_label: str = "PyTorch bf16"
) -> list[str]:
    """Markdown table of result rows (keys: component, size, variant, ort_ms, torch_ms, ort_peak_gib,
    torch_peak_gib, method); the ratio column is computed here so it always matches the two times."""
    header = TABLE_HEADER.replace("WebGPU EP", ort_label).replace("PyTorch bf16", torch_label)
    ort_name = ort_label.split()[0]
    header = header.replace("WebGPU /", ort_name + " /").replace("WebGPU peak", ort_name + " peak")
    header = header.replace("/ PyTorch |", f"/ {torch_label.split()[0]} |")
    lines = [header, "|" + "---|" * TABLE_HEADER.count(" | ") + "---|"]
    for row in rows:
        r = ratio(row.get("ort_ms"), row.get("torch_ms"))
        lines.append(
            f"| {row['component']} | {row['size']} | {row['variant']} | {_fmt(row.get('ort_ms'))} | "
            f"{_fmt(row.get('torch_ms'))} | {'n/a' if r is None else f'{r:.1f}x'} | "
            f"{_fmt(row.get('ort_peak_gib'), 2)} | {_fmt(row.get('torch_peak_gib'), 2)} | {row.get('method', '')} |"
        )
    return lines


def table_labels(environment: Mapping[str, Any]) -> dict[str, str]:
    """Column names that say what actually ran (the CPU smoke run must not read like a GPU benchmark)."""
    gpu = not str(environment.get("gpu", "")).startswith("none")
    return {
        "ort_label": "WebGPU EP" if environment.get("ort provider") == "webgpu" else "ORT CPU EP",
        "torch_label": "PyTorch bf16" if gpu else "PyTorch CPU fp32",
    }


def placement_text(placement: Mapping[str, Any] | None) -> str:
    """'CPU EP: 12 nodes (Shape x8, Gather x4), 0.3 ms' for the table; '' when everything ran on the GPU."""
    if not placement or "error" in placement:
        return "" if not placement else f"placement unknown ({placement['error'][:60]})"
    cpu = placement.get("CPUExecutionProvider")
    if not cpu:
        return "all nodes on the GPU EP"
    ops = ", ".join(f"{op} x{n}" for op, n in sorted(cpu["ops"].items(), key=lambda item: -item[1])[:4])
    return f"CPU EP: {cpu['nodes']} nodes ({ops}), {cpu['ms']:.1f} ms"


def markdown_report(environment: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    env = ", ".join(f"{k} {v}" for k, v in environment.items())
    labels = table_labels(environment)
    return [
        f"klein-web bench ({env})",
        "",
        *table_rows(rows, **labels),
        "",
        (
            "Method: random weights with the real configs; medians after warm-up; WebGPU EP via "
            "onnxruntime-ep-webgpu with numpy I/O (run() returns after read-back); PyTorch bf16 timed with CUDA "
            "events. 'full graph' rows time the whole graph; 'chain' rows are solved from graphs with few layers at "
            "the real width (fixed + per-layer time) and evaluated at the real layer count, and show n/a with "
            "'fit refused' where a layer kind adds no more time between the chains than the samples' spread; see "
            "builder/check/bench/native.py."
        ),
        *fidelity_lines(rows),
    ]


def fidelity_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per fast variant: its relative L2 error against the plain variant on the same inputs."""
    found = [row for row in rows if "rel_err_vs_plain" in row]
    if not found:
        return []
    return [
        "",
        (
            "Fast path vs plain variant, same weights and inputs (relative L2 error of the output, on the "
            "largest graph timed):"
        ),
        *(
            f"- {row['component']} {row['size']}: {row['variant']} vs {plain_label(row['variant'])} "
            f"{row['rel_err_vs_plain']:.2e}"
            for row in found
        ),
    ]


def environment(provider: str, device: str, scale: str) -> dict[str, Any]:
    """What ran: date, scale, library versions, the onnxruntime EP and the GPU (bench.md's first line)."""
    import torch

    env: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "scale": scale,
        "onnxruntime": onnxruntime_version(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    for name in ("onnxruntime_ep_webgpu", "diffusers", "transformers"):
        try:
            env[name] = version(name.replace("_", "-"))
        except PackageNotFoundError:
            env[name] = "not installed"
    env["ort provider"] = provider
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(0)
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                check=False,
                capture_output=True,
                text=True,
                timeout=20,
            )
            env["driver"] = out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            env["driver"] = "unknown"
    else:
        env["gpu"] = "none (CPU smoke run)"
    return env


def write_results(
    out_dir: Path, environment: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], raw: Mapping[str, Any]
) -> None:
    """bench.json (every sample) and bench.md (the table), each written to a temp file and renamed."""
    data = {"environment": dict(environment), "rows": list(rows), "raw": dict(raw)}
    atomic_write_bytes(out_dir / "bench.json", json.dumps(data, indent=1, default=str).encode("utf-8"))
    markdown = "\n".join(markdown_report(environment, rows)) + "\n"
    atomic_write_bytes(out_dir / "bench.md", markdown.encode("utf-8"))
