"""Timing ONNX graphs on onnxruntime's WebGPU plugin EP (or its CPU EP), one subprocess per graph.

`time_ort()` is what the bench and scripts/ call: it writes a TimingSpec, runs `python -m builder.check.bench.ort_timing
SPEC` (so a crash or hang of the EP costs one row, and GPU memory is clean for the next graph) and returns the
worker's result. `webgpu_device()`, `session_options()` and `time_captured()` are the same building blocks for
scripts that time graphs in their own process.

session.run() with numpy inputs and outputs returns only once the results are back on the CPU, so wall-clock
time is GPU time plus the copies; a captured session copies its bound outputs back inside each timed run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from builder.check.bench.stats import median_ms
from builder.check.driver.memory import GpuMemorySampler
from builder.errors import BenchError


@dataclass(frozen=True)
class TimingSpec:
    """What the worker subprocess times, passed to it as JSON."""

    graph: str
    inputs: dict[str, str]  # input-set key (the image size) -> .npz of the feeds
    provider: str  # "webgpu" or "cpu"
    warmup: int
    repeats: int
    result: str  # the JSON file the worker writes
    outputs: str  # prefix of the .npy files keeping each input set's first output (fidelity figures)
    capture: bool = False  # also time each input set in a graph-capture session (time_captured)


def onnxruntime_version() -> str:
    import onnxruntime as ort

    return str(ort.__version__)


def webgpu_status() -> str | None:
    """None when the WebGPU plugin EP finds an adapter; otherwise the reason, worded for the user."""
    try:
        webgpu_device()
    except BenchError as exc:
        return str(exc)
    return None


def webgpu_device() -> Any:
    """The OrtEpDevice of the WebGPU plugin EP (`onnxruntime-ep-webgpu`), registering the plugin on first use."""
    import onnxruntime as ort

    try:
        import onnxruntime_ep_webgpu as webgpu_ep
    except ImportError:
        raise BenchError(
            "onnxruntime-ep-webgpu is not installed: `pip install onnxruntime-ep-webgpu==0.4.0` "
            "(needs onnxruntime >= 1.24.4)."
        ) from None
    name = webgpu_ep.get_ep_name()
    if not any(d.ep_name == name for d in ort.get_ep_devices()):
        try:
            ort.register_execution_provider_library("webgpu", webgpu_ep.get_library_path())
        except Exception as exc:  # the plugin reports version mismatches here
            raise BenchError(f"The WebGPU plugin EP did not load: {exc}") from exc
    device = next((d for d in ort.get_ep_devices() if d.ep_name == name), None)
    if device is None:
        raise BenchError(
            "The WebGPU plugin EP found no adapter. On Linux it needs the Vulkan loader "
            "(libvulkan1) and the GPU driver's ICD; set VK_DRIVER_FILES to the driver's "
            "nvidia_icd.json if the loader does not find it."
        )
    return device


def session_options(provider: str, *, cpu_fallback: bool = False) -> Any:
    """SessionOptions for `provider`; on WebGPU every node must run on the GPU unless `cpu_fallback`."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if provider == "webgpu":
        options.add_provider_for_devices([webgpu_device()], {})
        if not cpu_fallback:
            # Every node on the GPU, or the session fails: a silent CPU fallback would make the figure a lie.
            options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    return options


def _session(graph: str, provider: str, options: Any) -> Any:
    import onnxruntime as ort

    providers = None if provider == "webgpu" else ["CPUExecutionProvider"]
    return ort.InferenceSession(graph, sess_options=options, providers=providers)


def _feeds(npz: str) -> dict[str, Any]:
    import numpy as np

    with np.load(npz) as data:
        return {name: data[name] for name in data.files}


