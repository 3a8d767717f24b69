"""`klein-web bench`: the WebGPU EP against native PyTorch bf16 on the same GPU, on a random-weight klein.

What one run measures (`main`), for every quantised precision the converter offers (q4, and q4f16 once
`builder.repo.convert.PRECISIONS` has it):

    text encoder   Qwen3-4B width, the 27 layers the prompt-embedding graph runs, 512 tokens
    transformer    one denoising step at 512x512 (1024 image tokens) and 1024x1024 (4096), 512 text tokens
    VAE decoder    the whole decoder at 512x512 (the q4 repo's fp16 graph and its fp32 fallback)

each on (a) onnxruntime with the WebGPU plugin EP (`onnxruntime-ep-webgpu`, Dawn on Vulkan: the same
kernels onnxruntime-web runs in a browser) and (b) PyTorch bf16 through diffusers/transformers.

Method (the numbers are only meaningful with it, so bench.md repeats it):
  * Random weights with the real configs (builder/repo/tiny.py's configs at the real sizes): speed does not
    depend on the weight values, and the Hub is not needed.
  * Layer chains. Exporting and quantising a full 4B graph takes longer than a device call allows, so
    graphs with few layers at the real width are built (text encoder 3 and 6 layers;
    transformer 0+1, 1+1 and 0+2 double+single blocks, each under protobuf's 2 GB in fp32), and
    time = fixed + sum(layers x per-layer) is solved from them
    and evaluated at the real layer counts. Differences of chain lengths also cancel the upload and
    read-back that every timed run includes. PyTorch is measured on the same chains AND on the full
    model, so the extrapolation's error is shown next to the figures.
  * session.run() with numpy inputs and outputs: it returns only once the results are back on the CPU,
    so wall-clock time is GPU time plus the copies. PyTorch is timed with CUDA events.
  * Medians over `repeats` runs after `warmup` runs. Each onnxruntime graph runs in its own subprocess
    (a crash or hang of the EP costs one row, and GPU memory is clean for the next).
  * Peak GPU memory: PyTorch's max_memory_allocated on the full model; for the WebGPU EP, the peak of
    NVML's device memory in use above the level before the session (sampled every 5 ms), measured on
    the longest chain and extrapolated with the graphs' weight bytes on disk.

Without a WebGPU adapter (this CPU machine) the bench says so and runs onnxruntime's CPU EP and torch
on the CPU instead: a smoke test of the whole path, not a benchmark.

`browser_overhead` measures the other target: the share of a generation the app spends outside
session.run (the worker's own `timings`), on make-tiny at 512x512 in headless Chromium via `regress`.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.errors import InputError, KleinWebError
from builder.repo.manifest import atomic_write_bytes

Log = Callable[[str], None]


class BenchError(KleinWebError):
    """The benchmark cannot run with the given options or environment."""


# --------------------------------------------------------------------------------------------------------
# 1. What is measured: the configs at two scales.

@dataclass(frozen=True)
class Scale:
    """Model configs and input sizes of one bench scale; layer counts are given separately as chains."""

    name: str
    text_encoder: Mapping[str, Any]   # Qwen3Config kwargs, num_hidden_layers left out
    text_layers: int                   # layers the prompt-embedding graph runs (hidden state 27)
    text_chains: tuple[tuple[int], ...]
    transformer: Mapping[str, Any]     # Flux2Transformer2DModel kwargs, layer counts left out
    transformer_layers: tuple[int, int]  # (double, single) blocks of the real model
    transformer_chains: tuple[tuple[int, int], ...]
    vae: Mapping[str, Any]
    txt_seq: int                        # the pipeline pads prompts to 512 tokens
    resolutions: tuple[int, ...]        # transformer step sizes (square)
    vae_resolution: int


def full_scale() -> Scale:
    """The real FLUX.2 [klein] 4B sizes (reference doc section 3)."""
    from builder.repo import tiny

    return _scale("full", tiny.FULL_TEXT_ENCODER_CONFIG, tiny.FULL_TRANSFORMER_CONFIG, tiny.FULL_VAE_CONFIG,
                  txt_seq=512, resolutions=(512, 1024), vae_resolution=512)


def tiny_scale() -> Scale:
    """make-tiny's configs and small inputs: the CPU smoke test of the whole bench path."""
    from builder.repo import tiny

    return _scale("tiny", tiny.TEXT_ENCODER_CONFIG, tiny.TRANSFORMER_CONFIG, tiny.VAE_CONFIG,
                  txt_seq=32, resolutions=(128, 256), vae_resolution=128)


def _scale(name: str, text_config: Mapping[str, Any], transformer_config: Mapping[str, Any],
           vae_config: Mapping[str, Any], *, txt_seq: int, resolutions: tuple[int, ...], vae_resolution: int) -> Scale:
    """A Scale from make-tiny's config dicts: layer counts are dropped (the bench builds chains of its own)
    and the real model's counts are used for the extrapolation."""
    text = {k: v for k, v in text_config.items() if k != "num_hidden_layers"}
    transformer = {k: v for k, v in transformer_config.items() if k not in ("num_layers", "num_single_layers")}
    return Scale(name, text, 27, ((3,), (6,)), transformer, (5, 20), ((0, 1), (1, 1), (0, 2)), dict(vae_config),
                 txt_seq=txt_seq, resolutions=resolutions, vae_resolution=vae_resolution)


