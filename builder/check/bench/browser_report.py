"""What `klein-web browser-bench` writes and prints: OUT/browser-bench.json and the results table OUT/browser-bench.md,
with the warm reload's timeline, the profiled kernels, and the ratios to a `klein-web bench` run on the same machine
(--native BENCH_JSON).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builder.errors import InputError
from builder.repo import manifest
from builder.repo.files import atomic_write_bytes

JSON_NAME = "browser-bench.json"
MARKDOWN_NAME = "browser-bench.md"


def _native_row(
    native_rows: list[dict[str, Any]], component: str, size: str | None, variant: str
) -> dict[str, Any] | None:
    """The `klein-web bench` row of the graph the browser ran: for the transformer, the row bench marks as the
    app's own (`app_path`: the size class and graph capture the app uses at that size)."""
    for native in native_rows:
        label = str(native.get("variant", ""))
        if native.get("component") != component or (size is not None and native.get("size") != size):
            continue
        if label.split(",")[0].split(" ")[0] != variant:
            continue
        if component == "transformer" and not native.get("app_path"):
            continue
        return native
    return None


def read_native(path: Path) -> list[dict[str, Any]]:
    """The rows of a `klein-web bench` bench.json (InputError when it is missing or not one)."""
    if not path.is_file():
        raise InputError(f"--native {path}: no such file (it is the bench.json `klein-web bench` writes).")
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        raise InputError(
            f"--native {path} is not readable JSON ({type(exc).__name__}); pass the bench.json "
            "`klein-web bench` writes."
        ) from None
    rows = data.get("rows", []) if isinstance(data, dict) else data
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise InputError(f"--native {path} has no list of result rows; pass the bench.json `klein-web bench` writes.")
    return rows


def native_ratios(rows: list[dict[str, Any]], native_json: Path | None) -> dict[str, Any]:
    """Browser / native EP and browser / PyTorch for the step, text encoder and VAE, from a bench.json."""
    if native_json is None:
        return {}
    native_rows = read_native(Path(native_json))
    ratios: dict[str, Any] = {}
    for row in rows:
        if row["phase"] != "hot":
            continue
        side = row["size"].split("x")[0]
        wanted = (
            ("transformer step", "transformer", f"{side}x{side}", row["step_ms"]),
            ("text encoder", "text_encoder", None, row["encode_ms"]),
            ("VAE decoder", "vae_decoder", f"{side}x{side}", row["decode_ms"]),
        )
        for label, component, size, browser_ms in wanted:
            native = _native_row(native_rows, component, size, row["variants"].get(component, ""))
            if native is None or browser_ms is None:
                continue
            ratios[f"{row['variant']} {row['size']} {label}"] = {
                "browser_ms": browser_ms,
                "native_ms": native.get("ort_ms"),
                "torch_ms": native.get("torch_ms"),
                "browser_over_native": browser_ms / native["ort_ms"] if native.get("ort_ms") else None,
                "browser_over_torch": browser_ms / native["torch_ms"] if native.get("torch_ms") else None,
            }
    return ratios


# Kernel programs listed per component in the report (the JSON keeps what the app reported).
KERNELS_IN_REPORT = 12


def kernel_lines(row: dict[str, Any]) -> list[str]:
    """A profiled row's kernel times as markdown: per component, its GPU time per run, then its top programs."""
    lines: list[str] = []
    for component, times in (row.get("kernels") or {}).items():
        lines += [
            "",
            (
                f"{row['variant']} {row['size']} {component}: GPU {times['gpuMs']:.1f} ms per run "
                f"({times['runs']} run(s); {times['runMs']:.1f} ms per run inside onnxruntime, of which "
                f"{times['hostMs']:.1f} ms preparing the GPU nodes and {times['cpuNodeMs']:.1f} ms in "
                "CPU-placed nodes)"
            ),
            "",
            "| op | program | calls | GPU ms | share |",
            "|---|---|---|---|---|",
        ]
        for kernel in times["kernels"][:KERNELS_IN_REPORT]:
            lines.append(
                f"| {kernel['op']} | {kernel['program']} | {kernel['calls']:.0f} | {kernel['gpuMs']:.2f} | "
                f"{100 * kernel['share']:.1f}% |"
            )
    return lines


