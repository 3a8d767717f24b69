"""`klein-web bench`: the WebGPU EP against native PyTorch bf16 on the same GPU, on a random-weight klein.

What one run measures (`main`), for the q4 and q4f16 graphs (`klein-web convert --precision q4f16` writes both):

    text encoder   Qwen3-4B width, the 27 layers the prompt-embedding graph runs, 512 tokens, timed whole
    transformer    one denoising step at 512x512 (1024 image tokens) and 1024x1024 (4096), 512 text tokens
    VAE decoder    the whole decoder at 512x512 (the q4 repo's fp16 graph and its fp32 fallback)

each on (a) onnxruntime with the WebGPU plugin EP (`onnxruntime-ep-webgpu`, Dawn on Vulkan: the same
kernels onnxruntime-web runs in a browser; check/bench/ort_timing.py) and (b) PyTorch bf16 through
diffusers/transformers (check/bench/models.py).

Method (the numbers are only meaningful with it, so bench.md repeats it):
  * Random weights with the real configs: speed does not depend on the weight values, and the Hub is not needed.
  * The text encoder and the VAE are timed whole: their graphs fit any GPU the app runs on.
  * Layer chains for the transformer. Exporting and quantising the full transformer takes longer than a bench run
    should, so graphs with few blocks at the real width are built (check/bench/graphs.py: 0+1, 1+1 and 0+2
    double+single blocks, each under protobuf's 2 GB in fp32), and time = fixed + sum(blocks x per-block) is solved
    from them and evaluated at the real block counts (check/bench/stats.py). Differences of chain lengths also
    cancel the upload and read-back that every timed run includes. A fit is refused, and its row says why with no
    figure, when a per-block time is not positive or the blocks add less time between the chains than the spread
    of the chains' samples (stats.fit_chains). PyTorch is measured on the same chains AND on the full model,
    so the extrapolation's error is shown next to the figures.
  * Medians over `repeats` runs after `warmup` runs. Each onnxruntime graph runs in its own subprocess
    (a crash or hang of the EP costs one row, and GPU memory is clean for the next).
  * Peak GPU memory: PyTorch's max_memory_allocated on the full model; for the WebGPU EP, the peak of
    NVML's device memory in use above the level before the session (check/driver/memory.py), measured on
    the longest chain and extrapolated with the graphs' weight bytes on disk.

Without a WebGPU adapter the bench says so and runs onnxruntime's CPU EP and torch on the CPU instead: a smoke
test of the whole path, not a benchmark.

The app's own overhead in the browser (`--browser-overhead`) is check/bench/overhead.py's.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.check.bench.graphs import (
    CAPTURE,
    app_choice,
    export_graphs,
    fast_path_fidelity,
    graph_bytes,
    timed_transformers,
)
from builder.check.bench.models import (
    COMPONENTS,
    SCALES,
    Scale,
    build_module,
    make_inputs,
    release_torch,
    time_torch,
    torch_callable,
)
from builder.check.bench.ort_timing import time_ort, webgpu_status
from builder.check.bench.report import environment, placement_text, table_labels, table_rows, write_results
from builder.check.bench.stats import extrapolate, fit_chains, median_ms
from builder.errors import BenchError, InputError

Log = Callable[[str], None]


@dataclass
class BenchRun:
    """One bench run: its settings, and the rows and raw samples gathered so far."""

    out_dir: Path
    scale: Scale
    provider: str
    device: str
    warmup: int
    repeats: int
    timeout_s: float
    log: Log
    precisions: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)


def main(
    out_dir: Path,
    *,
    log: Log,
    scale: str = "full",
    components: Sequence[str] = COMPONENTS,
    provider: str = "auto",
    warmup: int = 2,
    repeats: int = 5,
    timeout_s: float = 180.0,
    workdir: Path | None = None,
) -> list[dict[str, Any]]:
    """Run the benchmark; write OUT/bench.json and OUT/bench.md after every component; return the rows."""
    import torch

    # 1. Check the options before anything slow starts.
    if scale not in SCALES:
        raise InputError(f"--scale {scale!r} is not one of {', '.join(SCALES)}: 'full' on a GPU, 'tiny' to smoke-test.")
    unknown = [c for c in components if c not in COMPONENTS]
    if unknown or not components:
        raise InputError(f"--components {','.join(components)}: choose from {', '.join(COMPONENTS)}.")
    if provider not in ("auto", "webgpu", "cpu"):
        raise InputError(f"--provider {provider!r}: use auto (WebGPU if an adapter exists, else CPU), webgpu or cpu.")
    if warmup < 0 or repeats < 1:
        raise InputError(f"--warmup {warmup} / --repeats {repeats}: need warmup >= 0 and repeats >= 1.")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    # 2. Which onnxruntime EP and which torch device the machine offers.
    reason = webgpu_status() if provider in ("auto", "webgpu") else "not asked for"
    if provider == "webgpu" and reason:
        raise BenchError(reason)
    chosen = "webgpu" if reason is None else "cpu"
    if chosen == "cpu":
        log(f"bench: no WebGPU EP ({reason}); timing onnxruntime's CPU EP instead: a smoke test, not a benchmark.")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        log("bench: no CUDA device; PyTorch runs float32 on the CPU (smoke test).")
    # A q4f16 repo holds the q4 graphs too (one quantisation for both).
    precisions = ["q4f16"]
    run = BenchRun(out_dir, SCALES[scale](), chosen, device, warmup, repeats, timeout_s, log, precisions)
    env = environment(chosen, device, run.scale.name)
    log("bench: " + ", ".join(f"{k} {v}" for k, v in env.items()))

    # 3. One component at a time; results are saved after each so a cut-off run keeps what it measured.
    with tempfile.TemporaryDirectory(prefix="klein-bench-", dir=workdir) as tmp:
        for component in components:
            began = time.monotonic()
            log(f"bench: {component} ({', '.join(precisions)})")
            try:
                bench_component(run, component, Path(tmp))
            except Exception as exc:  # noqa: BLE001 -- keep the other components' figures
                run.raw[f"error {component}"] = f"{type(exc).__name__}: {exc}"
                log(f"bench: {component} failed: {type(exc).__name__}: {exc}")
            write_results(run.out_dir, env, run.rows, run.raw)
            log(f"bench: {component} done in {time.monotonic() - began:.0f} s")
    for line in table_rows(run.rows, **table_labels(env)):
        log(line)
    return run.rows


def bench_component(run: BenchRun, component: str, workdir: Path) -> None:
    """Export the chains, time them on onnxruntime and PyTorch, extrapolate, append table rows."""
    import numpy as np
    import torch

    scale, log = run.scale, run.log
    dtype = torch.bfloat16 if run.device.startswith("cuda") else torch.float32
    if component == "text_encoder":
        chains: list[tuple[int, ...] | None] = list(scale.text_chains)
        full: tuple[int, ...] | None = (scale.text_layers,)
        sizes: list[int | None] = [None]
    elif component == "transformer":
        chains, full, sizes = list(scale.transformer_chains), scale.transformer_layers, list(scale.resolutions)
    else:
        chains, full, sizes = [None], None, [scale.vae_resolution]
    size_text = {s: (f"{scale.txt_seq} tokens" if s is None else f"{s}x{s}") for s in sizes}
    inputs = {s: make_inputs(scale, component, s) for s in sizes}
    npz = {}
    for s, feeds in inputs.items():
        npz[str(s)] = workdir / f"{component}-{s}.npz"
        np.savez(npz[str(s)], **feeds)

    # ONNX side: per chain, every variant, each in its own subprocess. Samples are kept per chain: the fit's
    # soundness rule needs their spread.
    ort_samples: dict[tuple[str, str], dict[tuple[int, ...], list[float]]] = {}
    ort_peak: dict[str, tuple[tuple[int, ...], int | None]] = {}
    ort_bytes: dict[str, dict[tuple[int, ...], int]] = {}
    ort_place: dict[str, str] = {}
    fidelity: dict[tuple[str, str], float] = {}  # (fast variant, size) -> relative L2 error; last chain wins
    for chain in chains:
        began = time.monotonic()
        folder = workdir / f"{component}-{'-'.join(map(str, chain or ()))}"
        graphs = export_graphs(scale, component, chain, folder, precisions=run.precisions, log=lambda _m: None)
        log(f"  {component} {chain or 'full'}: exported {', '.join(graphs)} in {time.monotonic() - began:.0f} s")
        timed = timed_transformers(scale, sizes, graphs) if component == "transformer" else set(graphs)
        for label, graph in graphs.items():
            if label not in timed:
                continue
            # The denoising loop is the one graph run many times at one shape: the app captures it.
            capture = component == "transformer" and run.provider == "webgpu"
            result = time_ort(
                graph,
                npz,
                provider=run.provider,
                warmup=run.warmup,
                repeats=run.repeats,
                timeout_s=run.timeout_s,
                workdir=workdir,
                capture=capture,
            )
            run.raw[f"ort {component} {label} {chain}"] = result
            if "error" in result:
                log(f"  {component} {label} {chain}: onnxruntime failed: {result['error']}")
                continue
            weight_bytes = graph_bytes(graph)
            modes: dict[str, tuple[Callable[[dict[str, Any]], dict[str, Any]], str]] = {
                label: (lambda m: m, "peak_bytes")
            }
            if capture:
                modes[label + CAPTURE] = (lambda m: m.get("capture", {"error": "not run"}), "capture_peak_bytes")
            for name, (pick, peak_key) in modes.items():
                for s in sizes:
                    measured = pick(result["results"][str(s)])
                    if "median_ms" in measured:
                        ort_samples.setdefault((name, str(s)), {})[tuple(chain or ())] = measured["samples_ms"]
                ort_bytes.setdefault(name, {})[tuple(chain or ())] = weight_bytes
                ort_peak[name] = (tuple(chain or ()), result.get(peak_key))  # the last chain's peak
                ort_place[name] = placement_text(result.get("placement"))
                log(
                    f"  {component} {name} {chain}: "
                    + ", ".join(
                        f"{size_text[s]} "
                        + (f"{m['median_ms']:.1f} ms" if "median_ms" in m else f"failed: {m['error']}")
                        + (
                            f" (replay vs plain max |diff| {m['max_abs_diff_vs_plain']:.2e} of {m['max_abs_plain']:.2e}, "
                            f"first run {m['first_run_ms']:.0f} ms)"
                            if "max_abs_diff_vs_plain" in m
                            else ""
                        )
                        for s in sizes
                        for m in [pick(result["results"][str(s)])]
                    )
                    + (f" [{'; '.join(result['notes'])}]" if result.get("notes") else "")
                )
        fidelity.update(fast_path_fidelity(graphs, sizes))
        run.raw[f"fidelity {component} {chain}"] = {f"{k[0]} {k[1]}": v for k, v in fidelity.items()}
        _release_files(folder)

    # PyTorch side: the same chains, then the full model (once where the chain is the full model).
    torch_samples: dict[str, dict[tuple[int, ...], list[float]]] = {}
    torch_full: dict[str, dict[str, Any]] = {}
    for chain in dict.fromkeys([*(c for c in chains if c is not None), full]):
        module = build_module(scale, component, chain, device=run.device).to(dtype)
        for s in sizes:
            call = torch_callable(
                component,
                module,
                inputs[s],
                device=run.device,
                dtype=dtype,
                layers=chain[0] if component == "text_encoder" and chain else None,
            )
            measured = time_torch(call, device=run.device, warmup=run.warmup, repeats=run.repeats)
            run.raw[f"torch {component} {s} {chain}"] = measured
            if chain == full:
                torch_full[str(s)] = measured
            else:
                torch_samples.setdefault(str(s), {})[tuple(chain or ())] = measured["samples_ms"]
        del module
        release_torch(run.device)
    log(
        f"  {component}: PyTorch "
        + ", ".join(f"{size_text[s]} {torch_full[str(s)]['median_ms']:.1f} ms" for s in sizes)
    )

    # Rows: measured where the whole graph was timed, else extrapolated from the chains where the fit is sound.
    kinds = ("layer",) if component == "text_encoder" else ("double block", "single block")
    for (label, key), points in sorted(ort_samples.items()):
        size = None if key == "None" else int(key)
        torch_ms = torch_full[key]["median_ms"]
        row: dict[str, Any] = {
            "component": component,
            "size": size_text[size],
            "variant": label,
            "torch_ms": torch_ms,
            "torch_peak_gib": torch_full[key]["peak_gib"],
        }
        peak_chain, peak = ort_peak.get(label, ((), None))
        place = f"; {ort_place[label]}" if ort_place.get(label) else ""
        whole = () if full is None else tuple(full)
        if whole in points:
            layers = "" if full is None else f" ({'+'.join(map(str, full))} layers)"
            row.update(ort_ms=median_ms(points[whole]), method=f"full graph{layers}{place}")
            row["ort_peak_gib"] = None if peak is None else peak / 2**30
        elif full is None or len(points) < len(chains):
            row.update(ort_ms=None, ort_peak_gib=None, method=f"onnxruntime failed on some chains: {sorted(points)}")
        else:
            # Peak = the last chain's measured peak + the weight bytes the missing layers add (graph bytes on
            # disk, extrapolated like the times).
            full_bytes, _ = extrapolate(ort_bytes[label], full)
            missing = full_bytes - ort_bytes[label][peak_chain]
            row["ort_peak_gib"] = None if peak is None else (peak + missing) / 2**30
            row["ort_weights_gib"] = full_bytes / 2**30
            row.update(chain_figures(points, torch_samples[key], full, kinds=kinds, torch_ms=torch_ms))
            row["method"] += place
        if (label, key) in fidelity:
            row["rel_err_vs_plain"] = fidelity[(label, key)]
        if component == "transformer" and label == app_choice(scale, size, label.split(",")[0]) + CAPTURE:
            row["app_path"] = True  # browser-bench pairs its hot step with this row
            row["method"] = "**what the app runs at this size**; " + row.get("method", "")
        run.rows.append(row)


def chain_figures(
    points: Mapping[tuple[int, ...], Sequence[float]],
    torch_points: Mapping[tuple[int, ...], Sequence[float]],
    full: tuple[int, ...],
    *,
    kinds: Sequence[str],
    torch_ms: float,
) -> dict[str, Any]:
    """The row fields of a graph timed as chains (samples per chain): ort_ms and per_layer_ms where the fit is
    sound; else ort_ms None, fit_refused and a method that says why, with the chains' medians."""
    fit = fit_chains(points, full, kinds=kinds)
    torch_fit = fit_chains(torch_points, full, kinds=kinds)
    chain_text = f"chain {'/'.join('+'.join(map(str, p)) for p in points)} -> {'+'.join(map(str, full))} layers"
    torch_text = (
        f"PyTorch extrapolated the same way: {torch_fit.total_ms:.1f} ms vs measured {torch_ms:.1f}"
        if torch_fit.refused is None
        else f"PyTorch's own chain fit refused: {torch_fit.refused}"
    )
    if fit.refused is None:
        return {"ort_ms": fit.total_ms, "per_layer_ms": fit.coef[1:], "method": f"{chain_text} ({torch_text})"}
    medians = ", ".join(f"{'+'.join(map(str, chain))}: {median_ms(values):.1f} ms" for chain, values in points.items())
    return {
        "ort_ms": None,
        "fit_refused": fit.refused,
        "method": (
            f"{chain_text}: **fit refused**, {fit.refused} (chain medians {medians}; rerun with more "
            f"--repeats on an idle device) ({torch_text})"
        ),
    }


def _release_files(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