SCALES = {"full": full_scale, "tiny": tiny_scale}
COMPONENTS = ("text_encoder", "transformer", "vae_decoder")


# --------------------------------------------------------------------------------------------------------
# 2. Statistics and the table (pure functions, unit-tested).

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


def _fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


TABLE_HEADER = ("| component | size | ONNX variant | WebGPU EP ms | PyTorch bf16 ms | WebGPU / PyTorch | "
                "WebGPU peak GiB | PyTorch peak GiB | method |")


def table_rows(rows: Sequence[Mapping[str, Any]], *, ort_label: str = "WebGPU EP",
               torch_label: str = "PyTorch bf16") -> list[str]:
    """Markdown table of result rows (keys: component, size, variant, ort_ms, torch_ms, ort_peak_gib,
    torch_peak_gib, method); the ratio column is computed here so it always matches the two times."""
    header = TABLE_HEADER.replace("WebGPU EP", ort_label).replace("PyTorch bf16", torch_label)
    header = header.replace("WebGPU /", ort_label.split()[0] + " /").replace("WebGPU peak", ort_label.split()[0] + " peak")
    header = header.replace("/ PyTorch |", f"/ {torch_label.split()[0]} |")
    lines = [header, "|" + "---|" * TABLE_HEADER.count(" | ") + "---|"]
    for row in rows:
        r = ratio(row.get("ort_ms"), row.get("torch_ms"))
        lines.append(
            f"| {row['component']} | {row['size']} | {row['variant']} | {_fmt(row.get('ort_ms'))} | "
            f"{_fmt(row.get('torch_ms'))} | {'n/a' if r is None else f'{r:.1f}x'} | "
            f"{_fmt(row.get('ort_peak_gib'), 2)} | {_fmt(row.get('torch_peak_gib'), 2)} | {row.get('method', '')} |")
    return lines


# --------------------------------------------------------------------------------------------------------
# 3. Models and inputs (torch), the same for export and for PyTorch timing.

def build_text_encoder(scale: Scale, layers: int, *, device: str) -> Any:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        return Qwen3ForCausalLM(Qwen3Config(**scale.text_encoder, num_hidden_layers=layers)).eval()


def build_transformer(scale: Scale, layers: tuple[int, ...], *, device: str) -> Any:
    import torch
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(1)
    with torch.device(device):
        return Flux2Transformer2DModel(**scale.transformer, num_layers=layers[0], num_single_layers=layers[1]).eval()


def build_vae(scale: Scale, *, device: str) -> Any:
    import torch
    from diffusers import AutoencoderKLFlux2

    torch.manual_seed(2)
    with torch.device(device):
        vae = AutoencoderKLFlux2(**scale.vae).eval()
    with torch.no_grad():
        vae.bn.running_var.uniform_(0.5, 1.5)
    return vae


