"""`klein-web browser-bench`: the real app in Chromium, driven like a user, timed per stage, cold and warm.

For each graph variant (`--precision`, e.g. q4f16 and q4) one fresh browser profile, served the model folder
from a local server, and in it:

    1. cold      first image at the first size: the model store fills from the server (GB/s), every
                 session is created (shader compilation included), then encode, each step, decode;
    2. sizes     the other sizes in the same page (the transformer session is re-created for its size class);
    3. warm      the page reloaded: weights come from the browser's store (bytes fetched must be 0), sessions
                 are created again (the browser's shader cache may help), "reload -> first image" timed;
    4. hot       one more image in the same page with another prompt: sessions loaded, the text encoder runs:
                 the seconds per image a user waits while the tab stays open. Every image so far shows the step
                 previews (pipeline/preview.js): their time per step is a column; `hot, no preview` is one more
                 image with them off, for the step time without them.
    5. profiled  with --kernels, one image per size in a page opened with ?profile=kernels: onnxruntime's profiler
                 gives each component's GPU time per kernel program (which kernel path ran, and where the time
                 goes). Its sessions do not capture, so its own timings run slower than `hot`'s.

Alongside, a sampler records peak GPU memory (NVML, above its value before the browser started) and the
peak resident memory of Chromium's renderer (the page and its worker) and GPU processes, and a hook in the
worker records the onnxruntime wasm heap. Results go to OUT/browser-bench.json and OUT/browser-bench.md
(builder.check.bench.browser_report); `--native BENCH_JSON` (from `klein-web bench` on the same machine) adds
browser / native-EP and browser / PyTorch ratios for the transformer step, text encoder and VAE.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.check.bench.browser_common import check_variant, run_environment
from builder.check.bench.browser_report import (
    JSON_NAME,
    MARKDOWN_NAME,
    kernel_lines,
    markdown,
    native_ratios,
    read_native,
    save_results,
    step_runner,
    timeline_lines,
)
from builder.check.bench.output import check_out
from builder.check.driver.memory import BrowserMemorySampler
from builder.check.driver.page import Form, generate, opened
from builder.check.driver.serving import ByteCounter, check_models, serving, site
from builder.check.driver.session import launched, local_session, probe_adapter
from builder.check.driver.wasm_heap import hooked_worker, wasm_heap_bytes
from builder.errors import InputError, RegressionError
from builder.pipeline import limits
from builder.pipeline.limits import parse_size

Log = Callable[[str], None]

PROMPTS = ("a lighthouse on a cliff at dusk, oil painting", "a red fox in fresh snow, morning light")


# --- One image through the UI -----------------------------------------------------------------------------


# Seconds between the click and the image that the job's own timings may leave out (the page's side of the run).
UNACCOUNTED_S = 2.0


@dataclass
class ImageRun:
    phase: str
    variant: str
    size: str
    seconds: float  # from the click (or the reload, for `warm`) to the finished image
    bytes_fetched: int
    timings: dict[str, Any]
    step_ms: list[float]
    graphs: dict[str, Any]
    memory: dict[str, Any]
    wasm_heap_bytes: int | None
    kernels: dict[str, Any] | None = None  # the app's per-component kernel times (phase `profiled`)
    memory_mode: str = ""  # the app's memory mode for the run (models/memory_mode.js): fast or lean
    preview: dict[str, Any] | None = None  # the step previews' map, count and milliseconds (GenerateResult.preview)
    timeline: list[dict[str, Any]] = field(default_factory=list)  # the app's: what ran when (protocol.js)

    def store_gb_per_s(self, download_s: float) -> float | None:
        """The bytes fetched over the image's download stage; None when nothing was fetched, or when the image's job
        does not account for the wait: a job run again (a GPU feature dropped, a lean-mode retry) fetched in an
        earlier attempt, whose time its timings do not hold."""
        if not self.bytes_fetched or download_s <= 0.05 or self.before_request_s() > UNACCOUNTED_S:
            return None
        return self.bytes_fetched / 1e9 / download_s

    def before_request_s(self) -> float:
        """The time before the app's request began: the page loading and its worker starting (a reload), the click,
        or an earlier attempt of a job run again."""
        return max(0.0, self.seconds - float(self.timings.get("total", 0)) / 1000)

    def row(self) -> dict[str, Any]:
        timings = self.timings
        steps = self.step_ms
        download_s = timings.get("download", 0) / 1000
        loads = {c: g.get("loadMs", 0) / 1000 for c, g in self.graphs.items() if isinstance(g, dict)}
        return {
            "phase": self.phase,
            "variant": self.variant,
            "size": self.size,
            "seconds": self.seconds,
            "bytes_fetched": self.bytes_fetched,
            "store_gb_per_s": self.store_gb_per_s(download_s),
            "download_s": download_s,
            "load_s": loads,
            "encode_ms": timings.get("encode"),
            "decode_ms": timings.get("decode"),
            "first_step_ms": steps[0] if steps else None,
            "step_ms": statistics.median(steps[1:]) if len(steps) > 1 else (steps[0] if steps else None),
            "image_s": self.image_seconds(),
            "total_s": timings.get("total", 0) / 1000,
            "variants": {c: str(g.get("variant")) for c, g in self.graphs.items() if isinstance(g, dict)},
            "how": {
                c: f"{g.get('variant')}/{g.get('ep')}, {g.get('detail', '')}"
                for c, g in self.graphs.items()
                if isinstance(g, dict)
            },
            "memory": self.memory,
            "memory_mode": self.memory_mode,
            # What ran the transformer's steps: our kernels (with their dispatches a step) or onnxruntime.
            "step": (self.graphs.get("transformer") or {}).get("step"),
            "preview_ms": self.preview["ms"] / self.preview["frames"]
            if self.preview and self.preview["frames"]
            else None,
            "wasm_heap_gib": None if self.wasm_heap_bytes is None else self.wasm_heap_bytes / 2**30,
            "before_request_s": self.before_request_s(),
            "timeline": self.timeline,
            **({"kernels": self.kernels} if self.kernels is not None else {}),
        }

    def image_seconds(self) -> float:
        """Encode, latents, timesteps, every step, decode: the image itself, without downloads and session creation."""
        t = self.timings
        return sum(float(t.get(k) or 0) for k in ("encode", "latents", "timesteps", "denoise", "decode")) / 1000


def _generate(
    page: Any, *, prompt: str, seed: int, size: str, steps: int, timeout_s: float, log: Log
) -> tuple[float, dict[str, Any]]:
    width, height = parse_size(size)
    return generate(
        page, Form(prompt=prompt, seed=seed, width=width, height=height, steps=steps), timeout_s=timeout_s, log=log
    )


@contextlib.contextmanager
def _ready_page(context: Any, url: str) -> Iterator[tuple[Any, Any]]:
    """The app's page and its worker, the wasm-heap hook installed before the first session."""
    with opened(context, url) as page:
        yield page, hooked_worker(page)