def time_ort(
    graph: Path,
    inputs: Mapping[str, Path],
    *,
    provider: str,
    warmup: int,
    repeats: int,
    timeout_s: float,
    workdir: Path,
    capture: bool = False,
) -> dict[str, Any]:
    """Time `graph` on each input set in a worker subprocess; a crash or timeout becomes {"error": ...} instead
    of ending the bench. The result: {"results": {key: {"median_ms", "samples_ms", "finite"[, "capture"]}},
    "peak_bytes", "capture_peak_bytes", "load_s", "notes", "placement"}."""
    spec = TimingSpec(
        graph=str(graph),
        inputs={k: str(v) for k, v in inputs.items()},
        provider=provider,
        warmup=warmup,
        repeats=repeats,
        result=str(workdir / f"result-{os.getpid()}.json"),
        outputs=str(graph.with_suffix("")),
        capture=capture,
    )
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(asdict(spec)))
    result = Path(spec.result)
    result.unlink(missing_ok=True)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "builder.check.bench.ort_timing", str(spec_path)],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    if proc.returncode != 0 or not result.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {proc.returncode}: {' | '.join(reversed(tail))[:400]}"}
    return dict(json.loads(result.read_text()))


def time_graph(spec: TimingSpec) -> dict[str, Any]:
    """The worker's body: time one graph on each input set of the spec (then, with spec.capture, again in a
    graph-capture session), sample GPU memory, and profile where the nodes ran."""
    import numpy as np

    sampler = GpuMemorySampler.on_this_machine().start()
    notes = []
    began = time.perf_counter()
    try:
        session = _session(spec.graph, spec.provider, session_options(spec.provider))
    except Exception as exc:  # onnxruntime and the EP raise plain exceptions
        if spec.provider != "webgpu":
            raise
        notes.append(f"with CPU fallback ({str(exc).splitlines()[0][:160]})")
        session = _session(spec.graph, spec.provider, session_options(spec.provider, cpu_fallback=True))
    load_s = time.perf_counter() - began
    results: dict[str, Any] = {}
    plain_outputs: dict[str, Any] = {}
    for key, npz in spec.inputs.items():
        feeds = _feeds(npz)
        try:  # one size failing (e.g. a buffer over the adapter's limit) must not cost the others
            for _ in range(spec.warmup):
                session.run(None, feeds)
            samples = []
            for _ in range(spec.repeats):
                start = time.perf_counter()
                outputs = session.run(None, feeds)  # numpy outputs: returns once results are read back
                samples.append((time.perf_counter() - start) * 1000)
        except Exception as exc:  # noqa: BLE001 -- onnxruntime and the EP raise plain exceptions
            results[key] = {"error": str(exc).splitlines()[0][:300]}
            continue
        finite = bool(np.isfinite(outputs[0]).all())
        results[key] = {"median_ms": median_ms(samples), "samples_ms": samples, "finite": finite}
        plain_outputs[key] = outputs
        np.save(f"{spec.outputs}-{key}.npy", outputs[0])  # for the fast-vs-plain fidelity figures
    peak = sampler.stop()
    del session
    capture_peak = None
    if spec.capture:
        sampler = GpuMemorySampler.on_this_machine().start()
        for key, npz in spec.inputs.items():
            if key not in plain_outputs:
                continue
            try:
                results[key]["capture"] = time_captured(
                    spec.graph, _feeds(npz), plain_outputs[key], warmup=spec.warmup, repeats=spec.repeats
                )
            except Exception as exc:  # noqa: BLE001 -- onnxruntime and the EP raise plain exceptions
                results[key]["capture"] = {"error": str(exc).splitlines()[0][:300]}
        capture_peak = sampler.stop()
    placement = node_placement(spec, cpu_fallback=bool(notes))
    return {
        "results": results,
        "peak_bytes": peak,
        "load_s": load_s,
        "capture_peak_bytes": capture_peak,
        "notes": notes,
        "placement": placement,
    }