def out_layers(layers: int) -> tuple[int, int, int]:
    """Hidden states the k-layer chain concatenates: like (9, 18, 27) for 27, three distinct layers."""
    if layers < 3:
        raise BenchError(f"A text-encoder chain needs >= 3 layers (three hidden states), got {layers}.")
    return (layers // 3, 2 * layers // 3, layers)


def make_inputs(scale: Scale, component: str, resolution: int | None, *, seed: int = 0) -> dict[str, Any]:
    """Random (never zero) numpy inputs in the graph contract's names and shapes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if component == "text_encoder":
        vocab = int(scale.text_encoder["vocab_size"])
        ids = rng.integers(0, min(vocab, 151643), size=(1, scale.txt_seq), dtype=np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    side = int(resolution or scale.vae_resolution) // 16  # 8x VAE downsampling, then 2x2 patches
    if component == "transformer":
        joint = int(scale.transformer["joint_attention_dim"])
        rows, cols = np.divmod(np.arange(side * side), side)
        img_ids = np.stack([np.zeros_like(rows), rows, cols, np.zeros_like(rows)], axis=1).astype(np.int64)
        txt_ids = np.zeros((scale.txt_seq, 4), dtype=np.int64)
        txt_ids[:, 3] = np.arange(scale.txt_seq)
        return {"hidden_states": rng.standard_normal((1, side * side, 128), dtype=np.float32),
                "encoder_hidden_states": rng.standard_normal((1, scale.txt_seq, joint), dtype=np.float32),
                "timestep": np.array([0.75], dtype=np.float32), "img_ids": img_ids, "txt_ids": txt_ids}
    return {"latents": rng.standard_normal((1, 128, side, side), dtype=np.float32)}


# --------------------------------------------------------------------------------------------------------
# 4. PyTorch timing (bf16 on CUDA; fp32 on the CPU for the smoke test).

def torch_callable(component: str, module: Any, inputs: Mapping[str, Any], *, device: str, dtype: Any,
                   layers: int | None = None) -> Callable[[], Any]:
    """A no-argument call that runs `module` on `inputs` the way Flux2KleinPipeline calls it."""
    import torch

    def tensor(name: str) -> Any:
        value = torch.from_numpy(inputs[name]).to(device)
        return value.to(dtype) if value.is_floating_point() else value

    if component == "text_encoder":
        ids, mask, picks = tensor("input_ids"), tensor("attention_mask"), out_layers(layers or 27)

        def run_text() -> Any:
            out = module(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
            return torch.cat([out.hidden_states[k] for k in picks], dim=-1)
        return run_text
    if component == "transformer":
        args = {name: tensor(name) for name in ("hidden_states", "encoder_hidden_states", "timestep", "img_ids",
                                                "txt_ids")}
        return lambda: module(**args, guidance=None, return_dict=False)[0]
    from builder.repo.export_vae import LatentDecoder

    decoder = LatentDecoder(module).to(device=device, dtype=dtype)
    latents = tensor("latents")
    return lambda: decoder(latents)


def time_torch(run: Callable[[], Any], *, device: str, warmup: int, repeats: int) -> dict[str, Any]:
    """Median ms of `run` (CUDA events around each call) and the peak memory allocated while running."""
    import torch

    cuda = device.startswith("cuda")
    with torch.inference_mode():
        for _ in range(warmup):
            run()
        if cuda:
            torch.cuda.synchronize()
        samples = []
        for _ in range(repeats):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                run()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end))
            else:
                began = time.perf_counter()
                run()
                samples.append((time.perf_counter() - began) * 1000)
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    return {"median_ms": median_ms(samples), "samples_ms": samples, "peak_gib": peak}


def _release_torch(device: str) -> None:
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


# --------------------------------------------------------------------------------------------------------
# 5. ONNX graphs: export with the converter's own exporters and precision rewrites.

def export_graphs(scale: Scale, component: str, layers: tuple[int, ...] | None, folder: Path, *,
                  precisions: Sequence[str], log: Log) -> dict[str, Path]:
    """Export one chain (or the VAE), built on the CPU with random weights, with the converter's own
    write_graphs for each precision. Returns {label: graph path}; the label is the variant (q4, q4f16,
    fp16, fp32), for the transformer plus its attention split (one graph per size class, as the converter
    writes them), and for the VAE also an unsplit copy: what the split costs at sizes that fit without it."""
    from builder.repo.convert import exporter, write_graphs
    from builder.repo.onnx_graph import DEFAULT_DATA_FILE_CAP

    if component == "text_encoder":
        causal_lm = build_text_encoder(scale, layers[0], device="cpu")
        exports = {"": lambda placement: export_text_chain(causal_lm, layers[0], placement=placement)}
    else:
        from builder.repo.export_vae import export_vae

        module = (build_transformer(scale, layers, device="cpu") if component == "transformer"
                  else build_vae(scale, device="cpu"))
        exports = {"": exporter(component, module)}
        if component == "vae_decoder":
            exports[blocks_label(1)] = lambda _placement: export_vae(module, query_blocks=1)
    paths: dict[str, Path] = {}
    for suffix, export in exports.items():
        for precision in precisions:
            stage = folder / f"{precision}{suffix.replace(' ', '-').replace(',', '')}"
            for graph in write_graphs(export, component, precision, stage, max_data_file_bytes=DEFAULT_DATA_FILE_CAP,
                                      log=log):
                entry = graph.entry()
                split = blocks_label(entry.attention_query_blocks) if component == "transformer" else suffix
                # q4f16 repos hold the q4 graph too: time each variant once.
                paths.setdefault(graph.variant + split, stage / entry.path)
    gc.collect()
    return paths


def timed_transformers(scale: Scale, sizes: Sequence[int | None], graphs: Mapping[str, Path]) -> set[str]:
    """The transformer graphs worth a device's time: each variant's main graph (every size) and the ones
    the app runs at the bench's sizes; the other size classes only serve sizes the bench does not time."""
    from builder.repo.attention import size_classes

    most = size_classes("transformer", heads=int(scale.transformer["num_attention_heads"]))[0][0]
    variants = {label.split(",")[0] for label in graphs}
    return {v + blocks_label(most) for v in variants} | {app_choice(scale, s, v) for v in variants for s in sizes}


def app_choice(scale: Scale, size: int | None, variant: str) -> str:
    """The label of the transformer graph the app runs at size x size (models.sizeClass): the least-split
    graph of the variant whose attention limit covers the image and text tokens."""
    from builder.repo.attention import size_classes

    tokens = (int(size or 0) // 16) ** 2 + scale.txt_seq
    classes = size_classes("transformer", heads=int(scale.transformer["num_attention_heads"]))
    blocks = min((n for n, limit in classes if limit >= tokens), default=classes[0][0])
    return variant + blocks_label(blocks)


def export_text_chain(causal_lm: Any, layers: int, *, placement: Any = None) -> Any:
    """builder.repo.export_text_encoder.export_text_encoder for a k-layer chain (hidden states k/3, 2k/3, k)."""
    import torch

    from builder.repo.export_text_encoder import (
        DYNAMIC_AXES,
        INPUT_NAMES,
        OUTPUT_NAMES,
        PromptEmbedder,
        use_eager_attention,
    )
    from builder.repo.onnx_graph import export_module

    use_eager_attention(causal_lm)
    embedder = PromptEmbedder(causal_lm.eval(), out_layers(layers)).eval()
    input_ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 0, 0, 0, 0]], dtype=torch.int64)
    return export_module(embedder, (input_ids, (input_ids != 0).to(torch.int64)), component="text_encoder",
                         input_names=INPUT_NAMES, output_names=OUTPUT_NAMES, dynamic_axes=DYNAMIC_AXES,
                         placement=placement)