# --- Entry point ----------------------------------------------------------------------------------------


def check_run_arguments(
    *, precisions: Sequence[str], sizes: Sequence[str], steps: int, seed: int, timeout_s: float
) -> None:
    """InputError for an argument the run would only trip over with the browser running."""
    if not precisions:
        raise InputError("--precision is empty; give one or more transformer variants, e.g. --precision q4f16,q4.")
    if not sizes:
        raise InputError("--sizes is empty; give one or more image sizes, e.g. --sizes 512x512,1024x1024.")
    for size in sizes:
        parse_size(size, where="--sizes")
    limits.check_steps(steps, name="--steps")
    limits.check_seed(seed, name="--seed")
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise InputError(f"--timeout {timeout_s:g}: give a positive number of seconds per image, e.g. 1800.")


def run_variant(
    context: Any,
    base_url: str,
    *,
    variant: str,
    sizes: Sequence[str],
    steps: int,
    seed: int,
    counter: ByteCounter,
    sampler: BrowserMemorySampler,
    timeout_s: float,
    log: Log,
    kernels: bool = False,
    memory_mode: str = "auto",
    step_kernels: bool = True,
) -> list[ImageRun]:
    runs: list[ImageRun] = []

    def record(phase: str, size: str, seconds: float, info: dict[str, Any], worker: Any, fetched: int) -> None:
        run = ImageRun(
            phase=phase,
            variant=variant,
            size=size,
            seconds=seconds,
            bytes_fetched=fetched,
            timings=info.get("timings") or {},
            step_ms=list(info.get("stepMs") or []),
            graphs=info.get("graphs") or {},
            memory=sampler.figures(),
            wasm_heap_bytes=wasm_heap_bytes(worker),
            kernels=info.get("kernels"),
            memory_mode=str((info.get("memory") or {}).get("mode", "")),
            preview=info.get("preview"),
            timeline=list(info.get("timeline") or []),
        )
        runs.append(run)
        row = run.row()
        log(
            f"  {variant} {size} {phase}: {run.seconds:.1f} s to the image (image itself {row['image_s']:.2f} s: "
            f"encode {row['encode_ms'] or 0:.0f} ms, step {row['step_ms'] or 0:.0f} ms (first "
            f"{row['first_step_ms'] or 0:.0f}), decode {row['decode_ms'] or 0:.0f} ms), fetched "
            f"{fetched / 1e9:.2f} GB, load "
            + ", ".join(f"{c} {s:.1f}s" for c, s in row["load_s"].items())
            + (f", previews {row['preview_ms']:.2f} ms/step" if row["preview_ms"] is not None else "")
            + f"; steps on {step_runner(row['step'])}"
        )

    url = f"{base_url}/?precision={variant}&memory={memory_mode}&preview=on" + (
        "" if step_kernels else "&step-kernels=off"
    )
    with _ready_page(context, url) as (page, worker):
        for index, size in enumerate(sizes):
            counter.bytes = 0
            sampler.reset()
            seconds, info = _generate(
                page, prompt=PROMPTS[0], seed=seed + index, size=size, steps=steps, timeout_s=timeout_s, log=log
            )
            record("cold" if index == 0 else "new size", size, seconds, info, worker, counter.bytes)

    # Warm: a new page load; the store already holds every file.
    counter.bytes = 0
    sampler.reset()
    started = time.perf_counter()
    with _ready_page(context, url) as (page, worker):
        _seconds, info = _generate(
            page, prompt=PROMPTS[0], seed=seed, size=sizes[-1], steps=steps, timeout_s=timeout_s, log=log
        )
        record("warm reload", sizes[-1], time.perf_counter() - started, info, worker, counter.bytes)
        for line in timeline_lines(runs[-1].row()):
            log("    " + line)
        sampler.reset()
        seconds, info = _generate(
            page, prompt=PROMPTS[1], seed=seed + 1, size=sizes[-1], steps=steps, timeout_s=timeout_s, log=log
        )
        record("hot", sizes[-1], seconds, info, worker, counter.bytes)
        # The same image without the step previews: the step time they cost.
        page.uncheck("#preview")
        seconds, info = _generate(
            page, prompt=PROMPTS[1], seed=seed + 1, size=sizes[-1], steps=steps, timeout_s=timeout_s, log=log
        )
        record("hot, no preview", sizes[-1], seconds, info, worker, counter.bytes)

    if kernels:
        with _ready_page(context, f"{url}&profile=kernels") as (page, worker):
            for index, size in enumerate(sizes):
                sampler.reset()
                seconds, info = _generate(
                    page,
                    prompt=PROMPTS[index % 2],
                    seed=seed + index,
                    size=size,
                    steps=steps,
                    timeout_s=timeout_s,
                    log=log,
                )
                if not isinstance(info.get("kernels"), dict):
                    raise RegressionError("the app ran with ?profile=kernels but reported no kernel times")
                record("profiled", size, seconds, info, worker, counter.bytes)
                for line in kernel_lines(runs[-1].row()):
                    log("    " + line)
    return runs


