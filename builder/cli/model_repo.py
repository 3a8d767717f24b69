"""`convert`, `make-tiny` and `fetch`: the model repositories the app loads."""

from __future__ import annotations

from pathlib import Path

import click

from builder import DEFAULT_REPO
from builder.cli.shared import log


@click.command()
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
    from builder.convert import convert as converter
    from builder.convert.lora import parse_spec
    from builder.convert.weight_format import FORMATS

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


@click.command("make-tiny")
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
    from builder.convert import tiny

    paths = tiny.make_tiny(out, seed=seed, log=log, full_size=full_size)
    for name, path in paths.items():
        click.echo(f"{name}: {path}")


@click.command()
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
