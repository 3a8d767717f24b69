"""`kernel-lab`: our WGSL kernels in Chromium, checked against numpy and timed beside onnxruntime-web."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click

from builder.cli.shared import browser_option, exit_2_on_error, gpu_option, log


@click.command("kernel-lab")
@gpu_option(default=True, text="Real GPU (Vulkan on Linux) or SwiftShader.", show_default=True)
@click.option(
    "--shapes",
    "shape_set",
    type=click.Choice(["small", "real"]),
    default=None,
    help="klein-4B's real shapes, or small ones (seconds on SwiftShader). Default: real with --gpu, else small.",
)
@click.option("--kernel", "only", multiple=True, help="Run only this kernel (repeatable); default: all of them.")
@click.option(
    "--site",
    "site_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="A lab built earlier with --build (no node needed then); default: build one now.",
)
@click.option(
    "--build",
    "build_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Only build the lab into this folder (page, onnxruntime runtime, graphs) and exit.",
)
@click.option("--out", "out_json", type=click.Path(path_type=Path), default=Path("kernel-lab.json"), show_default=True)
@click.option("--timeout", "timeout_s", default=900.0, show_default=True, type=float, help="The whole run, seconds.")
@browser_option()
def kernel_lab(
    gpu: bool,
    shape_set: str | None,
    only: tuple[str, ...],
    site_dir: Path | None,
    build_dir: Path | None,
    out_json: Path,
    timeout_s: float,
    browser_path: Path | None,
) -> None:
    """Run every kernel variant the device offers on random inputs, check it against numpy (float64), time it with
    timestamp queries beside onnxruntime-web's equivalent graph, print the table and write --out. Exit 1 when a
    check fails, 2 when the lab could not run to its end (the table and --out then hold the cases it finished)."""
    from builder.check.driver.chromium import find_chromium
    from builder.check.kernel_lab import kernels, report, site
    from builder.check.kernel_lab.run import run_cases

    with exit_2_on_error("run the kernel lab"):
        if build_dir is not None:
            site.build(build_dir, log=log)
            return
        shape_set = shape_set or ("real" if gpu else "small")
        cases = kernels.all_cases(shape_set, only=only)
        executable = find_chromium(browser_path)
        with tempfile.TemporaryDirectory(prefix="klein-kernel-lab-") as tmp:
            lab = site.check_built(site_dir) if site_dir else site.build(Path(tmp) / "lab", log=log)
            result = run_cases(cases, site_dir=lab, executable=executable, gpu=gpu, timeout_s=timeout_s, log=log)
        click.echo(report.table(result.rows))
        settings = {"gpu": gpu, "shapes": shape_set, "kernels": list(only), "browser": str(executable)}
        report.write_json(out_json, env=result.env, rows=result.rows, settings=settings, error=result.error)
        log(f"wrote {out_json}")
    if result.error is not None:
        click.echo(f"could not run the kernel lab to its end: {result.error}", err=True)
        sys.exit(2)
    if not result.passed:
        sys.exit(1)