def main(
    out_dir: Path,
    *,
    models_dir: Path,
    log: Log,
    precisions: Sequence[str] = ("q4f16", "q4"),
    sizes: Sequence[str] = ("512x512", "1024x1024"),
    steps: int = 4,
    seed: int = 0,
    gpu: bool = True,
    browser_path: Path | None = None,
    native_json: Path | None = None,
    timeout_s: float = 1800.0,
    dist_dir: Path | None = None,
    f16_toggle: bool = True,
    kernels: bool = False,
    memory_mode: str = "auto",
    step_kernels: bool = True,
) -> list[dict[str, Any]]:
    # 1. Check inputs before anything slow starts.
    check_run_arguments(precisions=precisions, sizes=sizes, steps=steps, seed=seed, timeout_s=timeout_s)
    models_dir, repo = check_models(models_dir, log=log)
    for variant in precisions:
        check_variant(repo, models_dir, variant)
    if native_json is not None:
        read_native(Path(native_json))
    out_dir = check_out(out_dir, json_name=JSON_NAME, markdown_name=MARKDOWN_NAME)
    session = local_session(browser_path, gpu=gpu, f16_toggle=f16_toggle)

    # 2. Serve the app and the models, counting the model bytes sent.
    dist_dir = site(dist_dir, log=log)
    counter, sampler = ByteCounter(), BrowserMemorySampler()
    rows: list[dict[str, Any]] = []
    environment: dict[str, Any] = {}
    sampler.start()
    try:
        with serving(dist_dir, models_dir, log=log, models_manifest=repo, middleware=counter.wrap) as base_url:
            # 3. One fresh profile per variant: its first image is a cold start.
            for variant in precisions:
                with (
                    tempfile.TemporaryDirectory(prefix="klein-bench-profile-") as profile,
                    launched(session, log=log, profile=Path(profile)),
                ):
                    session.adapter = probe_adapter(session, base_url)
                    runs = run_variant(
                        session.context,
                        base_url,
                        variant=variant,
                        sizes=sizes,
                        steps=steps,
                        seed=seed,
                        counter=counter,
                        sampler=sampler,
                        timeout_s=timeout_s,
                        log=log,
                        kernels=kernels,
                        memory_mode=memory_mode,
                        step_kernels=step_kernels,
                    )
                    rows += [run.row() for run in runs]
                environment = {
                    **run_environment(session, models_dir, dist_dir),
                    "adapter_features": session.adapter.get("features", []),
                    "steps": steps,
                    "f16_toggle": f16_toggle,
                    "step_kernels": step_kernels,
                }
                save_results(out_dir, environment, rows, native_ratios(rows, native_json))
    finally:
        sampler.stop()
    ratios = native_ratios(rows, native_json)
    for line in markdown(environment, rows, ratios):
        log(line)
    return rows