def timeline_lines(row: dict[str, Any]) -> list[str]:
    """Where a run's time went, as markdown: before the request (a reload's page and worker), then each thing the
    app did (its stages, files read, sessions created, runs to their outputs) from the request's start; loading
    overlaps, so the rows overlap."""
    head = (
        f"{row['variant']} {row['size']} {row['phase']}: {row['seconds']:.2f} s to the image, of which "
        f"{row['before_request_s']:.2f} s before the app's request (page load, worker start)"
    )
    lines = [head, "", "| what | from s | to s | s |", "|---|---|---|---|"]
    for event in row.get("timeline") or []:
        start, end = event["startMs"] / 1000, event["endMs"] / 1000
        lines.append(f"| {event['what']} | {start:.2f} | {end:.2f} | {end - start:.2f} |")
    return lines


def step_runner(step: dict[str, Any] | None) -> str:
    """What ran the transformer's steps, as the report prints it: 'our kernels (int8-matrix, …; 293 dispatches)' or
    'onnxruntime'; 'n/a' for an app that does not say."""
    if not step:
        return "n/a"
    if step.get("runner") == "kernels":
        return f"our kernels ({step.get('kernels')}; {step.get('dispatches')} dispatches)"
    return "onnxruntime" + (f" ({step['why']})" if step.get("why") else "")


def markdown(environment: dict[str, Any], rows: list[dict[str, Any]], ratios: dict[str, Any]) -> list[str]:
    lines = [
        (
            f"{environment['adapter']} · {environment['browser']} · onnxruntime-web {environment['onnxruntime_web']} · "
            f"{environment['date']}"
        ),
        "",
        (
            "| variant | size | phase | to image s | image s | encode ms | first step ms | step ms | preview ms/step | "
            "decode ms | load s (TE / DiT / VAE) | fetched GB | store GB/s | GPU GiB | renderer GiB | GPU proc GiB | "
            "wasm GiB | steps on |"
        ),
        "|" + "---|" * 18,
    ]

    def num(value: Any, digits: int = 0) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    for r in rows:
        loads = " / ".join(num(r["load_s"].get(c), 1) for c in manifest.COMPONENTS)
        rss = r["memory"]["rss_gib"]
        lines.append(
            f"| {r['variant']}{' lean' if r.get('memory_mode') == 'lean' else ''} | {r['size']} | {r['phase']} | "
            f"{num(r['seconds'], 1)} | {num(r['image_s'], 2)} | "
            f"{num(r['encode_ms'])} | {num(r['first_step_ms'])} | {num(r['step_ms'])} | {num(r.get('preview_ms'), 2)} | "
            f"{num(r['decode_ms'])} | "
            f"{loads} | {num(r['bytes_fetched'] / 1e9, 2)} | {num(r['store_gb_per_s'], 2)} | "
            f"{num(r['memory']['gpu_gib'], 1)} | {num(rss.get('renderer'), 1)} | {num(rss.get('gpu-process'), 1)} | "
            f"{num(r['wasm_heap_gib'], 2)} | {step_runner(r.get('step'))} |"
        )
    if ratios:
        lines += [
            "",
            "| what (hot) | browser ms | native EP ms | PyTorch bf16 ms | browser / native | browser / PyTorch |",
            "|---|---|---|---|---|---|",
        ]
        for label, ratio in ratios.items():
            lines.append(
                f"| {label} | {num(ratio['browser_ms'])} | {num(ratio['native_ms'])} | "
                f"{num(ratio['torch_ms'])} | {num(ratio['browser_over_native'], 2)}x | "
                f"{num(ratio['browser_over_torch'], 2)}x |"
            )
    for row in rows:
        if row["phase"] == "warm reload" and row.get("timeline"):
            lines += ["", f"## Warm reload: {row['variant']} {row['size']}", "", *timeline_lines(row)]
    for row in rows:
        if row.get("kernels"):
            lines += ["", f"## Kernels: {row['variant']} {row['size']} (profiled, uncaptured)", *kernel_lines(row)]
    return lines


def save_results(
    out_dir: Path, environment: dict[str, Any], rows: list[dict[str, Any]], ratios: dict[str, Any]
) -> None:
    """Written after every variant, so an interrupted run keeps what it measured."""
    out_dir = Path(out_dir)
    payload = {"environment": environment, "rows": rows, "ratios": ratios}
    atomic_write_bytes(out_dir / JSON_NAME, (json.dumps(payload, indent=1) + "\n").encode("utf-8"))
    atomic_write_bytes(out_dir / MARKDOWN_NAME, ("\n".join(markdown(environment, rows, ratios)) + "\n").encode("utf-8"))