def graph_bytes(path: Path) -> int:
    """Bytes of a saved graph and the external-data files it references (its weights on disk; the
    transformer's size-class graphs reference the main graph's files)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    files = {entry.value for tensor in model.graph.initializer for entry in tensor.external_data if entry.key == "location"}
    return path.stat().st_size + sum((path.parent / name).stat().st_size for name in files)


# --------------------------------------------------------------------------------------------------------
# 6. onnxruntime timing, one subprocess per graph.

def webgpu_status() -> str | None:
    """None when the WebGPU plugin EP finds an adapter; otherwise the reason, worded for the user."""
    try:
        _webgpu_device()
    except BenchError as exc:
        return str(exc)
    return None


def _webgpu_device() -> Any:
    import onnxruntime as ort

    try:
        import onnxruntime_ep_webgpu as webgpu_ep
    except ImportError:
        raise BenchError("onnxruntime-ep-webgpu is not installed: `pip install onnxruntime-ep-webgpu==0.4.0` "
                         "(needs onnxruntime >= 1.24.4).")
    name = webgpu_ep.get_ep_name()
    if not any(d.ep_name == name for d in ort.get_ep_devices()):
        try:
            ort.register_execution_provider_library("webgpu", webgpu_ep.get_library_path())
        except Exception as exc:  # noqa: BLE001 -- the plugin reports version mismatches here
            raise BenchError(f"The WebGPU plugin EP did not load: {exc}")
    device = next((d for d in ort.get_ep_devices() if d.ep_name == name), None)
    if device is None:
        raise BenchError("The WebGPU plugin EP found no adapter. On Linux it needs the Vulkan loader "
                         "(libvulkan1) and the GPU driver's ICD; set VK_DRIVER_FILES to the driver's "
                         "nvidia_icd.json if the loader does not find it.")
    return device


class GpuMemorySampler:
    """Peak NVML device memory in use above the level at start, sampled in a thread (None without NVML)."""

    def __init__(self) -> None:
        import threading

        self.peak_bytes: int | None = None
        self._stop = threading.Event()
        self._thread: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self._used = lambda: pynvml.nvmlDeviceGetMemoryInfo(self._handle).used
            self._base = self._used()
            self.peak_bytes = 0
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        except Exception:  # noqa: BLE001 -- no NVML (CPU machine): memory is simply not reported
            self._thread = None

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak_bytes = max(self.peak_bytes or 0, self._used() - self._base)

    def stop(self) -> int | None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.peak_bytes


def ort_worker(spec_path: Path) -> None:
    """Subprocess body: time one graph on each input set of the spec and write the result JSON. With
    spec["capture"], each input set is then timed again in a graph-capture session (`time_captured`)."""
    import numpy as np
    import onnxruntime as ort

    spec = json.loads(Path(spec_path).read_text())
    sampler = GpuMemorySampler()
    options = ort.SessionOptions()
    notes = []
    began = time.perf_counter()
    if spec["provider"] == "webgpu":
        options.add_provider_for_devices([_webgpu_device()], {})
        # Every node on the GPU, or the session fails: a silent CPU fallback would make the figure a lie.
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        try:
            session = ort.InferenceSession(spec["graph"], sess_options=options)
        except Exception as exc:  # noqa: BLE001 -- onnxruntime and the EP raise plain exceptions
            notes.append(f"with CPU fallback ({str(exc).splitlines()[0][:160]})")
            options = ort.SessionOptions()
            options.add_provider_for_devices([_webgpu_device()], {})
            session = ort.InferenceSession(spec["graph"], sess_options=options)
    else:
        session = ort.InferenceSession(spec["graph"], providers=["CPUExecutionProvider"])
    load_s = time.perf_counter() - began
    results: dict[str, Any] = {}
    plain_outputs: dict[str, Any] = {}
    for key, npz in spec["inputs"].items():
        with np.load(npz) as data:
            feeds = {name: data[name] for name in data.files}
        try:  # one size failing (e.g. a buffer over the adapter's limit) must not cost the others
            for _ in range(spec["warmup"]):
                session.run(None, feeds)
            samples = []
            for _ in range(spec["repeats"]):
                start = time.perf_counter()
                outputs = session.run(None, feeds)  # numpy outputs: returns once results are read back
                samples.append((time.perf_counter() - start) * 1000)
        except Exception as exc:  # noqa: BLE001 -- onnxruntime and the EP raise plain exceptions
            results[key] = {"error": str(exc).splitlines()[0][:300]}
            continue
        finite = bool(np.isfinite(outputs[0]).all())
        results[key] = {"median_ms": median_ms(samples), "samples_ms": samples, "finite": finite}
        plain_outputs[key] = outputs
        np.save(f"{spec['outputs']}-{key}.npy", outputs[0])  # for the fast-vs-plain fidelity figures
    peak = sampler.stop()
    del session
    capture_peak = None
    if spec.get("capture"):
        sampler = GpuMemorySampler()
        for key, npz in spec["inputs"].items():
            if key not in plain_outputs:
                continue
            with np.load(npz) as data:
                feeds = {name: data[name] for name in data.files}
            try:
                results[key]["capture"] = time_captured(spec["graph"], feeds, plain_outputs[key],
                                                        warmup=spec["warmup"], repeats=spec["repeats"])
            except Exception as exc:  # noqa: BLE001 -- onnxruntime and the EP raise plain exceptions
                results[key]["capture"] = {"error": str(exc).splitlines()[0][:300]}
        capture_peak = sampler.stop()
    placement = node_placement(spec, options_factory=lambda: _ort_options(spec["provider"], fallback=bool(notes)))
    Path(spec["result"]).write_text(json.dumps({"results": results, "peak_bytes": peak, "load_s": load_s,
                                                "capture_peak_bytes": capture_peak,
                                                "notes": notes, "placement": placement}))


def time_captured(graph: str, feeds: Mapping[str, Any], expected: Sequence[Any], *, warmup: int,
                  repeats: int) -> dict[str, Any]:
    """Time one graph in a WebGPU session with graph capture, as the app runs the denoising loop: inputs
    live in GPU buffers, the first run records every kernel and later runs replay the recording without
    the EP's per-kernel host work. Each timed run includes the read-back of the outputs (run() returns
    before the GPU finishes when outputs stay on the device). The replayed outputs are compared with the
    plain session's (`expected`): a capture that replays stale or wrong buffers must not pass as fast."""
    import numpy as np
    import onnxruntime as ort

    device = _webgpu_device()
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
    for meta, array in zip(session.get_outputs(), expected):
        value = ort.OrtValue.ortvalue_from_shape_and_type(list(array.shape), array.dtype, memory_info=memory)
        binding.bind_ortvalue_output(meta.name, value)
        keep.append(value)

    def step() -> list[Any]:
        session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()

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
    diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
               for a, b in zip([*first, *outputs], [*expected, *expected]))
    scale = max(float(np.max(np.abs(b))) for b in expected)
    return {"median_ms": median_ms(samples), "samples_ms": samples, "first_run_ms": capture_ms,
            "max_abs_diff_vs_plain": diff, "max_abs_plain": scale}


