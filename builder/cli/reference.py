"""`reference`: the pipeline on onnxruntime CPU, the image the browser's is compared with."""

from __future__ import annotations

from pathlib import Path

import click

from builder.cli.shared import log
from builder.pipeline import limits


@click.command()
@click.argument("model_dir", type=click.Path(path_type=Path))
@click.option("--prompt", required=True)
@click.option("--seed", default=42, show_default=True, type=int)
@click.option(
    "--size",
    default=None,
    help="WIDTHxHEIGHT, multiples of 16 [default: 512x512; with --image the first image's used size; with "
    "--mask always the image to inpaint's].",
)
@click.option(
    "--steps",
    default=None,
    type=click.IntRange(limits.STEPS_MIN, limits.STEPS_MAX),
    help="Denoising steps [default: the model's: 4 for distilled klein, diffusers' 50 for base models].",
)
@click.option(
    "--guidance-scale",
    type=float,
    default=None,
    help=f"Base models: classifier-free guidance scale, {limits.GUIDANCE_MIN}..{limits.GUIDANCE_MAX} (1: none) "
    "[default: diffusers' 4.0, 8.0 for inpainting]. Distilled models ignore it, as diffusers does.",
)
@click.option(
    "--negative-prompt",
    default=None,
    help='Base models with guidance: what the image should not show [default: "", as diffusers].',
)
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
    "--extend",
    default=None,
    metavar="SIDE=PIXELS[,...]",
    help="Outpaint: extend the image to inpaint (the first --image) on these sides, e.g. right=256,top=64, and "
    "repaint the new area (with --mask, the mask covers the original area and has its size).",
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
    steps: int | None,
    guidance_scale: float | None,
    negative_prompt: str | None,
    images: tuple[Path, ...],
    mask: Path | None,
    strength: float | None,
    extend: str | None,
    variants: tuple[str, ...],
    out_png: Path,
) -> None:
    """Run the whole pipeline on onnxruntime CPU (the browser's reference) and write a PNG.

    Text-to-image, editing with --image, inpainting with --image and --mask, or outpainting with --image and
    --extend, as diffusers' Flux2KleinPipeline and Flux2KleinInpaintPipeline compute them.
    """
    from builder.errors import InputError
    from builder.pipeline import reference as ref
    from builder.pipeline.outpaint import parse_extend

    extension = parse_extend(extend) if extend is not None else None
    if strength is not None and mask is None and extension is None:
        raise InputError("--strength only applies to inpainting; pass --mask or --extend too, or leave --strength out.")
    pinned = ref.parse_variants(variants)
    # Without --size: editing and inpainting take the size from their images, text-to-image 512x512.
    width: int | None = None
    height: int | None = None
    if size is not None:
        width, height = limits.parse_size(size)
    elif not images and mask is None and extension is None:
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
        guidance_scale=guidance_scale,
        negative_prompt=negative_prompt,
        extend=extension,
    )
    click.echo(str(out_png))
