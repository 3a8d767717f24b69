"""The `klein-web` command line: thin click commands that parse flags and call one function each.

Implementations are imported inside each command so `klein-web serve --help` loads no ML library, and
KleinWebError is turned into a clean message and exit code here, and only here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from builder import DEFAULT_DIST, DEFAULT_MODEL_BASE, DEFAULT_REPO, __version__
from builder.check.regress.cases import RegressOptions
from builder.errors import KleinWebError
from builder.pipeline import limits

# The options object owns regress's defaults; the flags show them.
REGRESS_DEFAULTS = RegressOptions()


def log(message: str) -> None:
    """Progress and status lines go to stderr, so stdout stays clean for results."""
    click.echo(message, err=True)


class KleinGroup(click.Group):
    """Turns KleinWebError into `Error: ...` and exit code 1, without a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except KleinWebError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=KleinGroup)
@click.version_option(__version__, prog_name="klein-web")
def main() -> None:
    """Build, serve and test the FLUX.2 [klein] in-browser app (WebGPU + onnxruntime-web)."""


@main.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=DEFAULT_DIST, show_default=True)
@click.option(
    "--model-base", default=DEFAULT_MODEL_BASE, show_default=True, help="URL the app downloads the model from."
)
@click.option(
    "--onnxruntime-web",
    "onnxruntime_web",
    default=None,
    metavar="VERSION",
    help="Build with this onnxruntime-web version instead of the pinned one (installed on first use into "
    "web_src/.onnxruntime-web/), to time two versions against each other.",
)
def build(out_dir: Path, model_base: str, onnxruntime_web: str | None) -> None:
    """Bundle web_src/ into a static site in OUT (a no-op when nothing changed)."""
    from builder.site import bundle

    result = bundle.build(out_dir, model_base=model_base, log=log, onnxruntime_web=onnxruntime_web)
    state = "built" if result.changed else "up to date"
    log(f"{out_dir}: {state} in {result.seconds:.2f} s")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="TCP port (0: any free port)."
)
@click.option(
    "--models",
    "models_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Local model repository to mount at /models/ (the app then loads from it).",
)
@click.option("--dist", "dist_dir", type=click.Path(path_type=Path), default=DEFAULT_DIST, show_default=True)
@click.option(
    "--model-base",
    default=None,
    help=f"Model URL baked into a build [default: the one DIST was built with, else {DEFAULT_MODEL_BASE}]",
)
@click.option("--open", "open_browser", is_flag=True, help="Open the app in the default browser.")
@click.option("--watch", is_flag=True, help="Rebuild when web_src/ changes.")
def serve(
    host: str,
    port: int,
    models_dir: Path | None,
    dist_dir: Path,
    model_base: str | None,
    open_browser: bool,
    watch: bool,
) -> None:
    """Build if stale, then serve the app with the headers WebGPU + threads need.

    A --models folder without manifest.json gets one built from its files, rebuilt whenever a file there changes
    (size, times, inode); a folder no longer complete is answered with 503 and the reason. A connection that sends
    no complete request head within 10 s is closed; connections are capped below the open-file limit (the oldest
    waiting one makes room), each condition logged once.
    """
    from builder.site import server

    server.serve(
        dist_dir,
        host=host,
        port=port,
        models_dir=models_dir,
        model_base=model_base,
        open_browser=open_browser,
        watch=watch,
        log=log,
    )


