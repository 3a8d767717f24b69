"""`regress` and `regress-merge`: the built app in Chromium checked against a reference image."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from builder.check.regress.cases import RegressOptions
from builder.cli.shared import browser_option, dist_option, exit_2_on_error, f16_toggle_option, gpu_option, log
from builder.pipeline import limits

# The options object owns regress's defaults; the flags show them.
REGRESS_DEFAULTS = RegressOptions()


@click.command()
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
    "--extend",
    default=None,
    metavar="SIDE=PIXELS[,...]",
    help="Outpaint the first --image: pixels to add on these sides (e.g. right=256,top=64); --mask is optional then.",
)
@click.option(
    "--guidance-scale",
    type=float,
    default=REGRESS_DEFAULTS.guidance_scale,
    help=f"Base models: classifier-free guidance, {limits.GUIDANCE_MIN} (none) to {limits.GUIDANCE_MAX}  "
    "[default: the model's, from its manifest; distilled models ignore it]",
)
@click.option(
    "--negative-prompt",
    default=REGRESS_DEFAULTS.negative_prompt,
    help="Base models: what guidance steers away from  [default: none; distilled models ignore it]",
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
@browser_option(default=REGRESS_DEFAULTS.browser_path)
@click.option("--headed", is_flag=True)
@gpu_option(default=REGRESS_DEFAULTS.gpu, text="Real GPU (Vulkan) or SwiftShader.")
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
@dist_option(
    default=REGRESS_DEFAULTS.dist_dir,
    text="Serve this already-built app as it is (no node needed); default: build dist/ if stale.",
)
@click.option(
    "--precision",
    type=click.Choice(["q4", "q4f16", "fp32"]),
    default=REGRESS_DEFAULTS.precision,
    help="Force the app's graph variant (its ?precision=); default: the best the adapter runs.",
)
@f16_toggle_option(default=REGRESS_DEFAULTS.f16_toggle, note="--gpu only")
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
    extend: str | None,
    guidance_scale: float | None,
    negative_prompt: str | None,
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
    cases file that is not valid or nests too deeply; a prompt holding a NUL character; --shard I/N with N beyond the
    number of cases; a --connect, --advertise or --app-url that is no URL. An edit or inpaint case without a size
    runs at its first image's upright size (EXIF orientation applied), as `reference` and the app use it.
    """
    from builder.check.regress import run as regression
    from builder.pipeline.outpaint import parse_extend

    options = RegressOptions(
        models_dir=models_dir,
        prompt=prompt,
        seed=seed,
        size=size or REGRESS_DEFAULTS.size,
        size_given=size is not None,
        images=images,
        mask=mask,
        strength=strength,
        extend=parse_extend(extend) if extend is not None else {},
        guidance_scale=guidance_scale,
        negative_prompt=negative_prompt,
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
    with exit_2_on_error("run"):
        code = regression.main(options, log=log)
    sys.exit(code)


@click.command("regress-merge")
@click.argument("out_dir", type=click.Path(path_type=Path))
@click.argument("shard_dirs", nargs=-1, type=click.Path(path_type=Path))
def regress_merge(out_dir: Path, shard_dirs: tuple[Path, ...]) -> None:
    """Merge the --report folders of `regress --shard I/N` runs into OUT_DIR: one verdict (exit 0 pass, 1 fail, 2 could
    not run), every case's folder, each shard's browser and adapter.

    Refused (exit 2, one line, OUT_DIR untouched): shards of different cases files, flags, model repositories or
    --precision; a shard missing, given twice or interrupted; an OUT_DIR that is a non-empty folder but no report,
    or that holds a shard or lies inside one; a report naming a case folder that is no case name, or damaged in any
    field the merge reads.
    """
    from builder.check.regress import merge

    with exit_2_on_error("merge"):
        code = merge.merge(out_dir, shard_dirs, log=log)
    sys.exit(code)