def time_captured(
    graph: str, feeds: Mapping[str, Any], expected: Sequence[Any], *, warmup: int, repeats: int
) -> dict[str, Any]:
    """Time one graph in a WebGPU session with graph capture, as the app runs the denoising loop: inputs
    live in GPU buffers, the first run records every kernel and later runs replay the recording without
    the EP's per-kernel host work. Each timed run includes the read-back of the outputs (run() returns
    before the GPU finishes when outputs stay on the device). The replayed outputs are compared with the
    plain session's (`expected`): a capture that replays stale or wrong buffers must not pass as fast."""
    import numpy as np
    import onnxruntime as ort

    device = webgpu_device()
    options = ort.SessionOptions()
    options.add_provider_for_devices([device], {"enableGraphCapture": "1"})
    # Pinning the symbolic dims lets onnxruntime fold the shape arithmetic into constants; otherwise it
    # runs on the CPU EP with copies to the GPU, and a session with copies cannot capture.
    for name, value in free_dimensions(graph, feeds).items():
        options.add_free_dimension_override_by_name(name, value)
    session = ort.InferenceSession(graph, sess_options=options)
    memory = device.memory_info(ort.OrtDeviceMemoryType.DEFAULT)
    binding = session.io_binding()
    keep = []  # the device values must outlive the binding
    for name, array in feeds.items():
        value = ort.OrtValue.ortvalue_from_shape_and_type(list(array.shape), array.dtype, memory_info=memory)
        ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array))], [value])
        binding.bind_ortvalue_input(name, value)
        keep.append(value)
    for meta, array in zip(session.get_outputs(), expected, strict=False):
        value = ort.OrtValue.ortvalue_from_shape_and_type(list(array.shape), array.dtype, memory_info=memory)
        binding.bind_ortvalue_output(meta.name, value)
        keep.append(value)

    def step() -> list[Any]:
        session.run_with_iobinding(binding)
        return list(binding.copy_outputs_to_cpu())

    began = time.perf_counter()
    first = step()  # the normal run and the capture run
    capture_ms = (time.perf_counter() - began) * 1000
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        outputs = step()
        samples.append((time.perf_counter() - start) * 1000)
    diff = max(
        float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
        for a, b in zip([*first, *outputs], [*expected, *expected], strict=False)
    )
    scale = max(float(np.max(np.abs(b))) for b in expected)
    return {
        "median_ms": median_ms(samples),
        "samples_ms": samples,
        "first_run_ms": capture_ms,
        "max_abs_diff_vs_plain": diff,
        "max_abs_plain": scale,
    }


def free_dimensions(graph: str, feeds: Mapping[str, Any]) -> dict[str, int]:
    """{symbolic dim name: size} of the graph's inputs, read off the arrays that will be fed."""
    import onnx

    dims: dict[str, int] = {}
    for value in onnx.load(graph, load_external_data=False).graph.input:
        if value.name in feeds:
            for dim, size in zip(value.type.tensor_type.shape.dim, feeds[value.name].shape, strict=False):
                if dim.dim_param:
                    dims[dim.dim_param] = int(size)
    return dims


def node_placement(spec: TimingSpec, *, cpu_fallback: bool) -> dict[str, Any]:
    """One profiled run on the first input set: which EP ran which node types, and the CPU-side time of each
    EP's nodes (a GPU EP's kernels are asynchronous, so only the CPU EP's durations are real compute time)."""
    options = session_options(spec.provider, cpu_fallback=cpu_fallback)
    options.enable_profiling = True
    options.profile_file_prefix = str(Path(spec.result).with_suffix("")) + "-profile"
    try:
        session = _session(spec.graph, spec.provider, options)
        session.run(None, _feeds(next(iter(spec.inputs.values()))))
        profile = Path(session.end_profiling())
        events = json.loads(profile.read_text())
        profile.unlink(missing_ok=True)
    except Exception as exc:  # noqa: BLE001 -- onnxruntime and the EP raise plain exceptions
        return {"error": str(exc).splitlines()[0][:300]}
    return summarize_placement(events)


def summarize_placement(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """{provider: {"nodes": n, "ms": node time, "ops": {op: count}}} from an onnxruntime profile."""
    summary: dict[str, Any] = {}
    for event in events:
        args = event.get("args") or {}
        if (
            event.get("cat") != "Node"
            or "provider" not in args
            or not str(event.get("name", "")).endswith("_kernel_time")
        ):
            continue
        entry = summary.setdefault(args["provider"], {"nodes": 0, "ms": 0.0, "ops": {}})
        entry["nodes"] += 1
        entry["ms"] += float(event.get("dur", 0)) / 1000
        op = args.get("op_name", "?")
        entry["ops"][op] = entry["ops"].get(op, 0) + 1
    return summary


if __name__ == "__main__":
    # The worker subprocess of time_ort(): python -m builder.check.bench.ort_timing SPEC.json
    worker_spec = TimingSpec(**json.loads(Path(sys.argv[1]).read_text()))
    Path(worker_spec.result).write_text(json.dumps(time_graph(worker_spec)))