def free_dimensions(graph: str, feeds: Mapping[str, Any]) -> dict[str, int]:
    """{symbolic dim name: size} of the graph's inputs, read off the arrays that will be fed."""
    import onnx

    dims: dict[str, int] = {}
    for value in onnx.load(graph, load_external_data=False).graph.input:
        if value.name in feeds:
            for dim, size in zip(value.type.tensor_type.shape.dim, feeds[value.name].shape):
                if dim.dim_param:
                    dims[dim.dim_param] = int(size)
    return dims


def _ort_options(provider: str, *, fallback: bool) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    if provider == "webgpu":
        options.add_provider_for_devices([_webgpu_device()], {})
        if not fallback:
            options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    return options


def node_placement(spec: Mapping[str, Any], *, options_factory: Callable[[], Any]) -> dict[str, Any]:
    """One profiled run on the first input set: which EP ran which node types, and the CPU-side time of each
    EP's nodes (a GPU EP's kernels are asynchronous, so only the CPU EP's durations are real compute time)."""
    import numpy as np
    import onnxruntime as ort

    options = options_factory()
    options.enable_profiling = True
    options.profile_file_prefix = str(Path(spec["result"]).with_suffix("")) + "-profile"
    try:
        session = ort.InferenceSession(spec["graph"], sess_options=options, providers=None
                                       if spec["provider"] == "webgpu" else ["CPUExecutionProvider"])
        with np.load(next(iter(spec["inputs"].values()))) as data:
            session.run(None, {name: data[name] for name in data.files})
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
        if event.get("cat") != "Node" or "provider" not in args or not str(event.get("name", "")).endswith("_kernel_time"):
            continue
        entry = summary.setdefault(args["provider"], {"nodes": 0, "ms": 0.0, "ops": {}})
        entry["nodes"] += 1
        entry["ms"] += float(event.get("dur", 0)) / 1000
        op = args.get("op_name", "?")
        entry["ops"][op] = entry["ops"].get(op, 0) + 1
    return summary


def placement_text(placement: Mapping[str, Any] | None) -> str:
    """'CPU EP: 12 nodes (Shape x8, Gather x4), 0.3 ms' for the table; '' when everything ran on the GPU."""
    if not placement or "error" in placement:
        return "" if not placement else f"placement unknown ({placement['error'][:60]})"
    cpu = placement.get("CPUExecutionProvider")
    if not cpu:
        return "all nodes on the GPU EP"
    ops = ", ".join(f"{op} x{n}" for op, n in sorted(cpu["ops"].items(), key=lambda item: -item[1])[:4])
    return f"CPU EP: {cpu['nodes']} nodes ({ops}), {cpu['ms']:.1f} ms"