@main.command()
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--precision", type=click.Choice(["q4", "fp32", "q4f16"]), default="q4", show_default=True)
@click.option(
    "--weights",
    type=click.Choice(["compact", "seed"]),
    default="compact",
    show_default=True,
    help="How the q4/q4f16 graphs store their weights: compact (4-bit token embedding and AdaLN, fp16-stored "
    "scales: the smaller download) or seed (the layout of the seed repository on the Hub).",
)
@click.option(
    "--lora",
    "loras",
    multiple=True,
    metavar="PATH[:SCALE]",
    help="A transformer LoRA (.safetensors: diffusers/PEFT, kohya or BFL keys) merged into the weights, "
    "SCALE 1.0 unless given; repeat to add several, in order.",
)
@click.option(
    "--jobs",
    type=int,
    default=None,
    help="Build the text encoder, transformer and VAE in this many processes at once (1-3; the same "
    "bytes) [default: as many as the free memory holds].",
)
def convert(src: Path, out: Path, precision: str, weights: str, loras: tuple[str, ...], jobs: int | None) -> None:
    """Convert a diffusers FLUX.2 [klein] folder SRC into the ONNX web layout in OUT.

    OUT is replaced only by a finished, checked repository. Refused with one line, OUT left as it was: a LoRA
    holding NaN or infinite values (factors, alpha, lora_alpha), a scale or merge that makes a weight non-finite
    or beyond float16's 65504, and malformed LoRA files (docs/refusals.md).
    """
    from builder.repo import convert as converter
    from builder.repo.lora import parse_spec
    from builder.repo.weight_format import FORMATS

    converter.convert(
        src,
        out,
        precision=precision,
        log=log,
        loras=[parse_spec(text) for text in loras],
        weights=FORMATS[weights],
        jobs=jobs,
    )
    log(f"Done. Serve it with: klein-web serve --models {out}")


@main.command("make-tiny")
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--full-size",
    is_flag=True,
    help="The real klein-4B sizes instead (random bf16 weights, ~17 GB, diffusers folder only): "
    "measure `klein-web convert` on it.",
)
def make_tiny(out: Path, seed: int, full_size: bool) -> None:
    """Make a tiny random-weight klein (diffusers + q4 + fp32 web repos) in OUT for tests."""
    from builder.repo import tiny

    paths = tiny.make_tiny(out, seed=seed, log=log, full_size=full_size)
    for name, path in paths.items():
        click.echo(f"{name}: {path}")


@main.command()
@click.option("--repo", default=DEFAULT_REPO, show_default=True)
@click.option("--revision", default="main", show_default=True)
@click.option(
    "--dir",
    "dest_text",
    default="models/klein-4b",
    show_default=True,
    help="A new or empty folder, or a model repository fetched before (it is updated).",
)
def fetch(repo: str, revision: str, dest_text: str) -> None:
    """Download the web model repository (resumable) and write its manifest.

    Refused before anything is written: an empty --dir, and a --dir that is a file or a non-empty folder other
    than a model repository (fetch's marker .klein-web-fetch, a klein-web manifest.json, or the seed layout).
    """
    from builder.repo import fetch_dest, hub

    dest = fetch_dest.check_path_text(dest_text)
    hub.fetch(repo, revision=revision, dest=dest, log=log)
    click.echo(f"Model ready. Next: klein-web serve --models {dest}")


@main.command()
@click.argument("model_dir", type=click.Path(path_type=Path))
@click.option("--prompt", required=True)
@click.option("--seed", default=42, show_default=True, type=int)
@click.option(
    "--size",
    default=None,
    help="WIDTHxHEIGHT, multiples of 16 [default: 512x512; with --image the first image's used size; with "
    "--mask always the image to inpaint's].",
)
@click.option("--steps", default=4, show_default=True, type=click.IntRange(limits.STEPS_MIN, limits.STEPS_MAX))
@click.option(
    "--image",
    "images",
    multiple=True,
    type=click.Path(path_type=Path),
    help=f"Reference image (PNG, JPEG, WebP; up to {limits.REFERENCES_MAX}), repeatable. With --mask the "
    "first one is the image to inpaint.",
)
@click.option(
    "--mask",
    type=click.Path(path_type=Path),
    default=None,
    help="Inpainting mask: white repaints, black keeps; any size.",
)
@click.option(
    "--strength",
    type=float,
    default=None,
    help=f"Inpainting: the share of the schedule that runs, 0..1 [default: {limits.STRENGTH_DEFAULT}]; "
    "only with --mask.",
)
@click.option(
    "--variant",
    "variants",
    multiple=True,
    metavar="COMPONENT=VARIANT",
    help="Run this variant of a component (repeatable), e.g. vae_decoder=fp16 to match the graph a GPU ran; "
    "default: the most exact one the repository has.",
)
@click.option("--out", "out_png", type=click.Path(path_type=Path), required=True)
def reference(
    model_dir: Path,
    prompt: str,
    seed: int,
    size: str | None,
    steps: int,
    images: tuple[Path, ...],
    mask: Path | None,
    strength: float | None,
    variants: tuple[str, ...],
    out_png: Path,
) -> None:
    """Run the whole pipeline on onnxruntime CPU (the browser's reference) and write a PNG.

    Text-to-image, editing with --image, or inpainting with --image and --mask, as diffusers' Flux2KleinPipeline
    and Flux2KleinInpaintPipeline compute them.
    """
    from builder.errors import InputError
    from builder.pipeline import reference as ref

    if strength is not None and mask is None:
        raise InputError("--strength only applies to inpainting; pass --mask too, or leave --strength out.")
    pinned = ref.parse_variants(variants)
    # Without --size: editing and inpainting take the size from their images, text-to-image 512x512.
    width: int | None = None
    height: int | None = None
    if size is not None:
        width, height = limits.parse_size(size)
    elif not images and mask is None:
        width, height = 512, 512
    ref.generate_png(
        model_dir,
        prompt=prompt,
        seed=seed,
        width=width,
        height=height,
        steps=steps,
        out=out_png,
        log=log,
        images=images,
        mask=mask,
        strength=ref.DEFAULT_STRENGTH if strength is None else strength,
        variants=pinned,
    )
    click.echo(str(out_png))


