"""`browser-bench`, `load-bench` and `bench`: the app's speed and memory in Chromium, and the WebGPU EP's natively."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
from click.decorators import FC

from builder.cli.shared import browser_option, dist_option, exit_2_on_error, f16_toggle_option, gpu_option, log


def models_option() -> Callable[[FC], FC]:
    return click.option(
        "--models",
        "models_dir",
        type=click.Path(path_type=Path),
        required=True,
        help="Model folder to serve (e.g. a full-size repo from `klein-web convert`).",
    )


def out_option() -> Callable[[FC], FC]:
    return click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench"), show_default=True)


@click.command("browser-bench")
@models_option()
@out_option()
@click.option(
    "--precision",
    "precisions",
    default="q4f16,q4",
    show_default=True,
    help="Comma-separated transformer variants; each gets a fresh browser profile (a cold start).",
)
@click.option("--sizes", default="512x512,1024x1024", show_default=True, help="Comma-separated image sizes.")
@click.option("--steps", default=4, show_default=True, type=int)
@click.option("--seed", default=0, show_default=True, type=int)
@gpu_option(default=True, text="Real GPU (Vulkan on Linux) or SwiftShader.")
@browser_option()
@click.option(
    "--native",
    "native_json",
    type=click.Path(path_type=Path),
    default=None,
    help="bench.json of `klein-web bench` on the same machine: adds browser / native-EP / PyTorch ratios.",
)
@dist_option()
@click.option("--timeout", "timeout_s", default=1800.0, show_default=True, type=float, help="Per image, seconds.")
@f16_toggle_option(note="as a user adds it")
@click.option(
    "--kernels",
    is_flag=True,
    default=False,
    help="Also one profiled image per size (?profile=kernels): GPU time per kernel program, per component.",
)
@click.option(
    "--memory",
    "memory_mode",
    type=click.Choice(["auto", "fast", "lean"]),
    default="auto",
    show_default=True,
    help="The app's memory mode (its ?memory=): lean holds one session at a time.",
)
@click.option(
    "--step-kernels",
    "step_kernels",
    type=click.Choice(["on", "off"]),
    default="on",
    show_default=True,
    help="Run the transformer's steps on our WGSL kernels where they can (on), or on onnxruntime (off: the app's "
    "?step-kernels=off); each row says which ran.",
)
def browser_bench(
    models_dir: Path,
    out_dir: Path,
    precisions: str,
    sizes: str,
    steps: int,
    seed: int,
    gpu: bool,
    browser_path: Path | None,
    native_json: Path | None,
    dist_dir: Path | None,
    timeout_s: float,
    f16_toggle: bool,
    kernels: bool,
    memory_mode: str,
    step_kernels: str,
) -> None:
    """The real app in Chromium, driven like a user: per-stage times cold / warm / hot, memory peaks.

    Refused before anything is launched (exit 2, one line): an --out that cannot be written or is a file, a
    browser-bench.json there that no earlier run wrote, a browser-bench.md without one, either name a folder or a
    symlink; a --native file that is no bench.json; an empty --precision or --sizes, a size that is no WxH,
    --steps outside 1..50, --seed outside [0, 2^32), a --timeout that is not a positive number.
    """
    from builder.check.bench import browser as bench

    with exit_2_on_error("run"):
        bench.main(
            out_dir,
            models_dir=models_dir,
            log=log,
            precisions=[p for p in precisions.split(",") if p],
            sizes=[s for s in sizes.split(",") if s],
            steps=steps,
            seed=seed,
            gpu=gpu,
            browser_path=browser_path,
            native_json=native_json,
            dist_dir=dist_dir,
            timeout_s=timeout_s,
            f16_toggle=f16_toggle,
            kernels=kernels,
            memory_mode=memory_mode,
            step_kernels=step_kernels == "on",
        )


@click.command("load-bench")
@models_option()
@out_option()
@click.option(
    "--precision", default=None, help="Force a transformer / text encoder variant; default: the app's choice."
)
@click.option(
    "--sizes",
    default="512x512,1024x1024",
    show_default=True,
    help="Comma-separated image sizes: the transformer's session is created for each.",
)
@gpu_option(default=False, text="Real GPU (Vulkan on Linux) or SwiftShader (no GPU needed).", show_default=True)
@browser_option()
@dist_option()
@f16_toggle_option()
@click.option(
    "--repeat",
    default=0,
    show_default=True,
    type=int,
    help="Create the transformer this many more times at the first size (memory that is not given back).",
)
def load_bench(
    models_dir: Path,
    out_dir: Path,
    precision: str | None,
    sizes: str,
    gpu: bool,
    browser_path: Path | None,
    dist_dir: Path | None,
    f16_toggle: bool,
    repeat: int,
) -> None:
    """Every session of a model created and released in Chromium: load time and memory peaks, no image.

    Refused before anything is launched (exit 2, one line): an --out that cannot be written or is a file, a
    load-bench.json there that no earlier run wrote, a load-bench.md without one, either name a folder or a symlink;
    an empty --precision or --sizes, a size that is no WxH.
    """
    from builder.check.bench import load as bench

    with exit_2_on_error("run"):
        bench.main(
            out_dir,
            models_dir=models_dir,
            log=log,
            sizes=[s for s in sizes.split(",") if s],
            precision=precision,
            gpu=gpu,
            browser_path=browser_path,
            dist_dir=dist_dir,
            f16_toggle=f16_toggle,
            repeat=repeat,
        )


@click.command()
@out_option()
@click.option(
    "--scale",
    default="full",
    show_default=True,
    type=click.Choice(["full", "tiny"]),
    help="full: the real klein-4B sizes (needs a GPU); tiny: make-tiny's configs, a quick smoke test.",
)
@click.option(
    "--components",
    default="text_encoder,transformer,vae_decoder",
    show_default=True,
    help="Comma-separated components to measure.",
)
@click.option(
    "--provider",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "webgpu", "cpu"]),
    help="onnxruntime EP: webgpu (onnxruntime-ep-webgpu), cpu, or auto (webgpu if it finds an adapter).",
)
@click.option("--warmup", default=2, show_default=True, type=int)
@click.option("--repeats", default=5, show_default=True, type=int, help="Timed runs; the median is reported.")
@click.option("--workdir", type=click.Path(path_type=Path), default=None, help="Where the ONNX graphs are built.")
@click.option(
    "--browser-overhead",
    is_flag=True,
    help="Instead: the app's time outside session.run on make-tiny at 512x512 (headless Chromium).",
)
def bench(
    out_dir: Path,
    scale: str,
    components: str,
    provider: str,
    warmup: int,
    repeats: int,
    workdir: Path | None,
    browser_overhead: bool,
) -> None:
    """GPU benchmark: WebGPU EP vs PyTorch bf16 on a full-size random-weight klein."""
    from builder.check.bench import native, overhead

    if browser_overhead:
        overhead.browser_overhead(out_dir, log=log)
        return
    native.main(
        out_dir,
        log=log,
        scale=scale,
        components=[c for c in components.split(",") if c],
        provider=provider,
        warmup=warmup,
        repeats=repeats,
        workdir=workdir,
    )