def time_ort(graph: Path, inputs: Mapping[str, Path], *, provider: str, warmup: int, repeats: int,
             timeout_s: float, workdir: Path, capture: bool = False) -> dict[str, Any]:
    """Run `ort_worker` in a subprocess; a crash or timeout becomes {"error": ...} instead of ending the bench."""
    spec: dict[str, Any] = {"graph": str(graph), "inputs": {k: str(v) for k, v in inputs.items()}, "provider": provider,
            "warmup": warmup, "repeats": repeats, "result": str(workdir / f"result-{os.getpid()}.json"),
            "outputs": str(graph.with_suffix("")), "capture": capture}
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(spec))
    Path(spec["result"]).unlink(missing_ok=True)
    try:
        proc = subprocess.run([sys.executable, "-m", "builder.check.bench", "--ort-worker", str(spec_path)], check=False,
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    if proc.returncode != 0 or not Path(spec["result"]).is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {proc.returncode}: {' | '.join(reversed(tail))[:400]}"}
    return json.loads(Path(spec["result"]).read_text())


# --------------------------------------------------------------------------------------------------------
# 7. The run.

@dataclass
class BenchRun:
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

    def save(self, environment: Mapping[str, Any]) -> None:
        """bench.json (every sample) and bench.md (the table), each written to a temp file and renamed."""
        data = {"environment": dict(environment), "rows": self.rows, "raw": self.raw}
        atomic_write_bytes(self.out_dir / "bench.json", json.dumps(data, indent=1, default=str).encode("utf-8"))
        atomic_write_bytes(self.out_dir / "bench.md", ("\n".join(markdown_report(environment, self.rows)) + "\n").encode("utf-8"))


def markdown_report(environment: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    env = ", ".join(f"{k} {v}" for k, v in environment.items())
    labels = table_labels(environment)
    return [f"klein-web bench ({env})", "", *table_rows(rows, **labels), "",
            ("Method: random weights with the real configs; medians after warm-up; WebGPU EP via "
             "onnxruntime-ep-webgpu with numpy I/O (run() returns after read-back); PyTorch bf16 timed with CUDA "
             "events. 'chain' rows are solved from graphs with few layers at the real width (fixed + per-layer "
             "time) and evaluated at the real layer count; see builder/check/bench.py."),
            *fidelity_lines(rows)]


def fidelity_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per fast variant: its relative L2 error against the plain variant on the same inputs."""
    found = [row for row in rows if "rel_err_vs_plain" in row]
    if not found:
        return []
    return ["", ("Fast path vs plain variant, same weights and inputs (relative L2 error of the output, on the "
                 "largest graph timed):"),
            *(f"- {row['component']} {row['size']}: {row['variant']} vs {plain_label(row['variant'])} "
              f"{row['rel_err_vs_plain']:.2e}" for row in found)]


def table_labels(environment: Mapping[str, Any]) -> dict[str, str]:
    """Column names that say what actually ran (the CPU smoke run must not read like a GPU benchmark)."""
    gpu = not str(environment.get("gpu", "")).startswith("none")
    return {"ort_label": "WebGPU EP" if environment.get("ort provider") == "webgpu" else "ORT CPU EP",
            "torch_label": "PyTorch bf16" if gpu else "PyTorch CPU fp32"}


def environment(provider: str, device: str, scale: Scale) -> dict[str, Any]:
    import onnxruntime as ort
    import torch

    env: dict[str, Any] = {"date": datetime.date.today().isoformat(), "scale": scale.name,
                           "onnxruntime": ort.__version__, "torch": torch.__version__, "python": platform.python_version()}
    for name in ("onnxruntime_ep_webgpu", "diffusers", "transformers"):
        try:
            from importlib.metadata import version

            env[name] = version(name.replace("_", "-"))
        except Exception:  # noqa: BLE001 -- onnxruntime and the EP raise plain exceptions
            env[name] = "not installed"
    env["ort provider"] = provider
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(0)
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 check=False, capture_output=True, text=True, timeout=20)
            env["driver"] = out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            env["driver"] = "unknown"
    else:
        env["gpu"] = "none (CPU smoke run)"
    return env


def bench_component(run: BenchRun, component: str, workdir: Path) -> None:
    """Export the chains, time them on onnxruntime and PyTorch, extrapolate, append table rows."""
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
        import numpy as np

        npz[str(s)] = workdir / f"{component}-{s}.npz"
        np.savez(npz[str(s)], **feeds)

    # ONNX side: per chain, every variant, each in its own subprocess.
    ort_times: dict[tuple[str, str], dict[tuple[int, ...], float]] = {}
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
            result = time_ort(graph, npz, provider=run.provider, warmup=run.warmup, repeats=run.repeats,
                              timeout_s=run.timeout_s, workdir=workdir, capture=capture)
            run.raw[f"ort {component} {label} {chain}"] = result
            if "error" in result:
                log(f"  {component} {label} {chain}: onnxruntime failed: {result['error']}")
                continue
            weight_bytes = graph_bytes(graph)
            modes = {label: (lambda m: m, "peak_bytes")}
            if capture:
                modes[label + CAPTURE] = (lambda m: m.get("capture", {"error": "not run"}), "capture_peak_bytes")
            for name, (pick, peak_key) in modes.items():
                for s in sizes:
                    measured = pick(result["results"][str(s)])
                    if "median_ms" in measured:
                        ort_times.setdefault((name, str(s)), {})[tuple(chain or ())] = measured["median_ms"]
                ort_bytes.setdefault(name, {})[tuple(chain or ())] = weight_bytes
                ort_peak[name] = (tuple(chain or ()), result.get(peak_key))  # the last chain's peak
                ort_place[name] = placement_text(result.get("placement"))
                log(f"  {component} {name} {chain}: " + ", ".join(
                    f"{size_text[s]} " + (f"{m['median_ms']:.1f} ms" if "median_ms" in m else f"failed: {m['error']}")
                    + (f" (replay vs plain max |diff| {m['max_abs_diff_vs_plain']:.2e} of {m['max_abs_plain']:.2e}, "
                       f"first run {m['first_run_ms']:.0f} ms)" if "max_abs_diff_vs_plain" in m else "")
                    for s in sizes for m in [pick(result["results"][str(s)])])
                    + (f" [{'; '.join(result['notes'])}]" if result.get("notes") else ""))
        fidelity.update(fast_path_fidelity(graphs, sizes))
        run.raw[f"fidelity {component} {chain}"] = {f"{k[0]} {k[1]}": v for k, v in fidelity.items()}
        _release_files(folder)

    # PyTorch side: the same chains, then the full model.
    torch_times: dict[str, dict[tuple[int, ...], float]] = {}
    torch_full: dict[str, dict[str, Any]] = {}
    for chain in [*(c for c in chains if c is not None), full]:
        module = _build(scale, component, chain, device=run.device).to(dtype)
        for s in sizes:
            call = torch_callable(component, module, inputs[s], device=run.device, dtype=dtype,
                                  layers=chain[0] if component == "text_encoder" and chain else None)
            measured = time_torch(call, device=run.device, warmup=run.warmup, repeats=run.repeats)
            run.raw[f"torch {component} {s} {chain}"] = measured
            if chain == full:
                torch_full[str(s)] = measured
            else:
                torch_times.setdefault(str(s), {})[tuple(chain)] = measured["median_ms"]
        del module
        _release_torch(run.device)
    log(f"  {component}: PyTorch " + ", ".join(f"{size_text[s]} {torch_full[str(s)]['median_ms']:.1f} ms"
                                               for s in sizes))

    # Rows: extrapolated where chains were measured.
    for (label, key), points in sorted(ort_times.items()):
        size = None if key == "None" else int(key)
        torch_ms = torch_full[key]["median_ms"]
        row: dict[str, Any] = {"component": component, "size": size_text[size], "variant": label,
                               "torch_ms": torch_ms, "torch_peak_gib": torch_full[key]["peak_gib"]}
        peak_chain, peak = ort_peak.get(label, ((), None))
        place = ort_place.get(label, "")
        if full is None:
            row.update(ort_ms=points[()], method="full graph" + (f"; {place}" if place else ""))
            row["ort_peak_gib"] = None if peak is None else peak / 2**30
        elif len(points) < len(chains):
            row.update(ort_ms=None, ort_peak_gib=None, method=f"onnxruntime failed on some chains: {sorted(points)}")
        else:
            row["ort_ms"], coef = extrapolate(points, full)
            torch_est, _ = extrapolate(torch_times[key], full)
            # Peak = the last chain's measured peak + the weight bytes the missing layers add (graph bytes on
            # disk, extrapolated like the times).
            full_bytes, _ = extrapolate(ort_bytes[label], full)
            missing = full_bytes - ort_bytes[label][peak_chain]
            row["ort_peak_gib"] = None if peak is None else (peak + missing) / 2**30
            row["ort_weights_gib"] = full_bytes / 2**30
            row["method"] = (f"chain {'/'.join('+'.join(map(str, p)) for p in points)} -> "
                             f"{'+'.join(map(str, full))} layers (PyTorch extrapolated the same way: "
                             f"{torch_est:.1f} ms vs measured {torch_ms:.1f})" + (f"; {place}" if place else ""))
            row["per_layer_ms"] = coef[1:]
        if (label, key) in fidelity:
            row["rel_err_vs_plain"] = fidelity[(label, key)]
        if component == "transformer" and label == app_choice(scale, size, label.split(",")[0]) + CAPTURE:
            row["app_path"] = True
            row["method"] = "**what the app runs at this size**; " + row.get("method", "")
        run.rows.append(row)


# The fast variant and the plain variant it is checked against (same weights, same inputs).
FAST_VARIANTS = {"q4f16": "q4", "fp16": "fp32"}


def plain_label(label: str) -> str | None:
    """'q4f16, attention unsplit' -> 'q4, attention unsplit': the plain graph a fast one is checked against
    (same split); None for a label that is not a fast variant."""
    variant, comma, split = label.partition(",")
    return FAST_VARIANTS[variant] + comma + split if variant in FAST_VARIANTS else None


def blocks_label(blocks: int) -> str:
    """Label suffix of a graph exported with its attention in `blocks` query blocks (bench only)."""
    return ", attention unsplit" if blocks == 1 else f", attention in {blocks} query blocks"


# Label suffix of the transformer timed in a graph-capture session (the app's denoising loop).
CAPTURE = ", graph capture"


def fast_path_fidelity(graphs: Mapping[str, Path], sizes: Sequence[int | None]) -> dict[tuple[str, str], float]:
    """Relative L2 error ||fast - plain|| / ||plain|| of each fast variant's output (saved by ort_worker)."""
    import numpy as np

    errors: dict[tuple[str, str], float] = {}
    for fast in graphs:
        plain = plain_label(fast)
        if plain is None or plain not in graphs:
            continue
        for size in sizes:
            paths = [Path(f"{graphs[v].with_suffix('')}-{size}.npy") for v in (fast, plain)]
            if all(p.is_file() for p in paths):
                a, b = (np.load(p).astype(np.float64) for p in paths)
                errors[(fast, str(size))] = float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
    return errors


def _build(scale: Scale, component: str, chain: tuple[int, ...] | None, *, device: str) -> Any:
    if component == "text_encoder":
        return build_text_encoder(scale, chain[0] if chain else scale.text_layers, device=device)
    if component == "transformer":
        return build_transformer(scale, tuple(chain) if chain else scale.transformer_layers, device=device)
    return build_vae(scale, device=device)


def _release_files(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def main(out_dir: Path, *, log: Log, scale: str = "full", components: Sequence[str] = COMPONENTS,
         provider: str = "auto", warmup: int = 2, repeats: int = 5, timeout_s: float = 180.0,
         workdir: Path | None = None) -> list[dict[str, Any]]:
    """Run the benchmark; write OUT/bench.json and OUT/bench.md after every component; return the rows."""
    import torch

    from builder.repo.convert import PRECISIONS

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

    # 2. Which onnxruntime EP and which torch device this machine offers.
    reason = webgpu_status() if provider in ("auto", "webgpu") else "not asked for"
    if provider == "webgpu" and reason:
        raise BenchError(reason)
    chosen = "webgpu" if reason is None else "cpu"
    if chosen == "cpu":
        log(f"bench: no WebGPU EP ({reason}); timing onnxruntime's CPU EP instead: a smoke test, not a benchmark.")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        log("bench: no CUDA device; PyTorch runs float32 on the CPU (smoke test).")
    # A q4f16 repo holds the q4 graphs too (one quantisation for both); before q4f16 existed, q4 alone.
    precisions = ["q4f16"] if "q4f16" in PRECISIONS else ["q4"]
    run = BenchRun(out_dir, SCALES[scale](), chosen, device, warmup, repeats, timeout_s, log, precisions)
    env = environment(chosen, device, run.scale)
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
            run.save(env)
            log(f"bench: {component} done in {time.monotonic() - began:.0f} s")
    for line in table_rows(run.rows, **table_labels(env)):
        log(line)
    return run.rows


# --------------------------------------------------------------------------------------------------------
# 8. The browser orchestration overhead (make-tiny at 512x512 in headless Chromium on SwiftShader).

def overhead_figures(timings: Mapping[str, float]) -> dict[str, float]:
    """From the worker's StageTimings: ms outside session.run, and its share of the generation.

    The generation is encode + denoise + decode (total minus download and session loading, which happen
    once per page, not per image); session.run time is the worker's own meter."""
    for key in ("total", "sessionRun"):
        if not isinstance(timings.get(key), (int, float)):
            raise BenchError(f"The app's timings lack {key!r}: {dict(timings)}")
    generation = timings["total"] - timings.get("download", 0) - timings.get("load", 0)
    outside = generation - timings["sessionRun"]
    return {"generation_ms": generation, "session_run_ms": timings["sessionRun"], "outside_ms": outside,
            "overhead_share": outside / generation if generation > 0 else float("nan"),
            "overhead_share_of_total": (timings["total"] - timings["sessionRun"]) / timings["total"]}


def browser_overhead(out_dir: Path, *, log: Log, models_dir: Path | None = None, steps: int = 4,
                     size: str = "512x512", timeout_s: float = 900.0) -> dict[str, Any]:
    """Generate one image with the app on make-tiny and report the orchestration overhead figure."""
    from builder.check import regress
    from builder.repo.tiny import make_tiny

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if models_dir is None:
        models_dir = out_dir / "tiny-model" / "q4"
        if not (models_dir / "manifest.json").is_file():
            make_tiny(out_dir / "tiny-model", log=log)
    report_dir = out_dir / "browser-overhead"
    regress.main(log=log, models_dir=models_dir, prompt="a lighthouse at dusk", seed=0, size=size, steps=steps,
                 cases_file=None, reference_png=None, reference_from_cpu=True, browser_path=None, headed=False,
                 gpu=False, report_dir=report_dir, psnr_min=1.0, timeout_s=timeout_s)  # timings only: any PSNR will do
    report = json.loads((report_dir / "report.json").read_text())
    figures = {**overhead_figures(report["timings"]), "timings": report["timings"], "size": size, "steps": steps}
    atomic_write_bytes(out_dir / "browser-overhead.json", json.dumps(figures, indent=1).encode("utf-8"))
    log(f"browser overhead: {figures['outside_ms']:.0f} ms of {figures['generation_ms']:.0f} ms outside "
        f"session.run = {100 * figures['overhead_share']:.1f}% (target <= 5%)")
    return figures


# --------------------------------------------------------------------------------------------------------
# 9. `python -m builder.check.bench` (the device machine has no click/starlette; cli.py calls main()).

def _cli(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m builder.check.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench"))
    parser.add_argument("--scale", default="full", choices=sorted(SCALES))
    parser.add_argument("--components", default=",".join(COMPONENTS))
    parser.add_argument("--provider", default="auto")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--browser-overhead", action="store_true")
    parser.add_argument("--ort-worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ort_worker:
        ort_worker(args.ort_worker)
        return

    def log(message: str) -> None:
        print(message, flush=True)

    if args.browser_overhead:
        browser_overhead(args.out, log=log)
        return
    main(args.out, log=log, scale=args.scale, components=[c for c in args.components.split(",") if c],
         provider=args.provider, warmup=args.warmup, repeats=args.repeats, workdir=args.workdir)


if __name__ == "__main__":
    _cli()