@main.command()
@click.option("--models", "models_dir", type=click.Path(path_type=Path), default=REGRESS_DEFAULTS.models_dir)
@click.option("--prompt", default=REGRESS_DEFAULTS.prompt)
@click.option("--seed", default=REGRESS_DEFAULTS.seed, show_default=True, type=int)
@click.option(
    "--size",
    default=None,
    help=f"WIDTHxHEIGHT  [default: {REGRESS_DEFAULTS.size}; editing and inpainting: the first image's]",
)
@click.option("--steps", default=REGRESS_DEFAULTS.steps, show_default=True, type=int)
@click.option(
    "--image",
    "images",
    type=click.Path(path_type=Path),
    multiple=True,
    help="Editing: a reference image (repeatable). With --mask: the image to inpaint, then references.",
)
@click.option("--mask", type=click.Path(path_type=Path), default=None, help="Inpainting mask (white repaints).")
@click.option(
    "--strength", type=float, default=None, help=f"Inpainting strength in [0, 1]  [default: {limits.STRENGTH_DEFAULT}]"
)
@click.option(
    "--cases",
    "cases_file",
    type=click.Path(path_type=Path),
    default=REGRESS_DEFAULTS.cases_file,
    help="JSON or TOML file with several cases, run in one browser launch.",
)
@click.option("--reference", "reference_png", type=click.Path(path_type=Path), default=REGRESS_DEFAULTS.reference_png)
@click.option("--reference-from-cpu", is_flag=True, help="Make the reference with `klein-web reference`.")
@click.option("--browser", "browser_path", type=click.Path(path_type=Path), default=REGRESS_DEFAULTS.browser_path)
@click.option("--headed", is_flag=True)
@click.option("--gpu/--software", default=REGRESS_DEFAULTS.gpu, help="Real GPU (Vulkan) or SwiftShader.")
@click.option(
    "--report",
    "report_dir",
    type=click.Path(path_type=Path),
    default=REGRESS_DEFAULTS.report_dir,
    show_default=True,
    help="A new or empty folder, or an earlier report (its files are replaced); any other non-empty folder is refused.",
)
@click.option("--psnr-min", default=REGRESS_DEFAULTS.psnr_min, show_default=True, type=float)
@click.option("--timeout", "timeout_s", default=REGRESS_DEFAULTS.timeout_s, show_default=True, type=float)
@click.option(
    "--dist",
    "dist_dir",
    type=click.Path(path_type=Path),
    default=REGRESS_DEFAULTS.dist_dir,
    help="Serve this already-built app as it is (no node needed); default: build dist/ if stale.",
)
@click.option(
    "--precision",
    type=click.Choice(["q4", "q4f16", "fp32"]),
    default=REGRESS_DEFAULTS.precision,
    help="Force the app's graph variant (its ?precision=); default: the best the adapter runs.",
)
@click.option(
    "--f16-toggle/--no-f16-toggle",
    default=REGRESS_DEFAULTS.f16_toggle,
    show_default=True,
    help="Linux + NVIDIA: start Chromium with the Dawn toggle that exposes shader-f16 (--gpu only).",
)
@click.option(
    "--profile",
    type=click.Path(path_type=Path),
    default=REGRESS_DEFAULTS.profile,
    help="Browser profile folder to use and keep: its model store survives, so re-runs download nothing.",
)
@click.option(
    "--connect",
    default=REGRESS_DEFAULTS.connect,
    metavar="WS_ENDPOINT",
    help="Drive the browser of a Playwright browser server (`playwright launch-server`) instead of "
    "launching one: its ws:// address.",
)
@click.option(
    "--host",
    default=REGRESS_DEFAULTS.host,
    show_default=True,
    help="Address the app server listens on (0.0.0.0: every interface, for a browser elsewhere).",
)
@click.option(
    "--port", default=REGRESS_DEFAULTS.port, show_default=True, type=int, help="Port of the app server; 0: a free one."
)
@click.option(
    "--advertise",
    default=REGRESS_DEFAULTS.advertise,
    metavar="URL",
    help="The address the browser opens this run's server at (a LAN name, a tunnel); default: http://HOST:PORT.",
)
@click.option(
    "--app-url",
    default=REGRESS_DEFAULTS.app_url,
    metavar="URL",
    help="Open a deployed app (its address with ?model=) instead of serving one; --models names the same "
    "repository here, for the checks and the CPU reference.",
)
@click.option(
    "--shard",
    default=REGRESS_DEFAULTS.shard,
    metavar="I/N",
    help="Run every N-th case of --cases, from the I-th (I from 1 to N); merge with `regress-merge`.",
)
def regress(
    models_dir: Path | None,
    prompt: str | None,
    seed: int,
    size: str | None,
    steps: int,
    images: tuple[Path, ...],
    mask: Path | None,
    strength: float | None,
    cases_file: Path | None,
    reference_png: Path | None,
    reference_from_cpu: bool,
    browser_path: Path | None,
    headed: bool,
    gpu: bool,
    report_dir: Path,
    psnr_min: float,
    timeout_s: float,
    dist_dir: Path | None,
    precision: str | None,
    f16_toggle: bool,
    profile: Path | None,
    connect: str | None,
    host: str,
    port: int,
    advertise: str | None,
    app_url: str | None,
    shard: str | None,
) -> None:
    """Run the built app in Chromium and compare its image with a reference (exit 0 pass, 1 fail, 2 could not run).

    Refused before the browser starts (exit 2, one line): a --report folder that holds files and is no earlier
    report; a case named like one of the run's own files (report.json, browser.log, candidate.png,
    reference.png, diff.png), in any letter case; an input image or mask `reference` refuses (beyond 64
    megapixels, Pillow's bomb limit, not PNG/JPEG/WebP, truncated); a --reference PNG Pillow will not decode; a
    cases file that is not valid or nests too deeply. An edit or inpaint case without a size runs at its first
    image's upright size (EXIF orientation applied), as `reference` and the app use it.
    """
    from builder.check.regress import run as regression

    options = RegressOptions(
        models_dir=models_dir,
        prompt=prompt,
        seed=seed,
        size=size or REGRESS_DEFAULTS.size,
        size_given=size is not None,
        images=images,
        mask=mask,
        strength=strength,
        steps=steps,
        cases_file=cases_file,
        reference_png=reference_png,
        reference_from_cpu=reference_from_cpu,
        browser_path=browser_path,
        headed=headed,
        gpu=gpu,
        report_dir=report_dir,
        psnr_min=psnr_min,
        timeout_s=timeout_s,
        dist_dir=dist_dir,
        precision=precision,
        f16_toggle=f16_toggle,
        profile=profile,
        connect=connect,
        host=host,
        port=port,
        advertise=advertise,
        app_url=app_url,
        shard=shard,
    )
    try:
        code = regression.main(options, log=log)
    except KleinWebError as exc:
        click.echo(f"could not run: {exc}", err=True)
        sys.exit(2)
    sys.exit(code)


@main.command("regress-merge")
@click.argument("out_dir", type=click.Path(path_type=Path))
@click.argument("shard_dirs", nargs=-1, type=click.Path(path_type=Path))
def regress_merge(out_dir: Path, shard_dirs: tuple[Path, ...]) -> None:
    """Merge the --report folders of `regress --shard I/N` runs into OUT_DIR: one verdict (exit 0 pass, 1 fail, 2 could
    not run), every case's folder, each shard's browser and adapter.

    Refused (exit 2, one line, OUT_DIR untouched): shards of different cases files, flags, model repositories or
    --precision; a shard missing, given twice or interrupted; an OUT_DIR that is a non-empty folder but no report.
    """
    from builder.check.regress import merge

    try:
        code = merge.merge(out_dir, shard_dirs, log=log)
    except KleinWebError as exc:
        click.echo(f"could not merge: {exc}", err=True)
        sys.exit(2)
    sys.exit(code)


@main.command("browser-bench")
@click.option(
    "--models",
    "models_dir",
    type=click.Path(path_type=Path),
    required=True,
    help="Model folder to serve (e.g. a full-size repo from `klein-web convert`).",
)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench"), show_default=True)
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
@click.option("--gpu/--software", default=True, help="Real GPU (Vulkan on Linux) or SwiftShader.")
@click.option("--browser", "browser_path", type=click.Path(path_type=Path), default=None)
@click.option(
    "--native",
    "native_json",
    type=click.Path(path_type=Path),
    default=None,
    help="bench.json of `klein-web bench` on the same machine: adds browser / native-EP / PyTorch ratios.",
)
@click.option(
    "--dist",
    "dist_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Serve this already-built app as it is; default: build dist/ if stale.",
)
@click.option("--timeout", "timeout_s", default=1800.0, show_default=True, type=float, help="Per image, seconds.")
@click.option(
    "--f16-toggle/--no-f16-toggle",
    default=True,
    show_default=True,
    help="Linux + NVIDIA: start Chromium with the Dawn toggle that exposes shader-f16 (as a user adds it).",
)
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
) -> None:
    """The real app in Chromium, driven like a user: per-stage times cold / warm / hot, memory peaks.

    Refused before anything is launched (exit 2, one line): an --out that cannot be written or is a file, a
    browser-bench.json there that no earlier run wrote, a browser-bench.md without one, either name a folder or a
    symlink; a --native file that is no bench.json; an empty --precision or --sizes, a size that is no WxH,
    --steps outside 1..50, --seed outside [0, 2^32), a --timeout that is not a positive number.
    """
    from builder.check.bench import browser as bench

    try:
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
        )
    except KleinWebError as exc:
        click.echo(f"could not run: {exc}", err=True)
        sys.exit(2)


@main.command("load-bench")
@click.option(
    "--models",
    "models_dir",
    type=click.Path(path_type=Path),
    required=True,
    help="Model folder to serve (e.g. a full-size repo from `klein-web convert`).",
)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench"), show_default=True)
@click.option(
    "--precision", default=None, help="Force a transformer / text encoder variant; default: the app's choice."
)
@click.option(
    "--sizes",
    default="512x512,1024x1024",
    show_default=True,
    help="Comma-separated image sizes: the transformer's session is created for each.",
)
@click.option(
    "--gpu/--software",
    default=False,
    show_default=True,
    help="Real GPU (Vulkan on Linux) or SwiftShader (no GPU needed).",
)
@click.option("--browser", "browser_path", type=click.Path(path_type=Path), default=None)
@click.option(
    "--dist",
    "dist_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Serve this already-built app as it is; default: build dist/ if stale.",
)
@click.option(
    "--f16-toggle/--no-f16-toggle",
    default=True,
    show_default=True,
    help="Linux + NVIDIA: start Chromium with the Dawn toggle that exposes shader-f16.",
)
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

    try:
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
    except KleinWebError as exc:
        click.echo(f"could not run: {exc}", err=True)
        sys.exit(2)


@main.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("bench"), show_default=True)
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


if __name__ == "__main__":
    main()
